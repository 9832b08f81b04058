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

from workloads.monitor.drift import compare

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
    assert len(report["columns"]) == 20
    assert "drift: f07: Wasserstein distance (normed)" in done.stdout


def test_two_samples_of_one_distribution_show_no_drift_in_19_of_20_seeded_trials():
    clean = sum(not any(r.drifted for r in compare(sample(100 + 2 * trial), sample(101 + 2 * trial)))
                for trial in range(20))
    assert clean >= 19


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
