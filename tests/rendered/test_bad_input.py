"""Chart problems a user can cause, each one line on stderr and exit code 2, with nothing
written: a pinned chart the cache lacks, and a chart Helm refuses to render."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "fixtures" / "bad_input"


def mlplat(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "infra.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_a_chart_missing_from_the_cache_names_chart_version_and_folders(tmp_path):
    empty = tmp_path / "charts"
    empty.mkdir()
    report = tmp_path / "prod.json"
    done = mlplat("preview", "--stack", "prod", "--json", str(report), "--quiet", env={"MLPLAT_CHART_CACHE": str(empty)})
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("mlplat: error: chart ")
    assert " is not in the chart cache (looked in " + str(empty) in line
    assert "mlplat charts pull" in line and "MLPLAT_CHART_CACHE" in line
    chart, version = line.removeprefix("mlplat: error: chart ").split()[:2]
    from infra.versions import CHARTS

    assert CHARTS[chart].version == version
    assert not report.exists()


def test_charts_list_says_what_is_missing(tmp_path):
    done = mlplat("charts", "list", env={"MLPLAT_CHART_CACHE": str(tmp_path)})
    assert done.returncode == 2
    assert done.stdout.count(": missing") == len(__import__("infra.versions", fromlist=["CHARTS"]).CHARTS)
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_chart_helm_refuses_gives_helms_error_with_the_release(tmp_path):
    report = tmp_path / "r.json"
    done = mlplat("preview", "--stack", "dev", "--program", str(BAD / "chart_that_fails_to_render.py"), "--json",
                  str(report), "--quiet")
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("mlplat: error: release jobset (chart jobset 0.12.0): helm: execution error at "
                           "(jobset/templates/prometheus/monitor.yaml")
    assert "monitoring.coreos.com/v1/ServiceMonitor" in line
    assert not report.exists()
