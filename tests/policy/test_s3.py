"""Bucket rules judged across the stack, linked through property dependencies or names."""

from __future__ import annotations

import json

from platform_policies.s3 import (
    denies_insecure_transport,
    s3_buckets_block_public_access,
    s3_buckets_encrypted_with_cmk,
    s3_buckets_tls_only,
    s3_public_access_settings,
)

from tests.policy.cases import BUCKET, PAB, POLICY, SSE, access_block, sse, tls_policy
from tests.policy.harness import check, check_stack, stack_resource


def _bucket(name: str = "data", **props):
    return stack_resource(BUCKET, {"bucket": name, **props}, name)


def _linked(kind: str, props: dict, bucket, by_dependency: bool = True):
    resource = stack_resource(kind, props, bucket.name)
    if by_dependency:
        resource.property_dependencies["bucket"] = [bucket]
    return resource


def test_bucket_without_encryption_configuration():
    bucket = _bucket()
    [(message, urn)] = check_stack(s3_buckets_encrypted_with_cmk, [bucket])
    assert urn == bucket.urn
    assert message.startswith("aws:s3/bucket:Bucket 'data' has no SSE-KMS configuration")


def test_configuration_linked_by_name_when_no_dependency_is_recorded():
    bucket = _bucket()
    assert check_stack(s3_buckets_encrypted_with_cmk, [bucket, _linked(SSE, sse(), bucket, False)]) == []


def test_configuration_linked_by_dependency_when_the_name_is_unknown():
    bucket = stack_resource(BUCKET, {"bucketPrefix": "data-"}, "data")
    config = _linked(SSE, {**sse(), "bucket": "resolved-later"}, bucket)
    assert check_stack(s3_buckets_encrypted_with_cmk, [bucket, config]) == []


def test_aws_managed_key_is_not_customer_managed():
    bucket = _bucket()
    config = _linked(SSE, sse(key="alias/aws/s3"), bucket)
    [(message, urn)] = check_stack(s3_buckets_encrypted_with_cmk, [bucket, config])
    assert urn == config.urn and "alias/aws/s3 is AWS-managed" in message


def test_inline_and_orphan_configurations():
    inline = _bucket(serverSideEncryptionConfiguration={"rule": {"applyServerSideEncryptionByDefault": {
        "sseAlgorithm": "AES256"}}})
    [(message, _)] = check_stack(s3_buckets_encrypted_with_cmk, [inline])
    assert "SSE-S3" in message
    orphan = stack_resource(SSE, sse("AES256", None), "elsewhere")
    assert [u for _, u in check_stack(s3_buckets_encrypted_with_cmk, [orphan])] == [orphan.urn]


def test_tls_policy_document():
    good = json.loads(tls_policy()["policy"])
    assert denies_insecure_transport(good, "data")
    assert denies_insecure_transport(good, None)  # a bucket whose name is not known yet: its own ARN pair

    def changed(**statement) -> dict:
        return {**good, "Statement": [{**good["Statement"][0], **statement}]}

    # Look-alikes that pass: the whole-service action, BoolIfExists, a boolean false, {"AWS": "*"}.
    for ok in (changed(Action="*"), changed(Condition={"BoolIfExists": {"aws:SecureTransport": "false"}}),
               changed(Condition={"Bool": {"aws:SecureTransport": False}}), changed(Principal={"AWS": "*"}),
               changed(Action=["s3:*"], Resource=["arn:aws:s3:::data/*", "arn:aws:s3:::data"])):
        assert denies_insecure_transport(ok, "data"), ok
    # The red team's: another bucket's ARN, a condition that narrows it, and more.
    tricks = {
        "another bucket": changed(Resource=["arn:aws:s3:::other", "arn:aws:s3:::other/*"]),
        "bucket only: object reads stay open": changed(Resource=["arn:aws:s3:::data"]),
        "objects only": changed(Resource="arn:aws:s3:::data/*"),
        "narrowed by a second condition": changed(Condition={"Bool": {"aws:SecureTransport": "false"},
                                                             "StringEquals": {"aws:PrincipalAccount": "111122223333"}}),
        "narrowed by a second key": changed(Condition={"Bool": {"aws:SecureTransport": "false",
                                                               "aws:ViaAWSService": "false"}}),
        "some principals": changed(Principal={"AWS": "arn:aws:iam::111122223333:root"}),
        "some actions": changed(Action=["s3:GetObject"]),
        "every action but one": {**good, "Statement": [{k: v for k, v in good["Statement"][0].items()
                                                        if k != "Action"} | {"NotAction": "s3:GetObject"}]},
        "NotPrincipal": {**good, "Statement": [{k: v for k, v in good["Statement"][0].items()
                                                if k != "Principal"} | {"NotPrincipal": {"AWS": "x"}}]},
        "secure transport true": changed(Condition={"Bool": {"aws:SecureTransport": "true"}}),
        "an Allow": changed(Effect="Allow"),
    }
    for name, document in tricks.items():
        assert not denies_insecure_transport(document, "data"), name


def test_bucket_without_tls_policy():
    bucket = _bucket()
    [(message, urn)] = check_stack(s3_buckets_tls_only, [bucket])
    assert urn == bucket.urn and "aws:SecureTransport is false" in message
    assert check_stack(s3_buckets_tls_only, [bucket, _linked(POLICY, tls_policy(), bucket)]) == []
    assert check_stack(s3_buckets_tls_only, [_bucket(policy=tls_policy()["policy"])]) == []


def test_public_access():
    bucket = _bucket()
    [(message, _)] = check_stack(s3_buckets_block_public_access, [bucket])
    assert "has no BucketPublicAccessBlock" in message
    assert check_stack(s3_buckets_block_public_access, [bucket, _linked(PAB, access_block(), bucket)]) == []


def test_public_settings_are_judged_on_the_resource_itself():
    assert check(s3_public_access_settings, BUCKET, {"bucket": "web", "acl": "public-read"}, name="web") == [
        "aws:s3/bucket:Bucket 'web': acl 'public-read' grants public access"]
    assert check(s3_public_access_settings, BUCKET, {"bucket": "web"}, name="web") == []
    account = {"blockPublicAcls": True, "blockPublicPolicy": False, "ignorePublicAcls": True,
               "restrictPublicBuckets": True}
    assert check(s3_public_access_settings, "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock", account,
                 name="account") == [
        "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock 'account': blockPublicPolicy must be true"]
    # The stack rule no longer reports them a second time.
    public = _bucket("web", acl="public-read")
    assert check_stack(s3_buckets_block_public_access, [public, _linked(PAB, access_block(), public)]) == []


def test_exempted_bucket_is_not_reported():
    config = {"exemptions": [{"name": "logs", "type": BUCKET, "reason": "reviewed exception, ticket SEC-123"}]}
    assert check_stack(s3_buckets_encrypted_with_cmk, [_bucket("logs")], config) == []
