"""Third-party scan of what will be applied: checkov's Kubernetes checks on every object
of every stack in both device-plugin modes, the charts' objects included, as the offline
preview renders them. checkov runs from its own virtualenv
(.venv-checkov, made by `make setup`) with --skip-download; every failure must be listed
with its reason in checkov_skips.yaml, and every listed skip must still be needed."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.preview.report import kubernetes_objects
from tests.conftest import VARIANTS, preview

REPO = Path(__file__).resolve().parents[2]
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
SKIPS = yaml.safe_load((Path(__file__).parent / "checkov_skips.yaml").read_text())["skips"]


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("manifests")
    written = 0
    seen: set[str] = set()
    for stack, mode in VARIANTS:
        # Each distinct object once: most chart objects are the same in every stack, and
        # checkov costs time per file. CRDs hold schemas, not workloads: no checkov
        # Kubernetes check reads them.
        for body in kubernetes_objects(preview(stack, mode)):
            if body["kind"] == "CustomResourceDefinition":
                continue
            text = yaml.dump(body, Dumper=yaml.CSafeDumper, sort_keys=True)
            if text in seen:
                continue
            seen.add(text)
            (root / f"{len(seen):05d}.yaml").write_text(text)
            written += 1
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: run `make setup` (checkov needs its own virtualenv)")
    if written == 0:
        return []
    done = subprocess.run(
        [str(CHECKOV), "--directory", str(root), "--framework", "kubernetes", "--skip-download", "--quiet",
         "--compact", "--output", "json"],
        capture_output=True, text=True, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"}, timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = []
    for entry in reports:
        for check in entry.get("results", {}).get("failed_checks", []):
            failed.append({"id": check["check_id"], "name": check["check_name"], "resource": check["resource"],
                           "file": check["file_path"]})
    return failed


def _skip_for(finding: dict) -> dict | None:
    for skip in SKIPS:
        if skip["id"] == finding["id"] and (
            not skip.get("resources") or any(fnmatch.fnmatch(finding["resource"], p) for p in skip["resources"])
        ):
            return skip
    return None


def test_every_skip_has_a_reason():
    for skip in SKIPS:
        assert skip.get("id", "").startswith("CKV"), skip
        assert len(skip.get("reason", "")) > 20, f"{skip['id']}: write down why it is accepted"


def test_no_failure_without_a_written_reason(findings):
    unexplained = [f"{f['id']} {f['name']}: {f['resource']} ({f['file']})" for f in findings if _skip_for(f) is None]
    assert unexplained == [], "\n".join(unexplained)


def test_no_stale_skips(findings):
    used = {id(_skip_for(f)) for f in findings}
    stale = [s["id"] for s in SKIPS if id(s) not in used]
    assert stale == [], f"these skips no longer match any failure; remove them: {stale}"
