"""The README's benchmark figures are what the records say, and each record stays inside its
own benchmark's bounds: a serving gain no larger than the ceiling measured beside it, a
model FLOPs utilisation between 0 and 1, the drift check's false-alarm rate within what the
README claims. A record that breaks one came from a disturbed run or a broken benchmark."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))


def record(name: str) -> dict:
    path = RESULTS / f"{name}.json"
    if not path.exists():
        pytest.fail(f"bench/results/{name}.json is missing: run bench/{name.replace('-', '_')}.py")
    return json.loads(path.read_text())


def test_the_readme_table_is_the_records(tmp_path):
    from bench import report  # draws with matplotlib, which make setup installs (the bench extra)

    readme = (REPO / "README.md").read_text()
    committed = report.START + readme.split(report.START, 1)[1].split(report.END, 1)[0] + report.END
    # The plots go to a scratch folder (linked by bare name there): the committed ones are
    # never redrawn by a test, which a benchmark's smoke run, beside it, checks untouched.
    assert committed.replace("](docs/bench/", "](") == report.table(plots=tmp_path), \
        "README's benchmark table is stale: run .venv/bin/python bench/report.py"


def test_a_make_test_run_that_did_not_pass_says_so_in_its_row(tmp_path, monkeypatch):
    from bench import report

    run = {"commit": "abc1234", "total_s": 830, "setup_s": 34, "tests_s": 796, "tests_cpu_s": 1475,
           "import_torch_cpu_s": [1.75, 1.5], "machine": "AMD EPYC (2 cores)", "date": "2026-12-01"}
    record = {**run, "passed": False, "summary": "2913 passed, 2 errors in 793.46s",
              "earlier": [{"total_s": 769, "passed": True}, {"total_s": 700, "passed": False}]}
    (tmp_path / "make-test-time-amd-epyc.json").write_text(json.dumps(record))
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    row = next(line for line in report.table(tmp_path).splitlines() if "abc1234" in line)
    assert "did not pass: 2913 passed, 2 errors" in row and "12.8, 11.7 (did not pass) min" in row
    (tmp_path / "make-test-time-amd-epyc.json").write_text(json.dumps({**record, "passed": True}))
    assert "did not pass: " not in next(line for line in report.table(tmp_path).splitlines() if "abc1234" in line)


def test_each_serving_gain_is_within_the_ceiling_measured_beside_it():
    from bench.report import CEILING_SLACK

    for c in record("serve")["comparisons"]:
        assert 0 < c["throughput_speedup"] <= c["ceiling"] * CEILING_SLACK, c["sequence"]


def test_each_training_record_has_a_possible_utilisation():
    for path in sorted(RESULTS.glob("train-*.json")):
        for name, run in json.loads(path.read_text())["runs"].items():
            assert run["mfu"] is None or 0 < run["mfu"] <= 1, (path.name, name)


def test_the_drift_checks_false_alarm_rate_is_what_the_readme_claims():
    data = record("drift-alarm")
    rates = {row["name"]: row for row in data["settings"]}
    # the claim is for every size: the smallest judged and one where distances decided alone
    assert {data["min_rows"], 5000} <= {row["rows"] for row in data["settings"] if row["shift"] == 0}
    for name, row in rates.items():
        if row["shift"] == 0:
            # README: at most 5% of runs at every size, where Holm holds every column's p-value
            assert row["rate"] <= 0.05, name
            assert row["clopper_pearson95"][0] <= row["rate"] <= row["clopper_pearson95"][1], name
        else:
            assert row["rate"] >= (0.9 if row["rows"] == 500 else 0.5), name
