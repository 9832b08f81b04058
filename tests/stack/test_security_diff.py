"""What a pull request opens, told to a security reviewer: real previews of each change, diffed
as `mlplat preview --against BASE --require-approval broadening` diffs them.

The five changes of the issue each show in the security section and exit 5: a new tenant and
a new group's RoleBinding (dev's own stack file changed, both layers previewed for real), and
a wider bucket prefix, a new security-group ingress and a policy onto another tenant's models
(fixture programs in tests/fixtures/security_diff, each the base with one change). A change
that only narrows, and one that changes nothing in security, exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from infra.cli import EXIT_BAD_INPUT, EXIT_BROADENING, EXIT_OK, EXIT_VIOLATIONS, main
from infra.preview.diff import as_read, diff_markdown, diff_reports
from infra.preview.report import write_json
from infra.preview.security import IAM, NETPOL_RULE, RBAC_SUBJECT, SG_RULE
from tests.conftest import preview

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "security_diff"


def _head_of_dev(stacks_dir: Path, change) -> tuple:
    """dev's two layers previewed with its stack file changed by `change(config)`."""
    from infra.config import load_layer
    from infra.preview.engine import run_preview

    document = yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    change(document["config"])
    stacks_dir.mkdir(parents=True, exist_ok=True)
    (stacks_dir / "Pulumi.dev.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    cloud = run_preview("dev", config=load_layer("dev", stacks_dir))
    cluster = run_preview("dev-cluster", stack_references={"dev": cloud.stack_outputs})
    return cloud, cluster


def _diff(base, head):
    return diff_reports(as_read(base.report), as_read(head.report))


def _widening(diff, kind: str) -> list:
    return [c for c in diff.security.changes if c.grant.kind == kind and c.broadens and c.sign == "+"]


def _add_analytics(config):
    config["mlplat:tenants"].append({"name": "analytics", "quotas": {"cpu": 8, "memoryGi": 32, "gpu": 0},
                                     "groups": ["mlplat:analytics-developers"]})


def test_a_new_tenant_is_its_roles_grants_and_the_groups_bound_in_its_namespace(tmp_path):
    cloud, cluster = _head_of_dev(tmp_path / "stacks", _add_analytics)
    diff = _diff(preview("dev"), cloud)
    assert diff.security.broadening
    statements = _widening(diff, IAM)
    assert statements and any("analytics" in dict(c.grant.columns)["resources"] for c in statements)
    # The requests it opens: its own roles on its own data, decided by the real evaluator;
    # none of research's, and none of its roles on research's data.
    opened = [f.line() for f in diff.security.paths.opened]
    assert "features-analytics-identity → s3:GetObject datasets/features/analytics/registry.pb" in opened, opened
    assert not [line for line in opened if "research" in line], opened
    # What it closes: the account's other principals on its runs and feature store, which
    # nothing kept out of analytics/ before its owner-only Denies.
    closed = {(f.principal, f.path.tenant, f.after) for f in diff.security.paths.closed}
    assert closed == {("arn:aws:iam::111122223333:role/developer", "analytics", "ExplicitlyDenied")}, closed
    assert diff.security.paths.unjudged == 0, diff.security.paths.note
    markdown = diff_markdown(diff)
    assert markdown.index("BROADENS access") < markdown.index("Resources:")  # the security section comes first
    assert markdown.index("features-analytics-identity") < markdown.index("Resources:")
    in_cluster = _diff(preview("dev-cluster"), cluster)
    subjects = _widening(in_cluster, RBAC_SUBJECT)
    assert any("mlplat:analytics-developers" in dict(c.grant.columns)["subject"] for c in subjects), subjects
    assert _widening(in_cluster, NETPOL_RULE)  # the new namespace's allowances


def test_a_rolebinding_to_a_new_group_broadens_and_names_the_group(tmp_path):
    def add_group(config):
        config["mlplat:tenants"][0]["groups"].append("mlplat:contractors")

    _cloud, cluster = _head_of_dev(tmp_path / "stacks", add_group)
    diff = _diff(preview("dev-cluster"), cluster)
    subjects = _widening(diff, RBAC_SUBJECT)
    assert [dict(c.grant.columns)["subject"] for c in subjects] == ["Group mlplat:contractors"], subjects
    assert "research" in subjects[0].resource  # the tenant's own RoleBinding
    assert diff.security.broadening


@pytest.mark.parametrize(("program", "opened"), [
    # One policy more: research's trainer on analytics' datasets.
    ("dev_cross_tenant.py", ["training-research-trainer → s3:GetObject datasets/analytics/tokens/shard-0001.bin"]),
    # A wider bucket prefix: research's trainer on the whole datasets bucket. The feature
    # stores stay their owners' (the bucket's owner-only Denies), the raw datasets do not.
    # The table's path onto applied's datasets (a tenant dev does not have, but a prefix of
    # its bucket all the same) opens with it.
    ("dev_wider_prefix.py", ["training-research-trainer → s3:GetObject datasets/applied/tokens/shard-0001.bin",
                             "training-research-trainer → s3:GetObject datasets/analytics/tokens/shard-0001.bin",
                             "training-research-trainer → s3:ListBucket datasets"]),
])
def test_a_policy_onto_another_tenants_data_opens_those_paths_on_the_real_program(tmp_path, capsys, program, opened):
    """dev with two tenants, then the same program with one policy more: the paths it opens
    are named in the Markdown's security section, nothing else flips, and the CLI's verdict
    is 5."""
    from infra.config import load_layer
    from infra.preview.engine import load_program, run_preview

    base, _cluster = _head_of_dev(tmp_path / "stacks", _add_analytics)
    head = run_preview("dev", config=load_layer("dev", tmp_path / "stacks"), program=load_program(FIXTURES / program))
    diff = _diff(base, head)
    paths = diff.security.paths
    assert [f.line() for f in paths.flips] == opened, paths.summary()
    assert {(f.before, f.after) for f in paths.flips} == {("ImplicitlyDenied", "Allowed")}
    # The trainer's other requests were decided again on both sides, and still Denied.
    assert paths.compared > 10 and paths.unjudged == 0
    security = diff_markdown(diff).split("Resources:")[0]
    assert all(f"`{line.split(' → ')[1]}`" in security for line in opened), security
    # The CLI, against the base's report: exit 5.
    report = tmp_path / "base.json"
    write_json(base, report)
    code = main(["preview", "--stack", "dev", "--program", str(FIXTURES / program), "--stacks-dir",
                 str(tmp_path / "stacks"), "--against", str(report), "--require-approval", "broadening", "--quiet"])
    capsys.readouterr()
    assert code == EXIT_BROADENING


@pytest.fixture(scope="module")
def base_report(tmp_path_factory) -> Path:
    from infra.preview.engine import load_program, run_preview

    path = tmp_path_factory.mktemp("security") / "dev.json"
    write_json(run_preview("dev", program=load_program(FIXTURES / "base.py")), path)
    return path


def _against(base: Path, program: str, tmp_path: Path, capsys) -> tuple[int, dict, str]:
    out = tmp_path / "diff.json"
    code = main(["preview", "--stack", "dev", "--program", str(FIXTURES / program), "--against", str(base),
                 "--require-approval", "broadening", "--diff-json", str(out), "--diff-markdown",
                 str(tmp_path / "diff.md"), "--quiet"])
    capsys.readouterr()
    return code, json.loads(out.read_text())["security"], (tmp_path / "diff.md").read_text()


@pytest.mark.parametrize(("program", "kind", "shown"), [
    ("wider_prefix.py", IAM, "mlplat-dev-datasets-111122223333-me-central-1/*"),
    ("new_ingress.py", SG_RULE, "10.20.0.0/16"),
    ("cross_tenant.py", IAM, "mlplat-dev-models-111122223333-me-central-1/analytics/*"),
])
def test_each_broadening_change_shows_and_exits_5(base_report, tmp_path, capsys, program, kind, shown):
    code, security, markdown = _against(base_report, program, tmp_path, capsys)
    assert code == EXIT_BROADENING, security
    widened = [c for c in security["changes"] if c["widens"]]
    assert [c["kind"] for c in widened] == [kind]
    assert shown in json.dumps(widened[0]["grant"])
    assert "BROADENS access" in markdown and shown in markdown.split("<details>")[0]  # in the security table


@pytest.mark.parametrize("program", ["narrower_prefix.py", "tags_only.py", "base.py"])
def test_a_narrowing_change_or_none_in_security_exits_0(base_report, tmp_path, capsys, program):
    code, security, _markdown = _against(base_report, program, tmp_path, capsys)
    assert code == EXIT_OK, security
    assert security["broadening"] is False
    if program == "narrower_prefix.py":  # shown all the same: one statement replaced by a narrower one
        assert [(c["sign"], c["widens"]) for c in security["changes"]] == [("+", False), ("-", False)]
    else:
        assert security["changes"] == []


def test_a_block_wins_over_broadening_and_the_flag_needs_a_base(base_report, tmp_path, capsys):
    code, security, _markdown = _against(base_report, "broadens_and_blocked.py", tmp_path, capsys)
    assert code == EXIT_VIOLATIONS and security["broadening"] is True
    assert main(["preview", "--stack", "dev", "--require-approval", "broadening", "--quiet"]) == EXIT_BAD_INPUT
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "--require-approval" in said[0] and "--against" in said[0]
