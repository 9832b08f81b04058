"""Chart problems a user can cause, each one line on stderr and exit code 2, with nothing
written: a pinned chart the cache lacks, and a chart Helm refuses to render."""

from __future__ import annotations

from pathlib import Path

from infra.cli import main
from infra.versions import CHARTS

BAD = Path(__file__).resolve().parents[1] / "fixtures" / "bad_input"


def test_a_chart_missing_from_the_cache_names_chart_version_and_folders(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "charts"
    empty.mkdir()
    monkeypatch.setenv("MLPLAT_CHART_CACHE", str(empty))
    # Charts are the cluster layer's (the cloud layer installs none).
    report = tmp_path / "prod-cluster.json"
    assert main(["preview", "--stack", "prod-cluster", "--json", str(report), "--quiet"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mlplat: error: chart ")
    assert " is not in the chart cache (looked in " + str(empty) in line
    assert "mlplat charts pull" in line and "MLPLAT_CHART_CACHE" in line
    chart, version = line.removeprefix("mlplat: error: chart ").split()[:2]
    assert CHARTS[chart].version == version
    assert not report.exists()


def test_charts_list_says_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLPLAT_CHART_CACHE", str(tmp_path))
    assert main(["charts", "list"]) == 2
    out, err = capsys.readouterr()
    assert out.count(": missing") == len(CHARTS)
    assert len(err.strip().splitlines()) == 1


def test_a_chart_helm_refuses_gives_helms_error_with_the_release(tmp_path, capsys):
    report = tmp_path / "r.json"
    code = main(["preview", "--stack", "dev", "--program", str(BAD / "chart_that_fails_to_render.py"), "--json",
                 str(report), "--quiet"])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2, line
    assert line.startswith("mlplat: error: release jobset (chart jobset 0.12.0): helm: execution error at "
                           "(jobset/templates/prometheus/monitor.yaml")
    assert "monitoring.coreos.com/v1/ServiceMonitor" in line
    assert not report.exists()
