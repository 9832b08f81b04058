"""The pack as the Pulumi CLI sees it: a process speaking the analyzer gRPC protocol (one
process for the whole policy suite: the `pack` fixture in conftest.py)."""

from __future__ import annotations

import json

import pytest
from google.protobuf import empty_pb2, struct_pb2
from platform_policies import ALL_POLICIES
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import StackValidationPolicy

from tests.policy.cases import RESOURCE_CASES, STACK_CASES


def _struct(values: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def test_info_lists_every_rule_with_its_control(pack):
    info = pack.info()
    assert sorted(p.name for p in info) == sorted(p.name for p in ALL_POLICIES)
    for policy in info:
        assert policy.framework.get("name") and policy.framework.get("reference"), policy.name
        assert policy.level == "mandatory"


def test_analyze_over_grpc(pack):
    pack.configure(pack.info(), {}, "test")
    provider = analyzer_pb2.AnalyzerProviderResource(
        type="pulumi:providers:aws", urn="urn:pulumi:t::p::pulumi:providers:aws::p", name="p",
        properties=_struct({"region": "me-central-1"}),
    )
    good = pack.stub.Analyze(analyzer_pb2.AnalyzeRequest(
        type="aws:s3/bucket:Bucket", urn="urn:pulumi:t::p::aws:s3/bucket:Bucket::good", name="good",
        properties=_struct({"bucket": "good"}), provider=provider))
    residency = [d for d in good.diagnostics if d.policyName == "aws-resources-in-allowed-regions"]
    assert residency == []
    bad = pack.stub.Analyze(analyzer_pb2.AnalyzeRequest(
        type="aws:s3/bucket:Bucket", urn="urn:pulumi:t::p::aws:s3/bucket:Bucket::bad", name="bad",
        properties=_struct({"bucket": "bad", "region": "eu-west-1"}), provider=provider))
    [diag] = [d for d in bad.diagnostics if d.policyName == "aws-resources-in-allowed-regions"]
    assert diag.enforcementLevel == analyzer_pb2.MANDATORY
    assert "eu-west-1" in diag.message


def test_configure_changes_allowed_regions(pack):
    pack.configure(pack.info(), {"aws-resources-in-allowed-regions": {"allowedRegions": ["eu-west-1"]}}, "test")
    answer = pack.stub.Analyze(analyzer_pb2.AnalyzeRequest(
        type="pulumi:providers:aws", urn="urn:pulumi:t::p::pulumi:providers:aws::eu", name="eu",
        properties=_struct({"region": "eu-west-1"})))
    assert [d for d in answer.diagnostics if d.policyName == "aws-resources-in-allowed-regions"] == []


# --- The whole rule table, through the pack process ---------------------------------------

def _provider(props: dict | None) -> analyzer_pb2.AnalyzerProviderResource | None:
    if props is None:
        return None
    return analyzer_pb2.AnalyzerProviderResource(
        type="pulumi:providers:aws", urn="urn:pulumi:t::p::pulumi:providers:aws::p", name="p",
        properties=_struct(props))


def _urn(resource_type: str, name: str) -> str:
    return f"urn:pulumi:t::p::{resource_type}::{name}"


def test_every_rule_has_remediation_and_control_over_grpc(pack):
    answer = pack.stub.GetAnalyzerInfo(empty_pb2.Empty())
    assert len(answer.policies) == len(ALL_POLICIES)
    for policy in answer.policies:
        assert policy.remediation_steps, policy.name
        assert policy.framework.name in (
            "UAE PDPL (Federal Decree-Law No. 45 of 2021)", "ISO/IEC 27001:2022 Annex A", "CIS Amazon EKS Benchmark",
        ), policy.name
    stack = {p.name for p in ALL_POLICIES if isinstance(p, StackValidationPolicy)}
    for policy in pack.info():
        assert policy.stack_policy == (policy.name in stack)
        assert bool(policy.scope) == policy.stack_policy, policy.name


def _by_config(cases: list) -> dict[str, tuple[dict, list]]:
    """The cases grouped by the pack config they need ({rule: its settings}), so the pack is
    configured once per group."""
    groups: dict[str, tuple[dict, list]] = {}
    for case in cases:
        config = {case.rule: case.config} if case.config is not None else {}
        groups.setdefault(json.dumps(config, sort_keys=True), (config, []))[1].append(case)
    return groups


def test_resource_table_over_grpc(pack):
    wrong = []
    info = pack.info()
    for config, cases in _by_config(RESOURCE_CASES).values():
        pack.configure(info, config, "test")
        wrong += _wrong_resource_answers(pack, cases)
    assert wrong == []


def _wrong_resource_answers(pack, cases: list) -> list:
    wrong = []
    for case in cases:
        request = analyzer_pb2.AnalyzeRequest(type=case.type, urn=_urn(case.type, case.name), name=case.name,
                                              properties=_struct(case.props))
        provider = _provider(case.provider)
        if provider is not None:
            request.provider.CopyFrom(provider)
        answer = pack.stub.Analyze(request)
        mine = [d for d in answer.diagnostics if d.policyName == case.rule]
        judged = case.rule not in {n.policy_name for n in answer.not_applicable}
        ok = judged and (bool(mine) == case.fails) and all(d.enforcementLevel == analyzer_pb2.MANDATORY for d in mine)
        if not ok:
            wrong.append((case.id, judged, [d.message for d in mine]))
    return wrong


def test_stack_table_over_grpc(pack):
    wrong = []
    info = pack.info()
    for config, cases in _by_config(STACK_CASES).values():
        pack.configure(info, config, "test")
        wrong += _wrong_stack_answers(pack, cases)
    assert wrong == []


def _wrong_stack_answers(pack, cases: list) -> list:
    wrong = []
    for case in cases:
        resources = []
        for spec in case.resources:
            resource = analyzer_pb2.AnalyzerResource(type=spec.type, urn=_urn(spec.type, spec.name), name=spec.name,
                                                     properties=_struct(spec.props))
            resource.provider.CopyFrom(_provider({"region": "me-central-1"}))
            for prop, targets in spec.depends.items():
                resource.propertyDependencies[prop].urns.extend(_urn(*t) for t in targets)
            resources.append(resource)
        answer = pack.stub.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=resources))
        mine = [d.urn for d in answer.diagnostics if d.policyName == case.rule]
        expected = [_urn(*case.culprit)] if case.fails else []
        if mine != expected:
            wrong.append((case.id, mine))
    return wrong


@pytest.mark.parametrize(("kind", "props", "rule"), [
    ("aws:ec2/securityGroup:SecurityGroup",
     {"vpcId": "vpc-1", "ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]},
     "no-world-open-ports"),
    ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
     {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0", "securityGroupId": "sg-1"},
     "no-world-open-ports"),
    ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
     {"bucket": "data", "blockPublicAcls": True, "blockPublicPolicy": False, "ignorePublicAcls": True,
      "restrictPublicBuckets": True}, "s3-public-access-settings"),
], ids=["ssh-on-a-group", "ssh-on-an-ingress-rule", "access-block-flag-off"])
def test_single_resource_violations_are_refused_by_analyze(pack, kind, props, rule):
    """What one resource shows is refused when the engine registers it (Analyze), before
    it is created, not only after the whole stack is registered (AnalyzeStack)."""
    pack.configure(pack.info(), {}, "test")
    request = analyzer_pb2.AnalyzeRequest(type=kind, urn=_urn(kind, "r"), name="r", properties=_struct(props))
    request.provider.CopyFrom(_provider({"region": "me-central-1"}))
    answer = pack.stub.Analyze(request)
    [diag] = [d for d in answer.diagnostics if d.policyName == rule]
    assert diag.enforcementLevel == analyzer_pb2.MANDATORY
    stack = pack.stub.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[analyzer_pb2.AnalyzerResource(
        type=kind, urn=_urn(kind, "r"), name="r", properties=_struct(props), provider=request.provider)]))
    assert [d.policyName for d in stack.diagnostics] == []  # not reported a second time
