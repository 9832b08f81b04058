"""`mlplat preview` end to end, as a user runs it: exit codes, one-line errors, reports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MLPLAT = [sys.executable, "-m", "infra.cli"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*MLPLAT, *args], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("stack", ["dev", "dev-cluster"])
def test_dev_preview_passes_and_writes_reports(tmp_path, stack):
    done = run("preview", "--stack", stack, "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"))
    assert done.returncode == 0, done.stderr
    assert "Policy verdict: PASSED (0 mandatory" in done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["stack"] == stack and report["region"] == "me-central-1"
    assert report["summary"]["mandatoryViolations"] == 0
    assert report["resources"]
    for resource in report["resources"]:
        assert {"urn", "type", "name", "parent", "region", "inputs"} <= resource.keys()
    # Each layer holds its half: AWS resources in the cloud layer, Kubernetes objects in the cluster layer.
    types = {resource["type"] for resource in report["resources"]}
    cluster = stack.endswith("-cluster")
    assert any(t.startswith("kubernetes:") for t in types) == cluster
    assert any(t.startswith("aws:") for t in types) != cluster
    assert f"## Preview of `{stack}` (me-central-1): ✅ passed" in (tmp_path / "r.md").read_text()


def test_env_preview_writes_both_layers(tmp_path):
    done = run("preview", "--env", "dev", "--out", str(tmp_path), "--quiet")
    assert done.returncode == 0, done.stderr
    for stack in ("dev", "dev-cluster"):
        report = json.loads((tmp_path / f"{stack}.json").read_text())
        assert report["stack"] == stack and report["summary"]["mandatoryViolations"] == 0
        assert (tmp_path / f"{stack}.md").exists()
    assert any((tmp_path / "dev-cluster-manifests").rglob("*.yaml"))


def test_env_preview_of_a_customer_site_is_its_one_stack(tmp_path):
    """onprem is one cluster-layer stack whose descriptor is in its own file: --env previews
    it alone (it has no onprem-cluster to look for)."""
    done = run("preview", "--env", "onprem", "--out", str(tmp_path), "--quiet")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["onprem-manifests", "onprem.json", "onprem.md"]
    assert json.loads((tmp_path / "onprem.json").read_text())["stack"] == "onprem"


def test_unknown_stack_is_one_line_exit_2():
    done = run("preview", "--stack", "nosuch", "--quiet")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mlplat: error: unknown stack 'nosuch': no stacks/Pulumi.nosuch.yaml; available: dev, dev-cluster, onprem, "
        "prod, prod-cluster, smb, smb-cluster, staging, staging-cluster"
    ]
    assert "Traceback" not in done.stderr


def _stack_dir(tmp_path: Path, replace: tuple[str, str] | None = None, append: str = "") -> Path:
    text = (REPO / "stacks" / "Pulumi.dev.yaml").read_text()
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    (tmp_path / "Pulumi.dev.yaml").write_text(text + append)
    return tmp_path


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"append": "  mlplat:gpuCount: 4\n"}, "mlplat:gpuCount: unknown key"),
        ({"replace": ("aws:region: me-central-1", "aws:region: eu-west-1")},
         "aws:region: 'eu-west-1' is outside the residency allow-list; allowed: me-central-1"),
        ({"append": "  mlplat:features:\n    transitEncryption: false\n"},
         "mlplat:features.transitEncryption: false would leave the online store without TLS"),
        ({"replace": ("      groups: [mlplat:research-developers]\n",
                      "      groups: [mlplat:research-developers]\n    - name: analytics\n"
                      "      quotas: {cpu: 4, memoryGi: 16}\n"),
          "append": "  mlplat:features:\n    projects: {analytics: research}\n"},
         "mlplat:features.projects.analytics: names project 'research', which is tenant 'research''s"),
    ],
)
def test_bad_stack_file_is_one_line_exit_2_nothing_registered(tmp_path, change, expected):
    stacks = _stack_dir(tmp_path, **change)
    out = tmp_path / "report.json"
    done = run("preview", "--stack", "dev", "--stacks-dir", str(stacks), "--json", str(out), "--quiet")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlplat: error: ") and expected in lines[0]
    assert not out.exists()  # the program never ran: nothing was registered or reported


def test_bucket_pinned_elsewhere_is_blocked(tmp_path):
    out = tmp_path / "r.json"
    done = run("preview", "--stack", "dev", "--program", "tests/fixtures/programs/bucket_outside_region.py",
               "--json", str(out), "--quiet")
    assert done.returncode == 1, done.stderr
    report = json.loads(out.read_text())
    [violation] = [v for v in report["violations"]
                   if v["urn"].endswith("::exfiltration") and v["policy"] == "aws-resources-in-allowed-regions"]
    assert violation["level"] == "mandatory"
    assert violation["urn"] == "urn:pulumi:dev::mlplat::aws:s3/bucket:Bucket::exfiltration"
    assert "eu-central-1" in violation["message"]
    assert "aws-resources-in-allowed-regions (mandatory): 1 violation(s)" in done.stdout


def test_default_provider_use_is_an_engine_error(tmp_path):
    out = tmp_path / "r.json"
    done = run("preview", "--stack", "dev", "--program", "tests/fixtures/programs/default_provider.py",
               "--json", str(out), "--quiet")
    assert done.returncode == 1
    report = json.loads(out.read_text())
    assert any("uses a default aws provider" in e and "::orphan" in e for e in report["engineErrors"])
    # The residency rule agrees: without a provider the region cannot be determined.
    assert any(v["urn"].endswith("::orphan") and "cannot be determined" in v["message"] for v in report["violations"])


def test_bad_policy_config_is_exit_2(tmp_path):
    config = tmp_path / "p.json"
    config.write_text('{"aws-resources-in-allowed-regions": {"allowedRegion": ["me-central-1"]}}')
    done = run("preview", "--stack", "dev", "--policy-config", str(config), "--quiet")
    assert done.returncode == 2
    assert "aws-resources-in-allowed-regions.allowedRegion: unknown setting; settings: allowedRegions, exemptTypes" \
        in done.stderr


def test_argument_error_is_exit_2():
    done = run("preview")
    assert done.returncode == 2
    assert "one of the arguments --stack --env is required" in done.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is part of the documented workflow")
def test_readme_commands_are_the_makefile_targets():
    head = "\n".join((REPO / "README.md").read_text().splitlines()[:15])
    assert "make preview" in head and "make test" in head
    assert "make test" in (REPO / ".ci" / "run").read_text()
