"""The residency rule, called directly: one passing and one failing case for each path."""

from __future__ import annotations

from platform_policies.residency import aws_resources_in_allowed_regions as rule

from tests.policy.harness import NOT_APPLICABLE, check

BUCKET = "aws:s3/bucket:Bucket"


def test_bucket_in_region_passes():
    assert check(rule, BUCKET, {"bucket": "b"}) == []


def test_resource_level_region_overrides_provider():
    [message] = check(rule, BUCKET, {"bucket": "b", "region": "eu-central-1"})
    assert message == "aws:s3/bucket:Bucket 'r' is in eu-central-1, outside the allowed regions ['me-central-1']"


def test_provider_region_outside_fails():
    [message] = check(rule, BUCKET, {}, provider_props={"region": "me-south-1"})
    assert "is in me-south-1, outside the allowed regions" in message


def test_unknown_region_is_a_violation():
    [message] = check(rule, BUCKET, {}, provider_props=None)
    assert "region cannot be determined" in message
    [message] = check(rule, BUCKET, {}, provider_props={})
    assert "region cannot be determined" in message


def test_provider_itself_is_checked():
    assert check(rule, "pulumi:providers:aws", {"region": "me-central-1"}, provider_props=None) == []
    [message] = check(rule, "pulumi:providers:aws", {"region": "us-east-1"}, provider_props=None)
    assert "is in us-east-1" in message


def test_global_services_are_exempt():
    assert check(rule, "aws:iam/role:Role", {}, provider_props={"region": "us-east-1"}) == NOT_APPLICABLE
    assert check(rule, "aws:route53/zone:Zone", {}, provider_props=None) == NOT_APPLICABLE
    # Route 53 Resolver is regional: not exempt.
    [message] = check(rule, "aws:route53/resolverEndpoint:ResolverEndpoint", {}, provider_props={"region": "us-east-1"})
    assert "us-east-1" in message


def test_non_aws_is_not_applicable():
    assert check(rule, "kubernetes:core/v1:Namespace", {}) == NOT_APPLICABLE


def test_config_changes_the_allow_list():
    config = {"allowedRegions": ["eu-central-1"]}
    assert check(rule, BUCKET, {}, provider_props={"region": "eu-central-1"}, config=config) == []
    [message] = check(rule, BUCKET, {}, config=config)
    assert "outside the allowed regions ['eu-central-1']" in message


def test_exempt_types_from_config():
    config = {"exemptTypes": ["aws:s3/bucket:Bucket"]}
    assert check(rule, BUCKET, {"region": "us-east-1"}, config=config) == NOT_APPLICABLE
