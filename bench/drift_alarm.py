"""How often the drift check raises a false alarm, and how often it finds a real shift: a
seeded simulation of the verdict (workloads/monitor/drift.py judge, Evidently's tests with
the two-sample chi-square and Holm's method over a run's columns).

Each trial draws a reference and a current sample of 20 mixed columns (6 normal, 5
log-normal, 4 Poisson counts of many values, 1 count of at most 5 values, 4 categories of 5
to 8 values with unequal shares), both of the given number of rows, and asks for the
verdict. Settings:

- same distribution at the minimum rows (alarm.MIN_ROWS), at 1,000 rows (the largest
  Evidently judges with p-value tests alone), and at 2,000 and 5,000 rows (a distance
  past its threshold and a Holm-rejected p-value): the false-alarm rate, goal at
  most 5% a run. For these the record also counts the runs the distances alone would have
  called drifted (Evidently's verdict above 1,000 rows, before the p-values held them);
- one normal column shifted by 0.5 sd at 500 rows: goal found in at least 90% of trials;
- one normal column shifted by 0.3 sd at 5,000 rows: still found.

Each rate is given with its 95% Wilson interval and its exact (Clopper-Pearson) 95%
interval. Settings are seeded each on its own, so `--jobs` (settings run side by side)
changes the time, not the counts. What is measured: the verdict function in this process
(or its workers), on this machine, without the plots Evidently draws for its report
(`without_plots`); no server, no files.

    .venv/bin/python bench/drift_alarm.py [--trials 200] [--seed 0] [--jobs 1]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import describe, finish, record  # noqa: E402

RESULTS = REPO / "bench" / "results" / "drift-alarm.json"
COLUMNS = 20


def sample(rng, rows: int, shift: float = 0.0):
    """One sample of the 20 mixed columns; `shift` moves the first normal column by that
    many standard deviations."""
    import numpy as np
    import pandas as pd

    columns = {f"normal{i}": rng.normal(0.0, 1.0, rows) + (shift if i == 0 else 0.0) for i in range(6)}
    columns |= {f"lognormal{i}": rng.lognormal(0.0, 0.5 + 0.25 * i, rows) for i in range(5)}
    columns |= {f"count{i}": rng.poisson(3 + 3 * i, rows) for i in range(4)}
    columns["rare_events"] = rng.poisson(0.3, rows)  # at most 5 values: judged as categories
    for i in range(4):
        shares = np.arange(1, 6 + i, dtype=float)
        columns[f"category{i}"] = rng.choice([f"c{j}" for j in range(len(shares))], rows, p=shares / shares.sum())
    return pd.DataFrame(columns)


def wilson(hits: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate."""
    if trials == 0:
        return 0.0, 1.0
    rate = hits / trials
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def clopper_pearson(hits: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate: never narrower than the truth needs."""
    from scipy.stats import beta

    tail = (1 - level) / 2
    low = 0.0 if hits == 0 else float(beta.ppf(tail, hits, trials - hits + 1))
    high = 1.0 if hits == trials else float(beta.ppf(1 - tail, hits + 1, trials - hits))
    return low, high


def distances_alone(verdict) -> bool:
    """Whether Evidently's own verdict would have said drift: a p-value test rejected by
    Holm, or a distance at or past its threshold whatever its p-value."""
    from workloads.monitor.alarm import is_p_value

    return any(c.drifted if is_p_value(c.test) else c.score >= c.threshold for c in verdict.columns)


def without_plots() -> None:
    """Evidently draws a plotly figure of each column for its report's widget: about two
    thirds of a verdict's time on samples of a few thousand rows, and nothing the verdict
    reads (a run with and without it gives the same verdict, column for column). The
    simulation does not draw it, so 200 runs a setting fit a shared 2-core machine; its
    seconds are the simulation's, not the check's (docs/monitoring.md has the check's)."""
    from evidently.metrics.column_statistics import ValueDriftCalculation

    ValueDriftCalculation._render = lambda self, *args, **kwargs: []


def run_trials(setting: dict, first: int, stop: int, seed: int) -> dict:
    """Trials first..stop-1 of a setting, from its own random stream: the samples of the
    trials before `first` are drawn and dropped, so a setting split into parts judges the
    same samples as one run through."""
    import numpy as np

    from workloads.monitor.drift import judge

    without_plots()
    rng = np.random.default_rng([seed, setting["stream"]])
    for _ in range(first):
        sample(rng, setting["rows"]), sample(rng, setting["rows"], setting["shift"])
    counts, started = {"hits": 0, "named": 0, "alone": 0}, time.perf_counter()
    for _ in range(first, stop):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            verdict = judge(sample(rng, setting["rows"]), sample(rng, setting["rows"], setting["shift"]))
        counts["hits"] += verdict.drift
        counts["named"] += any(c.column == "normal0" for c in verdict.drifted)
        counts["alone"] += distances_alone(verdict)
    return {**counts, "seconds": time.perf_counter() - started}


def summary(setting: dict, trials: int, parts: list[dict]) -> dict:
    hits = sum(part["hits"] for part in parts)
    low, high = wilson(hits, trials)
    exact = clopper_pearson(hits, trials)
    return {**setting, "trials": trials, "drift_runs": hits, "rate": round(hits / trials, 4),
            "wilson95": [round(low, 4), round(high, 4)], "clopper_pearson95": [round(b, 4) for b in exact],
            "shifted_column_named": sum(part["named"] for part in parts),
            "distances_alone_runs": sum(part["alone"] for part in parts),
            "seconds": round(sum(part["seconds"] for part in parts), 1)}


def settings(min_rows: int) -> list[dict]:
    """Each with its own random stream (with --seed): the first five keep the streams they
    had before the 5,000-row setting was added, so their samples are the ones measured then."""
    return [
        {"name": f"same distribution, {min_rows} rows (the minimum)", "rows": min_rows, "shift": 0.0,
         "goal": "false alarms <= 5%", "stream": 0},
        {"name": "same distribution, 1,000 rows", "rows": 1000, "shift": 0.0, "goal": "false alarms <= 5%",
         "stream": 1},
        {"name": "same distribution, 2,000 rows", "rows": 2000, "shift": 0.0, "goal": "false alarms <= 5%",
         "stream": 2},
        {"name": "same distribution, 5,000 rows", "rows": 5000, "shift": 0.0, "goal": "false alarms <= 5%",
         "stream": 5},
        {"name": "0.5 sd shift in one column, 500 rows", "rows": 500, "shift": 0.5, "goal": "found >= 90%",
         "stream": 3},
        {"name": "0.3 sd shift in one column, 5,000 rows", "rows": 5000, "shift": 0.3, "goal": "found", "stream": 4},
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="parts of settings run side by side (processes)")
    parser.add_argument("--part", type=int, default=50, help="trials a process judges at a time")
    parser.add_argument("--rows", type=int, nargs="+", help="only the settings of these sample sizes")
    opts = options.parse(parser, {"trials": 1})  # smoke: one trial of each setting
    opts.out = options.output(opts, RESULTS)

    from concurrent.futures import ProcessPoolExecutor, as_completed

    from workloads.monitor.alarm import MIN_ROWS

    machine = record()
    started = time.perf_counter()
    chosen = [setting for setting in settings(MIN_ROWS) if not opts.rows or setting["rows"] in opts.rows]
    with ProcessPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        # The largest samples first, so the workers end close together; each setting draws
        # from its own stream, whatever the order and the parts.
        futures = {pool.submit(run_trials, setting, first, min(first + opts.part, opts.trials), opts.seed): index
                   for index, setting in sorted(enumerate(chosen), key=lambda item: -item[1]["rows"])
                   for first in range(0, opts.trials, max(1, opts.part))}
        parts: dict[int, list[dict]] = {index: [] for index in range(len(chosen))}
        expected = {index: list(futures.values()).count(index) for index in parts}
        done = {}
        for future in as_completed(futures):  # each line as its setting ends: a long run shows progress
            index = futures[future]
            parts[index].append(future.result())
            if len(parts[index]) < expected[index]:
                continue
            row = done[index] = summary(chosen[index], opts.trials, parts[index])
            low, high = row["wilson95"]
            print(f"{row['name']:<44} drift in {row['drift_runs']:>3}/{row['trials']} runs = {row['rate']:6.1%} "
                  f"(95% {low:.1%}-{high:.1%}; exact upper {row['clopper_pearson95'][1]:.1%}); goal {row['goal']}; "
                  f"distances alone {row['distances_alone_runs']}", flush=True)
    rows_out = [done[index] for index in range(len(chosen))]
    machine = finish(machine)
    print(describe(machine))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps({
        "machine": describe(machine), "cpu": machine, "date": date.today().isoformat(),
        "measured": "the verdict function (Evidently's tests, two-sample chi-square, a p-value for every column "
                    "held by Holm over a run's columns, above 1,000 rows with the distance past its threshold too) "
                    "in process on seeded synthetic samples, without Evidently's plots (which the verdict does not "
                    "read); no server, no files",
        "jobs": opts.jobs, "part": opts.part, "wall_seconds": round(time.perf_counter() - started, 1),
        "columns": COLUMNS, "min_rows": MIN_ROWS, "seed": opts.seed, "settings": rows_out}, indent=2) + "\n")
    print(f"wrote {opts.out.relative_to(REPO) if opts.out.is_relative_to(REPO) else opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
