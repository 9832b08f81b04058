"""Shared helpers of the pack: zones, keys, CIDRs, values unknown during preview, exemptions."""

from __future__ import annotations

import pytest
from platform_policies.common import UNKNOWN, get, is_world_open, items, key_problem, zone_id_prefix, zone_in_regions
from platform_policies.encryption import logs_encrypted_with_cmk
from platform_policies.residency import availability_zones_in_allowed_regions
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from tests.policy.harness import NOT_APPLICABLE, check


@pytest.mark.parametrize(("region", "prefix"), [
    ("me-central-1", "mec1"), ("me-south-1", "mes1"), ("us-east-1", "use1"), ("eu-central-1", "euc1"),
    ("ap-southeast-1", "apse1"), ("ap-northeast-3", "apne3"), ("us-gov-west-1", "usgw1"), ("eu-north-1", "eun1"),
])
def test_zone_id_prefix(region, prefix):
    assert zone_id_prefix(region) == prefix


def test_zone_membership():
    assert zone_in_regions("me-central-1a", ["me-central-1"])
    assert zone_in_regions("mec1-az3", ["me-central-1"])
    assert not zone_in_regions("mes1-az1", ["me-central-1"])  # Bahrain
    assert not zone_in_regions("me-south-1a", ["me-central-1"])
    assert not zone_in_regions("us-east-1-bos-1a", ["us-east-1"])  # a Local Zone is not the region
    assert not zone_in_regions("use1-bos1-az1", ["us-east-1"])


def test_key_problem():
    assert key_problem("arn:aws:kms:me-central-1:111122223333:key/abc") is None
    assert key_problem("alias/mlplat-prod-logs") is None
    assert key_problem(UNKNOWN) is None  # a key created in this stack, not known until it exists
    assert key_problem(None, "kmsKeyId") == "no kmsKeyId is set, so AWS uses its own managed key"
    assert key_problem("alias/aws/s3", "k") == "k alias/aws/s3 is AWS-managed, not a customer-managed key"
    assert key_problem("arn:aws:kms:me-central-1:111122223333:alias/aws/ebs") is not None


@pytest.mark.parametrize(("cidr", "open_"), [
    ("0.0.0.0/0", True), ("::/0", True), ("0.0.0.0/1", True), ("128.0.0.0/1", True), ("10.0.0.0/8", False),
    ("203.0.113.5/32", False), ("2001:db8::/32", False), ("not-a-cidr", False),
])
def test_world_open(cidr, open_):
    assert is_world_open(cidr) is open_


def test_unknown_values_through_the_sdk_proxy():
    props = unknown_checking_proxy({"kmsKeyId": UNKNOWN_STRING_VALUE, "list": ["a", UNKNOWN_STRING_VALUE],
                                    "nested": {"x": UNKNOWN_STRING_VALUE}})
    assert get(props, "kmsKeyId") is UNKNOWN
    assert get(props, "nested", "x") is UNKNOWN
    assert get(props, "missing", "x") is None
    assert items(get(props, "list")) == ["a", UNKNOWN]


def test_a_key_known_only_after_creation_passes_during_preview():
    props = unknown_checking_proxy({"kmsKeyId": UNKNOWN_STRING_VALUE})
    assert check(logs_encrypted_with_cmk, "aws:cloudwatch/logGroup:LogGroup", props) == []


def test_exemptions_need_a_matching_name_and_type():
    config = {"exemptions": [{"name": "audit-*", "type": "aws:cloudwatch/logGroup:LogGroup",
                              "reason": "CloudTrail-owned group, encrypted by the trail's key"}]}
    group = "aws:cloudwatch/logGroup:LogGroup"
    assert check(logs_encrypted_with_cmk, group, {}, config=config, name="audit-trail") == NOT_APPLICABLE
    assert check(logs_encrypted_with_cmk, group, {}, config=config, name="workloads") != NOT_APPLICABLE
    other = {"exemptions": [{"name": "audit-*", "type": "aws:cloudtrail/trail:Trail", "reason": "r"}]}
    assert check(logs_encrypted_with_cmk, group, {}, config=other, name="audit-trail") != NOT_APPLICABLE


def test_rules_declare_inapplicable_types():
    assert check(logs_encrypted_with_cmk, "aws:s3/bucket:Bucket", {}) == NOT_APPLICABLE
    assert check(availability_zones_in_allowed_regions, "aws:s3/bucket:Bucket", {"bucket": "b"}) == NOT_APPLICABLE
