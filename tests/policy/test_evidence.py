"""The evidence a security team files: per rule, its control and what it checked, passed
and failed, counted per resource for stack rules too."""

from __future__ import annotations

from platform_policies import ALL_POLICIES, CUSTOMER_CLUSTER
from platform_policies.common import SCOPE_TAG
from pulumi_policy import StackValidationPolicy

from infra.preview.report import policy_evidence, to_markdown
from tests.conftest import preview


def test_stack_rules_count_the_resources_they_judge():
    result = preview("prod")
    rows = {row["policy"]: row for row in policy_evidence(result.verdict)}
    customer_only = {p.name for p in CUSTOMER_CLUSTER}  # not applicable to an AWS stack: nothing judged
    for policy in ALL_POLICIES:
        if not isinstance(policy, StackValidationPolicy):
            continue
        scope = {t[len(SCOPE_TAG):] for t in policy.tags if t.startswith(SCOPE_TAG)}
        in_scope = [r for r in result.registrations if r.type in scope]
        expected = 0 if policy.name in customer_only else len(in_scope)
        assert rows[policy.name]["checked"] == expected, policy.name
        assert rows[policy.name]["scope"] == "stack"


def test_resource_rules_count_only_what_they_judge():
    result = preview("prod")
    rows = {row["policy"]: row for row in policy_evidence(result.verdict)}
    aws = [r for r in result.registrations if r.custom and r.type.startswith("aws:")]
    keys = [r for r in result.registrations if r.type == "aws:kms/key:Key"]
    assert keys and rows["kms-keys-rotate"]["checked"] == len(keys)
    assert 0 < rows["aws-resources-in-allowed-regions"]["checked"] <= len(aws) + 1  # + the provider
    clusters = [r for r in result.registrations if r.type == "aws:eks/cluster:Cluster"]
    assert rows["eks-endpoint-private"]["checked"] == len(clusters) == 1


def test_markdown_evidence_names_each_rule_and_control():
    text = to_markdown(preview("prod"))
    assert "### Evidence by policy" in text
    for policy in ALL_POLICIES:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{policy.name}` |"))
        assert policy.framework.name in row and policy.framework.reference in row
