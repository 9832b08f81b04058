"""How often the drift check raises a false alarm, and how often it finds a real shift: a
seeded simulation of the verdict (workloads/monitor/drift.py judge, Evidently's tests with
the two-sample chi-square and Holm's method over a run's columns).

Each trial draws a reference and a current sample of 20 mixed columns (6 normal, 5
log-normal, 4 Poisson counts of many values, 1 count of at most 5 values, 4 categories of 5
to 8 values with unequal shares), both of the given number of rows, and asks for the
verdict. Settings:

- same distribution at the minimum rows (alarm.MIN_ROWS), at 1,000 rows (the largest
  judged with p-value tests) and at 2,000 rows (distance tests): the false-alarm rate,
  goal at most 5% a run;
- one normal column shifted by 0.5 sd at 500 rows: goal found in at least 90% of trials;
- one normal column shifted by 0.3 sd at 5,000 rows: still found.

Each rate is given with its 95% Wilson interval. What is measured: the verdict function in
this process, on this machine; no server, no files.

    .venv/bin/python bench/drift_alarm.py [--trials 200] [--seed 0]
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


def settings(min_rows: int) -> list[dict]:
    return [
        {"name": f"same distribution, {min_rows} rows (the minimum)", "rows": min_rows, "shift": 0.0,
         "goal": "false alarms <= 5%"},
        {"name": "same distribution, 1,000 rows", "rows": 1000, "shift": 0.0, "goal": "false alarms <= 5%"},
        {"name": "same distribution, 2,000 rows", "rows": 2000, "shift": 0.0, "goal": "false alarms <= 5%"},
        {"name": "0.5 sd shift in one column, 500 rows", "rows": 500, "shift": 0.5, "goal": "found >= 90%"},
        {"name": "0.3 sd shift in one column, 5,000 rows", "rows": 5000, "shift": 0.3, "goal": "found"},
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    opts = parser.parse_args()

    import numpy as np

    from workloads.monitor.alarm import MIN_ROWS
    from workloads.monitor.drift import judge

    machine = record()
    rows_out = []
    for index, setting in enumerate(settings(MIN_ROWS)):
        rng = np.random.default_rng([opts.seed, index])
        hits, named, started = 0, 0, time.perf_counter()
        for _ in range(opts.trials):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                verdict = judge(sample(rng, setting["rows"]), sample(rng, setting["rows"], setting["shift"]))
            hits += verdict.drift
            named += any(c.column == "normal0" for c in verdict.drifted)
        low, high = wilson(hits, opts.trials)
        row = {**setting, "trials": opts.trials, "drift_runs": hits, "rate": round(hits / opts.trials, 4),
               "wilson95": [round(low, 4), round(high, 4)], "shifted_column_named": named,
               "seconds": round(time.perf_counter() - started, 1)}
        rows_out.append(row)
        print(f"{setting['name']:<44} drift in {hits:>3}/{opts.trials} runs = {hits / opts.trials:6.1%} "
              f"(95% {low:.1%}-{high:.1%}); goal {setting['goal']}", flush=True)
    machine = finish(machine)
    print(describe(machine))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps({
        "machine": describe(machine), "cpu": machine, "date": date.today().isoformat(),
        "measured": "the verdict function (Evidently's tests, two-sample chi-square, Holm over a run's columns) in "
                    "process on seeded synthetic samples; no server, no files",
        "columns": COLUMNS, "min_rows": MIN_ROWS, "seed": opts.seed, "settings": rows_out}, indent=2) + "\n")
    print(f"wrote {opts.out.relative_to(REPO) if opts.out.is_relative_to(REPO) else opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
