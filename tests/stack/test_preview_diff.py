"""`mlplat preview --against`: what a pull request changes, from two recorded previews.

The base is dev as it is (both layers, the session's cached previews). The head is one pull
request that does three things at once, previewed for real once per layer: dev's stack file
runs the GPU pool on g6.2xlarge instead of g5.2xlarge, and the program adds a compliant
bucket and a KMS key in Frankfurt (tests/fixtures/preview_diff/head_program.py). Each
report is written as `mlplat preview --json` writes it and read back, and the diff runs
on those files, as the CLI runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from infra.cli import EXIT_BAD_INPUT, EXIT_CHANGES, EXIT_OK, EXIT_VIOLATIONS, main
from infra.preview.diff import ADDED, CHANGED, REMOVED, diff_markdown, diff_reports, diff_text, read_base_report
from infra.preview.report import write_json
from tests.conftest import preview

REPO = Path(__file__).resolve().parents[2]
HEAD_PROGRAM = REPO / "tests" / "fixtures" / "preview_diff" / "head_program.py"
OLD, NEW = "g5.2xlarge", "g6.2xlarge"


@cache
def _head_previews(stacks_dir: Path):
    from infra.config import load_layer
    from infra.preview.engine import load_program, run_preview

    text = (REPO / "stacks" / "Pulumi.dev.yaml").read_text()
    assert text.count(f"instanceType: {OLD}") == 1
    (stacks_dir / "Pulumi.dev.yaml").write_text(text.replace(f"instanceType: {OLD}", f"instanceType: {NEW}"))
    cloud = run_preview("dev", config=load_layer("dev", stacks_dir), program=load_program(HEAD_PROGRAM))
    cluster = run_preview("dev-cluster", stack_references={"dev": cloud.stack_outputs})
    return cloud, cluster


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """base/<stack>.json and head/<stack>.json for dev and dev-cluster."""
    folder = tmp_path_factory.mktemp("recorded")
    cloud, cluster = _head_previews(folder)
    for result in (preview("dev"), preview("dev-cluster")):
        write_json(result, folder / "base" / f"{result.stack}.json")
    for result in (cloud, cluster):
        write_json(result, folder / "head" / f"{result.stack}.json")
    return folder


def diff_of(recorded: Path, stack: str):
    base = read_base_report(recorded / "base", stack)
    head = json.loads((recorded / "head" / f"{stack}.json").read_text())
    return diff_reports(base, head)


def test_an_instance_type_changes_the_launch_template_and_the_kueue_flavor(recorded):
    cloud = diff_of(recorded, "dev")
    [template] = [c for c in cloud.resources if c.type == "aws:ec2/launchTemplate:LaunchTemplate"]
    assert template.action == CHANGED and template.urn.endswith("::pool-gpu")
    # Our launch templates name the type in their description; the node group carries it.
    assert [(p.path, p.before, p.after) for p in template.paths] == [
        ("description", f"mlplat-dev-gpu: {OLD}", f"mlplat-dev-gpu: {NEW}")]
    [group] = [c for c in cloud.resources if c.type == "aws:eks/nodeGroup:NodeGroup"]
    assert ("instanceTypes[0]", OLD, NEW) in [(p.path, p.before, p.after) for p in group.paths]

    cluster = diff_of(recorded, "dev-cluster")
    flavors = {(c.action, c.object) for c in cluster.objects if c.type.endswith(":ResourceFlavor")}
    assert flavors == {(REMOVED, f"ResourceFlavor {OLD}"), (ADDED, f"ResourceFlavor {NEW}")}
    [queue] = [c for c in cluster.objects if c.object == "ClusterQueue research"]
    assert [(p.path, p.before, p.after) for p in queue.paths] == [
        ("spec.resourceGroups[1].flavors[0].name", OLD, NEW)]
    # Objects rendered from charts are diffed too: the device plugin's DaemonSets follow the pool.
    assert {c.release for c in cluster.objects if c.action == CHANGED} >= {"nvidia-device-plugin", "dcgm-exporter"}
    text = diff_text(cluster)
    assert f"- ResourceFlavor {OLD}" in text and f"+ ResourceFlavor {NEW}" in text


def test_a_new_bucket_is_one_added_bucket_with_its_policy_evidence(recorded):
    diff = diff_of(recorded, "dev")
    [bucket] = [c for c in diff.resources if c.type == "aws:s3/bucket:Bucket"]
    assert bucket.action == ADDED and bucket.urn == "urn:pulumi:dev::mlplat::aws:s3/bucket:Bucket::reports"
    assert bucket.evidence["failed"] == []
    assert {"aws-resources-in-allowed-regions", "s3-buckets-encrypted-with-cmk",
            "s3-buckets-block-public-access"} <= set(bucket.evidence["passed"])
    # Its companions come with it, and the rules that judge buckets count one more.
    assert {c.type.split(":")[-1] for c in diff.resources if c.action == ADDED and c.name == "reports"} == {
        "Bucket", "BucketServerSideEncryptionConfiguration", "BucketPublicAccessBlock", "BucketPolicy"}
    tls = next(p for p in diff.policies if p.policy == "s3-buckets-tls-only")
    assert tls.after["checked"] == tls.before["checked"] + 1 and not tls.flipped
    judged = len(bucket.evidence["passed"])
    markdown = diff_markdown(diff)
    assert f"`reports` <sub><code>aws:s3/bucket:Bucket</code>" in markdown
    assert f"judged by {judged} rules: {judged} passed" in markdown


def test_a_residency_break_flips_the_verdict_at_the_top_of_the_comment(recorded):
    diff = diff_of(recorded, "dev")
    [flip] = diff.flips
    assert (flip.policy, flip.status_before, flip.status_after) == ("aws-resources-in-allowed-regions", "passed",
                                                                    "failed")
    lines = diff_markdown(diff).splitlines()
    assert lines[0] == "### ❌ `dev` (me-central-1)"
    assert lines[2].startswith("**dev: 6 to add, 2 to change, 0 to remove; 1 policy verdict flipped")
    assert lines[2].endswith("verdict passed → BLOCKED**")
    # Next, the security section (what the change opens: the new bucket's TLS-only Deny, which
    # opens nothing), then, before anything folded, the flip and the resource that caused it.
    assert lines[4] == "**🔒 security: does not broaden access; 1 grants added, 0 removed**"
    flips = lines.index("**Policy verdicts that flipped**")
    assert lines.index("*IAM statements*") < flips
    assert "aws-resources-in-allowed-regions (mandatory): passed → FAILED" in lines[flips + 2]
    assert "backups-abroad" in lines[flips + 3] and "eu-central-1" in lines[flips + 3]
    assert lines.index(next(line for line in lines if line.startswith("<details>"))) > flips + 3
    assert diff_text(diff).splitlines()[0] == diff.summary()


def test_the_cluster_layer_change_passes_and_flips_nothing(recorded):
    diff = diff_of(recorded, "dev-cluster")
    assert diff.flips == [] and diff.passed_after and diff.changed


def test_a_preview_against_itself_says_no_changes_and_exits_0(tmp_path):
    """A fresh process previews dev and compares it with this session's preview of dev:
    the two runs agree, whatever order their resources registered in."""
    base = tmp_path / "dev.json"
    write_json(preview("dev"), base)
    markdown = tmp_path / "diff.md"
    done = subprocess.run([sys.executable, "-m", "infra.cli", "preview", "--stack", "dev", "--against", str(base),
                           "--detailed-exitcode", "--diff-markdown", str(markdown)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "dev: no changes; verdict passed"
    assert "**dev: no changes; verdict passed**" in markdown.read_text()


def _preview_returns(monkeypatch, result) -> None:
    import infra.preview.engine as engine

    monkeypatch.setattr(engine, "run_preview", lambda *args, **kwargs: result)


def test_changes_exit_4_with_detailed_exitcode_and_a_block_still_exits_1(recorded, monkeypatch, tmp_path, capsys):
    cloud, _cluster = _head_previews(recorded)
    head_report = recorded / "head" / "dev.json"
    # dev as it is, against the pull request's head: it passes, and differs.
    _preview_returns(monkeypatch, preview("dev"))
    assert main(["preview", "--stack", "dev", "--against", str(head_report), "--quiet"]) == EXIT_OK
    assert main(["preview", "--stack", "dev", "--against", str(head_report), "--detailed-exitcode",
                 "--diff-json", str(tmp_path / "d.json")]) == EXIT_CHANGES
    written = json.loads((tmp_path / "d.json").read_text())
    assert written["changed"] and written["passed"] == {"before": False, "after": True}
    # The pull request's head against dev: blocked, which wins over "changed".
    _preview_returns(monkeypatch, cloud)
    assert main(["preview", "--stack", "dev", "--against", str(recorded / "base"), "--detailed-exitcode",
                 "--quiet"]) == EXIT_VIOLATIONS
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("dev: 6 to add, 2 to change, 0 to remove") and out[-1].startswith(
        "Policy verdict: FAILED")


@pytest.mark.parametrize(("base", "expected"), [
    ("other-stack", "is the preview of stack 'dev-cluster', not 'dev'"),
    ("version", "is report version 2, and this mlplat reads version 1"),
    ("no-version", "has no reportVersion"),
    ("not-json", "is not JSON (line 1"),
    ("binary", "is not JSON (not UTF-8 text)"),
    ("missing", "no such file"),
    ("empty-folder", "holds no dev.json"),
])
def test_a_bad_base_is_one_line_exit_2_and_nothing_runs_or_is_written(recorded, tmp_path, monkeypatch, capsys, base,
                                                                     expected):
    import infra.preview.engine as engine

    def never(*_args, **_kwargs):
        raise AssertionError("the preview ran before the base was checked")

    monkeypatch.setattr(engine, "run_preview", never)
    good = json.loads((recorded / "base" / "dev.json").read_text())
    path = tmp_path / "base.json"
    if base == "other-stack":
        path = recorded / "base" / "dev-cluster.json"
    elif base == "version":
        path.write_text(json.dumps({**good, "reportVersion": 2}))
    elif base == "no-version":
        path.write_text(json.dumps({k: v for k, v in good.items() if k != "reportVersion"}))
    elif base == "not-json":
        path.write_text("<html>not a report</html>")
    elif base == "binary":
        path.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe")
    elif base == "empty-folder":
        path = tmp_path / "folder"
        path.mkdir()
    out = tmp_path / "out"
    code = main(["preview", "--stack", "dev", "--against", str(path), "--json", str(out / "r.json"),
                 "--diff-markdown", str(out / "d.md"), "--manifests", str(out / "m")])
    captured = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlplat: error: base report") and expected in lines[0], lines
    assert captured.out == "" and not out.exists()
