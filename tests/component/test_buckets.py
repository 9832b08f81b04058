"""`RegionPinnedBucket` under mocks: encryption, public access, ownership, versioning,
lifecycle, policy, access logging and Object Lock as the engine receives them."""

from __future__ import annotations

import json

import pytest

from components.bucket import BucketArgs, ObjectLock, RegionPinnedBucket
from components.bucket_policy import TrailDelivery, bucket_policy
from infra.config import load_stack
from tests.component.recorder import opts, record

ACCOUNT = "111122223333"
KEY = "arn:aws:kms:me-central-1:111122223333:key/data"
LOGS_KEY = "arn:aws:kms:me-central-1:111122223333:key/logs"
TRAIL = TrailDelivery("arn:aws:cloudtrail:me-central-1:111122223333:trail/t", ACCOUNT)

S3 = "aws:s3/"
BUCKET = "aws:s3/bucket:Bucket"
SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
OWNERSHIP = "aws:s3/bucketOwnershipControls:BucketOwnershipControls"
VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
POLICY = "aws:s3/bucketPolicy:BucketPolicy"
LOGGING = "aws:s3/bucketLogging:BucketLogging"
OBJECT_LOCK = "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration"


def program(force_destroy: bool = False, vpc_endpoint_id: str | None = None):
    def run(provider):
        logs = RegionPinnedBucket("access-logs", BucketArgs(
            bucket_name="b-access-logs", kms_key_arn=LOGS_KEY, account_id=ACCOUNT, force_destroy=force_destroy,
            expire_after_days=365, log_delivery_sources=("b-data", "b-audit")), opts=opts(provider))
        RegionPinnedBucket("audit", BucketArgs(
            bucket_name="b-audit", kms_key_arn=LOGS_KEY, account_id=ACCOUNT, force_destroy=force_destroy,
            object_lock=ObjectLock("COMPLIANCE", 400), trail=TRAIL, access_log_bucket=logs,
            access_log_prefix="audit/"), opts=opts(provider))
        RegionPinnedBucket("data", BucketArgs(
            bucket_name="b-data", kms_key_arn=KEY, account_id=ACCOUNT, force_destroy=force_destroy,
            noncurrent_version_days=45, access_log_bucket=logs, access_log_prefix="data/",
            vpc_endpoint_id=vpc_endpoint_id), opts=opts(provider))

    return run


@pytest.fixture(scope="module")
def buckets():
    return record(program())


def test_buckets_are_named_protected_and_not_force_destroyed(buckets):
    for reg in buckets.of_type(BUCKET):
        assert reg.inputs()["bucket"] == f"b-{reg.name}"
        assert reg.inputs()["forceDestroy"] is False
        assert reg.protect is True


def test_sse_kms_with_the_buckets_key_and_bucket_key_on(buckets):
    keys = {"data": KEY, "audit": LOGS_KEY, "access-logs": LOGS_KEY}
    for name, key in keys.items():
        [rule] = buckets.one(SSE, name).inputs()["rules"]
        assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": key}
        assert rule["bucketKeyEnabled"] is True


def test_all_four_public_access_blocks(buckets):
    for reg in buckets.of_type(ACCESS_BLOCK):
        inputs = reg.inputs()
        assert [inputs[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                    "restrictPublicBuckets")] == [True] * 4


def test_owner_enforced_and_versioned(buckets):
    for name in ("data", "audit", "access-logs"):
        assert buckets.one(OWNERSHIP, name).inputs()["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
        assert buckets.one(VERSIONING, name).inputs()["versioningConfiguration"] == {"status": "Enabled"}


def test_every_companion_resource_targets_its_own_bucket(buckets):
    for bucket in buckets.of_type(BUCKET):
        for kind in (SSE, ACCESS_BLOCK, OWNERSHIP, VERSIONING, LIFECYCLE, POLICY):
            assert buckets.one(kind, bucket.name).property_dependencies["bucket"] == [bucket.urn]


def test_lifecycle_expires_old_versions_and_stale_uploads(buckets):
    rules = {r["id"]: r for r in buckets.one(LIFECYCLE, "data").inputs()["rules"]}
    assert rules["expire-noncurrent-versions"]["noncurrentVersionExpiration"] == {"noncurrentDays": 45}
    assert rules["abort-incomplete-multipart-uploads"]["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 7}
    assert "expire-objects" not in rules
    assert all(r["status"] == "Enabled" and r["filter"] == {"prefix": ""} for r in rules.values())
    logs = {r["id"]: r for r in buckets.one(LIFECYCLE, "access-logs").inputs()["rules"]}
    assert logs["expire-objects"]["expiration"] == {"days": 365}
    versioning = buckets.one(VERSIONING, "data")
    assert versioning.urn in buckets.one(LIFECYCLE, "data").dependencies


def test_bucket_policies_as_the_spec_says(buckets):
    expected = {
        "data": bucket_policy("b-data", KEY, account=ACCOUNT),
        "audit": bucket_policy("b-audit", LOGS_KEY, account=ACCOUNT, trail=TRAIL),
        "access-logs": bucket_policy("b-access-logs", LOGS_KEY, account=ACCOUNT,
                                     log_delivery_sources=("b-data", "b-audit")),
    }
    for name, document in expected.items():
        policy = buckets.one(POLICY, name)
        assert json.loads(policy.inputs()["policy"]) == document
        assert buckets.one(ACCESS_BLOCK, name).urn in policy.dependencies
    sids = {s["Sid"] for s in expected["data"]["Statement"]}
    assert {"DenyInsecureTransport", "DenyObjectsNotEncryptedWithKms", "DenyObjectsEncryptedWithAnotherKey"} <= sids


def test_access_logging_goes_to_the_log_bucket_after_its_policy(buckets):
    logs_policy = buckets.one(POLICY, "access-logs")
    for name, prefix in (("data", "data/"), ("audit", "audit/")):
        logging = buckets.one(LOGGING, name).inputs()
        assert logging["targetBucket"] == "b-access-logs" and logging["targetPrefix"] == prefix
        assert logging["targetObjectKeyFormat"] == {"partitionedPrefix": {"partitionDateSource": "EventTime"}}
        assert logs_policy.urn in buckets.one(LOGGING, name).dependencies
    assert [r.name for r in buckets.of_type(LOGGING)] != [] and "access-logs" not in [
        r.name for r in buckets.of_type(LOGGING)]


def test_only_the_audit_bucket_is_object_locked(buckets):
    assert buckets.one(BUCKET, "audit").inputs()["objectLockEnabled"] is True
    assert "objectLockEnabled" not in buckets.one(BUCKET, "data").inputs()
    lock = buckets.one(OBJECT_LOCK, "audit").inputs()
    assert lock["rule"] == {"defaultRetention": {"mode": "COMPLIANCE", "days": 400}}
    assert len(buckets.of_type(OBJECT_LOCK)) == 1


def test_children_are_parented_and_on_the_provider(buckets):
    [provider] = buckets.of_type("pulumi:providers:aws")
    components = {r.urn: r.name for r in buckets.of_type("mlplat:storage:RegionPinnedBucket")}
    for reg in buckets.registrations:
        if reg.type.startswith(S3):
            assert components[reg.parent] == reg.name
            assert reg.provider_urn == provider.urn


def test_force_destroy_is_explicit_and_lifts_protection():
    throwaway = record(program(force_destroy=True))
    for reg in throwaway.of_type(BUCKET):
        assert reg.inputs()["forceDestroy"] is True and reg.protect is False


def test_vpc_endpoint_restriction_lands_in_the_policy():
    restricted = record(program(vpc_endpoint_id="vpce-0123"))
    policy = json.loads(restricted.one(POLICY, "data").inputs()["policy"])
    [rule] = [s for s in policy["Statement"] if s["Sid"] == "ObjectAccessOnlyThroughTheVpcEndpoint"]
    assert rule["Condition"]["StringNotEqualsIfExists"] == {"aws:SourceVpce": "vpce-0123"}


# --- whole stacks ---------------------------------------------------------------------


def test_stack_buckets(stack_preview):
    names = {r.name: r.inputs()["bucket"] for r in stack_preview.registrations if r.type == BUCKET}
    stack = stack_preview.stack
    assert names == {p: f"mlplat-{stack}-{p}-111122223333-me-central-1"
                     for p in ("datasets", "models", "checkpoints", "audit", "access-logs")}
    logged = {r.name for r in stack_preview.registrations if r.type == LOGGING}
    assert logged == {"datasets", "models", "checkpoints", "audit"}
    [lock] = [r.inputs() for r in stack_preview.registrations if r.type == OBJECT_LOCK]
    expected_mode = {"prod": "COMPLIANCE"}.get(stack, "GOVERNANCE")
    assert lock["rule"]["defaultRetention"]["mode"] == expected_mode


def test_stack_keeps_old_dataset_versions_longer_than_other_buckets(stack_preview):
    """Deleted or replaced dataset objects outlive the other buckets' old versions: the
    data a served model was trained on stays readable (storage.datasetVersionDays)."""
    storage = load_stack(stack_preview.stack).storage
    kept = {}
    for lifecycle in (r for r in stack_preview.registrations if r.type == LIFECYCLE):
        [bucket] = lifecycle.property_dependencies["bucket"]
        rules = {rule["id"]: rule for rule in lifecycle.inputs()["rules"]}
        if "expire-noncurrent-versions" in rules:
            kept[stack_preview.by_urn[bucket].name] = \
                rules["expire-noncurrent-versions"]["noncurrentVersionExpiration"]["noncurrentDays"]
    assert kept["datasets"] == storage.dataset_version_days > storage.noncurrent_version_days
    assert kept["models"] == kept["checkpoints"] == storage.noncurrent_version_days
