"""The manifests folder holds the objects of the last preview only: an object the program
no longer makes leaves no file behind, and a folder the preview did not write is never
replaced."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.preview.report import MANIFESTS_MARKER, write_manifests
from tests.conftest import preview

REPO = Path(__file__).resolve().parents[2]


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_second_preview_replaces_the_folder_whole(tmp_path):
    result = preview("dev-cluster")
    out = tmp_path / "dev-cluster-manifests"
    count = write_manifests(result, out)
    first = files_in(out)
    # What an object the program made last time, and no longer makes, left behind.
    (out / "deployment-research-gone.yaml").write_text("kind: Deployment\n")
    (out / "charts" / "retired-chart").mkdir()
    (out / "charts" / "retired-chart" / "release.yaml").write_text("chart: retired\n")
    assert write_manifests(result, out) == count
    assert files_in(out) == first
    assert MANIFESTS_MARKER in first and count == len([f for f in first if not f.endswith(
        ("release.yaml", MANIFESTS_MARKER))])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev-cluster-manifests"]  # no temporary folder left


def test_a_folder_of_someone_elses_files_is_not_replaced(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me\n")
    with pytest.raises(ValueError, match=f"holds files that `mlplat preview` did not write \\(no {MANIFESTS_MARKER}\\)"):
        write_manifests(preview("dev-cluster"), out)
    assert files_in(out) == {"notes.txt"}


@pytest.mark.parametrize("args, folder", [(["--stack", "dev", "--manifests", "mine"], "mine"),
                                          (["--env", "dev", "--out", "reports"], "reports/dev-cluster-manifests")])
def test_the_cli_refuses_such_a_folder_before_any_work(tmp_path, args, folder):
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "notes.txt").write_text("keep me\n")
    done = subprocess.run([sys.executable, "-m", "infra.cli", "preview", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0] == (f"mlplat: error: {folder}: holds files that `mlplat preview` did not write (no "
                        f"{MANIFESTS_MARKER}); the preview replaces the whole manifests folder, so name a new or "
                        "empty folder, or remove this one")
    assert files_in(tmp_path) == {f"{folder}/notes.txt"}
