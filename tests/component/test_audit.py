"""`AuditTrail`, `VolumeEncryption` and `WorkloadLogs` under mocks, and in the stacks."""

from __future__ import annotations

import pulumi
import pytest

from components.audit import AuditTrail, AuditTrailArgs, event_selectors
from components.logs import WorkloadLogs, WorkloadLogsArgs
from components.volumes import VolumeEncryption, VolumeEncryptionArgs
from infra.config import load_stack
from tests.component.recorder import opts, record

LOGS_KEY = "arn:aws:kms:me-central-1:111122223333:key/logs"
VOLUMES_KEY = "arn:aws:kms:me-central-1:111122223333:key/volumes"
TRAIL = "aws:cloudtrail/trail:Trail"


@pytest.fixture(scope="module")
def audit():
    def program(provider):
        policy = pulumi.CustomResource("aws:s3/bucketPolicy:BucketPolicy", "audit-policy",
                                       {"bucket": "b-audit", "policy": "{}"}, opts=opts(provider))
        AuditTrail("audit", AuditTrailArgs(trail_name="mlplat-test-audit", bucket_name="b-audit",
                                           kms_key_arn=LOGS_KEY, data_buckets=("b-data", "b-models"),
                                           bucket_policy=policy), opts=opts(provider))
        VolumeEncryption("ebs", VolumeEncryptionArgs(kms_key_arn=VOLUMES_KEY), opts=opts(provider))
        WorkloadLogs("workload-logs", WorkloadLogsArgs(prefix="mlplat-test", kms_key_arn=LOGS_KEY,
                                                       retention_days=90), opts=opts(provider))

    return record(program)


def test_trail_records_every_region_and_iam_and_delivers_to_the_audit_bucket(audit):
    trail = audit.one(TRAIL)
    inputs = trail.inputs()
    assert inputs["name"] == "mlplat-test-audit"
    assert inputs["kmsKeyId"] == LOGS_KEY
    assert inputs["enableLogFileValidation"] is True
    # IAM, STS and CloudFront events reach only multi-region trails (outside us-east-1).
    assert inputs["isMultiRegionTrail"] is True and inputs["includeGlobalServiceEvents"] is True
    assert inputs["s3BucketName"] == "b-audit" and inputs["s3KeyPrefix"] == "cloudtrail"
    assert "region" not in inputs  # the provider's region, the stack's


def test_trail_records_data_events_on_the_data_buckets(audit):
    selectors = audit.one(TRAIL).inputs()["advancedEventSelectors"]
    expected = [
        {"name": s["name"], "fieldSelectors": [
            {("startsWiths" if k == "starts_withs" else k): v for k, v in f.items()} for f in s["field_selectors"]]}
        for s in event_selectors(["b-data", "b-models"])
    ]
    assert selectors == expected
    data = selectors[1]["fieldSelectors"]
    assert {"field": "resources.ARN", "startsWiths": ["arn:aws:s3:::b-data/", "arn:aws:s3:::b-models/"]} in data


def test_trail_waits_for_the_audit_bucket_policy(audit):
    policy = audit.one("aws:s3/bucketPolicy:BucketPolicy")
    assert policy.urn in audit.one(TRAIL).dependencies


def test_ebs_encryption_by_default_with_the_volumes_key(audit):
    on = audit.one("aws:ebs/encryptionByDefault:EncryptionByDefault")
    assert on.inputs()["enabled"] is True and on.retain_on_delete is True
    default_key = audit.one("aws:ebs/defaultKmsKey:DefaultKmsKey")
    # Account settings: giving them up must not reset them under the account's other users.
    assert default_key.inputs()["keyArn"] == VOLUMES_KEY and default_key.retain_on_delete is True


def test_workload_log_group(audit):
    group = audit.one("aws:cloudwatch/logGroup:LogGroup")
    inputs = group.inputs()
    assert inputs == {"name": "/mlplat/test/workloads", "kmsKeyId": LOGS_KEY, "retentionInDays": 90,
                      "deletionProtectionEnabled": True}
    assert group.retain_on_delete is True


def test_children_are_parented_and_on_the_provider(audit):
    [provider] = audit.of_type("pulumi:providers:aws")
    components = {r.urn for r in audit.registrations if not r.custom}
    for reg in audit.registrations:
        if reg.custom and not reg.is_provider and reg.name != "audit-policy":
            assert reg.parent in components and reg.provider_urn == provider.urn


# --- whole stacks ---------------------------------------------------------------------


def test_stack_trail_and_volume_keys(stack_preview):
    stack = stack_preview.stack
    [trail] = [r for r in stack_preview.registrations if r.type == TRAIL]
    # Multi-region, yet its logs land in the stack's own audit bucket under the logs key.
    assert trail.inputs()["isMultiRegionTrail"] is True
    assert trail.property_dependencies["kmsKeyId"][0].endswith("::keys-logs")
    [bucket] = trail.property_dependencies["s3BucketName"]
    assert stack_preview.by_urn[bucket].inputs()["bucket"] == f"mlplat-{stack}-audit-111122223333-me-central-1"
    assert stack_preview.by_urn[trail.provider_ref.rsplit("::", 1)[0]].inputs()["region"] == "me-central-1"
    # The account's EBS defaults: only in the one stack that owns them.
    owns = load_stack(stack).storage.ebs_account_defaults
    defaults = [r for r in stack_preview.registrations
                if r.type in ("aws:ebs/defaultKmsKey:DefaultKmsKey", "aws:ebs/encryptionByDefault:EncryptionByDefault")]
    assert len(defaults) == (2 if owns else 0)
    for default_key in (r for r in defaults if r.type == "aws:ebs/defaultKmsKey:DefaultKmsKey"):
        assert default_key.property_dependencies["keyArn"][0].endswith("::keys-volumes")
    groups = {r.inputs()["name"]: r for r in stack_preview.registrations
              if r.type == "aws:cloudwatch/logGroup:LogGroup"}
    workloads = groups[f"/mlplat/{stack}/workloads"]
    assert workloads.property_dependencies["kmsKeyId"][0].endswith("::keys-logs")
    assert workloads.inputs()["retentionInDays"] == 365
