"""The pack as the Pulumi CLI sees it: a process speaking the analyzer gRPC protocol."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2
from platform_policies import ALL_POLICIES
from pulumi.runtime.proto import analyzer_pb2

from infra.preview.analyzer import PolicyPackProcess


@pytest.fixture(scope="module")
def pack():
    process = PolicyPackProcess()
    yield process
    process.close()


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
