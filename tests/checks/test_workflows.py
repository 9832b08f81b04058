"""The GitHub workflows users run: valid against GitHub's workflow schema, and clean under
zizmor's offline audits (findings fixed, or justified in .github/zizmor.yml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def test_there_are_workflows():
    assert {p.name for p in WORKFLOWS} >= {"preview.yml", "deploy.yml"}


def test_workflows_match_the_github_schema():
    done = subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_offline_finds_nothing():
    done = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--no-progress", "--config", str(REPO / ".github" / "zizmor.yml"),
         str(REPO / ".github" / "workflows")],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_every_action_is_pinned_to_a_commit():
    import re

    for path in WORKFLOWS:
        for ref in re.findall(r"uses:\s*([^\s#]+)", path.read_text()):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", ref), f"{path.name}: {ref}"
