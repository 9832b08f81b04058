"""What bench/test_time.py --make-test records beside the wall time: the slowest test files
from pytest's JUnit report, and the CPU seconds, which cannot exceed what the machine's cores
give in that time; one record per CPU model, named for it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.test_time import (  # noqa: E402
    EARLIER_RUNS, FAILURE_CHARS, FAILURE_REPORTS, MAKE_TEST_RESULTS, SLOWEST_FILES, cpu_slug, earlier_runs,
    failure_reports, slowest_files)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.services.test_pipeline" name="test_golden_path" time="120.5"/>
  <testcase classname="tests.services.test_pipeline" name="test_crash" time="100.0"/>
  <testcase classname="tests.unit.test_config.TestStacks" name="test_one" time="2.25"/>
  <testcase classname="tests.unit.test_config.TestStacks" name="test_two" time="0.25"/>
  <testcase classname="tests.unit.test_config" name="test_three" time="1"/>
  <testcase classname="tests.workloads.serve.test_export" name="test_parity" time="30"/>
</testsuite></testsuites>
"""


def test_the_slowest_files_are_summed_per_file_classes_folded_in(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert slowest_files(junit) == {"tests/services/test_pipeline.py": 220.5,
                                    "tests/workloads/serve/test_export.py": 30.0,
                                    "tests/unit/test_config.py": 3.5}
    # Only the slowest are kept, slowest first.
    many = "".join(f'<testcase classname="tests.unit.test_{i:02d}" name="t" time="{i}"/>' for i in range(30))
    junit.write_text(f"<testsuites><testsuite>{many}</testsuite></testsuites>")
    kept = slowest_files(junit)
    assert list(kept) == [f"tests/unit/test_{i:02d}.py" for i in range(29, 29 - SLOWEST_FILES, -1)]


def test_a_suite_that_never_started_or_died_writing_its_report_has_no_slowest_files(tmp_path):
    assert slowest_files(tmp_path / "junit.xml") == {}
    (tmp_path / "junit.xml").write_text(JUNIT[:200])  # cut off mid-element
    assert slowest_files(tmp_path / "junit.xml") == {}


def test_a_file_that_failed_to_collect_is_left_out(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite><testcase classname="" name="tests.unit.test_broken" time="0.5"/>'
                     '<testcase classname="tests.unit.test_ok" name="t" time="1"/></testsuite></testsuites>')
    assert slowest_files(junit) == {"tests/unit/test_ok.py": 1.0}


def test_a_failed_runs_reports_are_kept_bounded_and_a_clean_run_has_none(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert failure_reports(junit) == {}
    assert failure_reports(tmp_path / "missing.xml") == {}
    long = "x" * (FAILURE_CHARS + 500) + "the torchrun's last line"
    cases = [f'<testcase classname="tests.workloads.test_parallel" name="t{i}" time="1">'
             f'<error message="failed on setup with &quot;AssertionError&quot;">{long}</error></testcase>'
             for i in range(FAILURE_REPORTS + 2)]
    cases.append('<testcase classname="tests.unit.test_a" name="f" time="1"><failure message="assert 1 == 2">'
                 'E assert 1 == 2</failure></testcase>')
    junit.write_text(f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>")
    reports = failure_reports(junit)
    assert len(reports) == FAILURE_REPORTS
    first = reports["tests.workloads.test_parallel::t0 (error)"]
    assert first.endswith("the torchrun's last line") and len(first) <= FAILURE_CHARS + 4
    junit.write_text('<testsuites><testsuite><testcase classname="tests.unit.test_a" name="f" time="1">'
                     '<failure message="assert 1 == 2">E assert 1 == 2</failure></testcase></testsuite></testsuites>')
    assert failure_reports(junit) == {"tests.unit.test_a::f (failure)": "assert 1 == 2\nE assert 1 == 2"}


RECORDS = sorted((REPO / "bench" / "results").glob(MAKE_TEST_RESULTS.format(cpu="*")))


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_the_recorded_cpu_fits_the_machines_cores(path):
    record = json.loads(path.read_text())
    cores = record["cpu"]["cores"]
    assert 0 < record["tests_cpu_s"] <= cores * record["tests_s"] * 1.02
    assert abs(record["tests_cores_busy"] - record["tests_cpu_s"] / record["tests_s"]) < 0.01
    assert all(0 < s < 10 for s in record["import_torch_cpu_s"]) and len(record["import_torch_cpu_s"]) == 2
    assert record["slowest_files_s"] and all(name.startswith("tests/") for name in record["slowest_files_s"])
    # Named for the CPU model it ran on: a run on one model never stands in for another's.
    assert path.name == MAKE_TEST_RESULTS.format(cpu=cpu_slug(record["cpu"]["cpu"]))
    earlier = record.get("earlier", [])
    assert len(earlier) <= EARLIER_RUNS
    assert all(run["total_s"] > 0 and run["commit"] and run["date"] <= record["date"] for run in earlier)


def test_each_run_keeps_the_ones_before_it_newest_first_and_bounded(tmp_path):
    path = tmp_path / "make-test-time-amd-epyc.json"
    assert earlier_runs(path) == []  # the first run on this CPU
    path.write_text("{not json")
    assert earlier_runs(path) == []
    for run in range(EARLIER_RUNS + 3):  # each run writes its record over the last one's
        record = {"commit": f"c{run}", "date": "2026-12-01", "total_s": 600 + run, "tests_cpu_s": 1200,
                  "import_torch_cpu_s": [1.2, 1.2], "passed": True, "slowest_files_s": {"tests/x.py": 1}}
        record["earlier"] = earlier_runs(path)
        path.write_text(json.dumps(record))
    kept = json.loads(path.read_text())["earlier"]
    assert [r["commit"] for r in kept] == [f"c{run}" for run in range(EARLIER_RUNS + 1, 1, -1)]
    assert all("slowest_files_s" not in r and "earlier" not in r for r in kept)  # summaries, not nested records


def test_a_record_is_named_for_its_cpu_model():
    assert RECORDS, "no bench/results/make-test-time-*.json: run bench/test_time.py --make-test"
    assert cpu_slug("Intel(R) Xeon(R) Platinum 8488C") == "intel-xeon-platinum-8488c"
    assert cpu_slug("AMD EPYC 9R14 96-Core Processor") == "amd-epyc-9r14-96-core-processor"
    assert cpu_slug("AMD EPYC") != cpu_slug("AMD EPYC 7R13")  # two models, two records
    assert cpu_slug("") == cpu_slug("(TM)") == "unknown"
