"""The drift check as its job runs it (`python -m workloads.monitor drift`), on seeded
samples: a small shift in one column of twenty is found and named; two samples of one
distribution are mostly called undrifted; bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workloads.monitor import alarm
from workloads.monitor.alarm import MIN_ROWS, holm
from workloads.monitor.drift import column_kinds, compare, judge

REPO = Path(__file__).resolve().parents[2]
COLUMNS = [f"f{i:02d}" for i in range(20)]


def sample(seed: int, rows: int = 5000, shift: dict[str, float] | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(rows, len(COLUMNS))), columns=COLUMNS)
    for column, sd in (shift or {}).items():
        frame[column] += sd  # the columns have standard deviation 1
    return frame


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workloads.monitor", "drift", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def write(frame: pd.DataFrame, path: Path) -> str:
    frame.to_parquet(path, index=False)
    return str(path)


def test_a_shift_of_0_3_sd_in_one_of_20_columns_is_found_and_named(tmp_path):
    reference = write(sample(1), tmp_path / "reference.parquet")
    current = write(sample(2, shift={"f07": 0.3}), tmp_path / "current.parquet")
    done = run("--reference", reference, "--current", current, "--json", str(tmp_path / "drift.json"))
    assert done.returncode == 1, done.stderr
    report = json.loads((tmp_path / "drift.json").read_text())
    assert report["drift"] is True and report["rows"] == {"reference": 5000, "current": 5000}
    [drifted] = report["drifted"]
    assert drifted["column"] == "f07" and drifted["drifted"] is True
    assert drifted["test"] == "Wasserstein distance (normed)" and drifted["score"] > drifted["threshold"]
    # Above 1,000 rows the distance is not enough: its p-value beside it passed Holm's first level.
    assert drifted["p_value_test"] == "K-S p_value" and drifted["p_value"] <= drifted["level"] == 0.05 / 20
    assert len(report["columns"]) == 20
    assert "drift: f07: Wasserstein distance (normed)" in done.stdout
    assert "; K-S p_value " in done.stdout and "(Holm level 0.0025)" in done.stdout


def mixed(rng: np.random.Generator, rows: int, shift: float = 0.0) -> pd.DataFrame:
    """20 mixed columns as the simulation draws them (bench/drift_alarm.py)."""
    from bench.drift_alarm import sample as drawn

    return drawn(rng, rows, shift)


def test_unchanged_data_at_the_minimum_rows_is_called_drifted_rarely_across_20_mixed_columns():
    """The false-alarm guard (docs/monitoring.md): 20 seeded runs of 20 mixed columns
    (normal, log-normal, counts, a count of few values, categories) at 300 rows each side.
    Each column on its own at p < 0.05 drifts 17 of these runs; Evidently's one-sample
    chi-square, even held with Holm, 15."""
    drifted = sum(judge(mixed(rng, MIN_ROWS), mixed(rng, MIN_ROWS)).drift
                  for rng in (np.random.default_rng([7, seed]) for seed in range(20)))
    assert drifted <= 3


def test_unchanged_heavy_tailed_data_above_1000_rows_is_called_drifted_rarely():
    """The false-alarm guard where Evidently judges by distances (docs/monitoring.md): 10
    seeded runs of 20 log-normal columns (sigma 2) at 2,000 rows each side. The Wasserstein
    distance of such a column, normed by its standard deviation, passes 0.1 by chance in
    about 6% of columns, so the distances alone call most of these runs drifted; held by
    Holm's p-values too, almost none."""
    def heavy(rng: np.random.Generator) -> pd.DataFrame:
        return pd.DataFrame({f"x{i}": rng.lognormal(0.0, 2.0, 2000) for i in range(20)})

    verdicts = [judge(heavy(rng), heavy(rng)) for rng in (np.random.default_rng([13, seed]) for seed in range(10))]
    by_distance = sum(any(c.score >= c.threshold for c in v.columns) for v in verdicts)
    assert by_distance >= 5  # what this guards against happens in these runs
    assert sum(v.drift for v in verdicts) <= 1, [[c.as_dict() for c in v.drifted] for v in verdicts]


def test_a_shift_too_small_to_matter_is_not_drift_however_many_rows():
    """At 50,000 rows Kolmogorov-Smirnov finds a 0.05 sd shift (p near 1e-9, far below
    Holm's levels) that no one would page for; its distance, 0.05, is under the threshold."""
    rng = np.random.default_rng(17)
    reference = pd.DataFrame(rng.normal(size=(50_000, 3)), columns=["a", "b", "c"])
    current = pd.DataFrame(rng.normal(size=(50_000, 3)), columns=["a", "b", "c"])
    current["a"] += 0.05
    result = {c.column: c for c in judge(reference, current).columns}["a"]
    _, p_value = alarm.p_value(reference["a"], current["a"], categorical=False)
    assert p_value < 0.05 / 3 and result.score < result.threshold
    assert not result.drifted
    current["a"] += 0.25  # 0.3 sd: both
    assert [c.column for c in judge(reference, current).drifted] == ["a"]


def test_half_a_standard_deviation_in_one_of_20_mixed_columns_is_found_at_500_rows():
    for seed in range(5):
        rng = np.random.default_rng([11, seed])
        verdict = judge(mixed(rng, 500), mixed(rng, 500, shift=0.5))
        assert [c.column for c in verdict.drifted] == ["normal0"], [c.as_dict() for c in verdict.drifted]


@pytest.mark.parametrize("rows", [MIN_ROWS, 2000], ids=["p-values", "distances"])
def test_a_judgment_draws_no_plots_and_says_what_it_says_with_them(monkeypatch, rows):
    """Evidently's plots are switched off while it judges (most of a judgment's CPU); the
    verdict is the one Evidently gives with its plots drawn, and its drawing is put back."""
    import contextlib

    import plotly.graph_objs as go
    from evidently.metrics.column_statistics import ValueDriftCalculation

    from workloads.monitor import drift

    rng = np.random.default_rng([5, rows])
    reference, current = mixed(rng, rows), mixed(rng, rows, shift=0.5)
    figures = []
    make = go.Figure.__init__

    def counted(self, *args, **kwargs):
        figures.append(1)
        make(self, *args, **kwargs)

    monkeypatch.setattr(go.Figure, "__init__", counted)
    render = ValueDriftCalculation.__dict__["_render"]
    quiet = judge(reference, current)
    assert figures == [] and ValueDriftCalculation.__dict__["_render"] is render
    monkeypatch.setattr(drift, "_without_plots", contextlib.nullcontext)
    drawn = judge(reference, current)
    assert figures  # Evidently drew them this time
    assert quiet.as_dict() == drawn.as_dict() and quiet.drift


def test_holm_holds_each_p_value_to_its_rank():
    # 0.001 <= 0.05/4 and 0.013 <= 0.05/3 are rejected; 0.03 > 0.05/2 stops the steps, so
    # 0.04, under 0.05 on its own, is not.
    assert holm([("d", 0.04), ("a", 0.001), ("c", 0.03), ("b", 0.013)]) == {
        "a": (0.0125, True), "b": (pytest.approx(0.05 / 3), True), "c": (0.025, False), "d": (0.05, False)}
    assert holm([("a", 0.049)]) == {"a": (0.05, True)}  # one column: its own 5%
    assert holm([]) == {}


def test_categories_are_judged_two_sample_against_a_reference_that_is_itself_a_sample():
    from scipy.stats import chi2_contingency

    from workloads.monitor.alarm import TWO_SAMPLE_CHI_SQUARE_NAME, _two_sample_chi_square

    reference = pd.Series(["a"] * 40 + ["b"] * 35 + ["c"] * 25)
    current = pd.Series(["a"] * 30 + ["b"] * 40 + ["c"] * 28 + ["d"] * 2)
    p_value, _ = _two_sample_chi_square(reference, current, None, 0.05)
    table = [[40, 35, 25, 0], [30, 40, 28, 2]]
    assert p_value == pytest.approx(chi2_contingency(table, correction=False).pvalue)
    [result] = compare(pd.DataFrame({"k": reference}), pd.DataFrame({"k": current}))
    assert result.test == TWO_SAMPLE_CHI_SQUARE_NAME and result.score == pytest.approx(p_value)


def test_booleans_are_categorical():
    numerical, categorical = column_kinds(pd.DataFrame({"flag": [True, False], "x": [1.0, 2.0], "n": [1, 2]}))
    assert numerical == ["x", "n"] and categorical == ["flag"]


def test_a_sample_under_the_minimum_rows_is_refused_by_name(tmp_path):
    reference = write(sample(1, rows=MIN_ROWS), tmp_path / "r.parquet")
    current = write(sample(2, rows=MIN_ROWS - 1), tmp_path / "c.parquet")
    line = _one_line(run("--reference", reference, "--current", current))
    assert f"--current {current}: {MIN_ROWS - 1} rows; fewer than {MIN_ROWS} are not judged" in line
    assert run("--reference", reference, "--current", current, "--min-rows", str(MIN_ROWS - 1)).returncode in (0, 1)


def test_no_drift_exits_0(tmp_path):
    done = run("--reference", write(sample(3), tmp_path / "r.parquet"),
               "--current", write(sample(4), tmp_path / "c.parquet"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("0 of 20 columns drifted (5000 reference rows, 5000 current rows)")


def test_a_changed_category_mix_is_drift(tmp_path):
    rng = np.random.default_rng(5)
    reference = pd.DataFrame({"country": rng.choice(["ae", "sa", "qa"], 5000), "amount": rng.normal(size=5000)})
    current = pd.DataFrame({"country": rng.choice(["ae", "sa", "qa"], 5000, p=[0.2, 0.4, 0.4]),
                            "amount": rng.normal(size=5000)})
    results = {r.column: r for r in compare(reference, current)}
    assert results["country"].drifted and not results["amount"].drifted
    assert results["country"].test != results["amount"].test


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr
    return lines[0]


def test_current_columns_that_do_not_match_are_refused(tmp_path):
    reference = write(sample(1, rows=100), tmp_path / "r.parquet")
    current = write(sample(2, rows=100).rename(columns={"f03": "f3"}), tmp_path / "c.parquet")
    line = _one_line(run("--reference", reference, "--current", current))
    assert "its columns do not match the reference's: it lacks f03 and has f3 that the reference does not" in line


def test_an_empty_file_is_refused(tmp_path):
    reference = write(sample(1, rows=100), tmp_path / "r.parquet")
    current = write(sample(2, rows=100).iloc[:0], tmp_path / "c.parquet")
    assert "is empty (0 rows, 20 columns)" in _one_line(run("--reference", reference, "--current", current))


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00 not parquet at all"])
def test_a_file_that_is_not_parquet_is_refused(tmp_path, content):
    reference = write(sample(1, rows=100), tmp_path / "r.parquet")
    (tmp_path / "c.parquet").write_bytes(content)
    line = _one_line(run("--reference", reference, "--current", str(tmp_path / "c.parquet")))
    assert "not a readable Parquet file" in line


def test_a_missing_file_is_refused(tmp_path):
    line = _one_line(run("--reference", str(tmp_path / "nope.parquet"), "--current", str(tmp_path / "x.parquet")))
    assert line == f"error: --reference {tmp_path / 'nope.parquet'}: no such file"
