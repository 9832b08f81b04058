"""Every rule of the pack, called directly: one resource (or small stack) that passes and
one that fails, from the shared table in cases.py."""

from __future__ import annotations

import pytest
from platform_policies import ALL_POLICIES
from pulumi_policy import StackValidationPolicy

from tests.policy.cases import RESOURCE_CASES, STACK_CASES, Case, StackCase
from tests.policy.harness import NOT_APPLICABLE, check, check_stack, stack_resource

POLICIES = {p.name: p for p in ALL_POLICIES}


def test_every_rule_has_a_passing_and_a_failing_case():
    covered = {(c.rule, c.fails) for c in RESOURCE_CASES} | {(c.rule, c.fails) for c in STACK_CASES}
    missing = [(name, fails) for name in POLICIES for fails in (False, True) if (name, fails) not in covered]
    assert missing == []
    stack_rules = {p.name for p in ALL_POLICIES if isinstance(p, StackValidationPolicy)}
    assert {c.rule for c in STACK_CASES} == stack_rules
    assert {c.rule for c in RESOURCE_CASES}.isdisjoint(stack_rules)


@pytest.mark.parametrize("case", RESOURCE_CASES, ids=lambda c: c.id)
def test_resource_rule(case: Case):
    found = check(POLICIES[case.rule], case.type, case.props, provider_props=case.provider, name=case.name,
                  config=case.config)
    assert found != NOT_APPLICABLE
    if case.fails:
        assert found, f"{case.rule} let a non-compliant {case.type} pass"
    else:
        assert found == []


def build_stack(case: StackCase) -> dict[tuple[str, str], object]:
    resources = {(r.type, r.name): stack_resource(r.type, r.props, r.name) for r in case.resources}
    for spec in case.resources:
        for prop, targets in spec.depends.items():
            resources[(spec.type, spec.name)].property_dependencies[prop] = [resources[t] for t in targets]
    return resources


@pytest.mark.parametrize("case", STACK_CASES, ids=lambda c: c.id)
def test_stack_rule(case: StackCase):
    resources = build_stack(case)
    found = check_stack(POLICIES[case.rule], list(resources.values()), case.config)
    if case.fails:
        culprit = resources[case.culprit]
        assert [urn for _, urn in found] == [culprit.urn], found
    else:
        assert found == []
