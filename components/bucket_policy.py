"""Bucket names, bucket policies and lifecycle rules of the platform's buckets, as plain
data. Nothing here imports Pulumi."""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.key_policy import FSX_S3_ROLE

# S3 bucket naming rules: 3-63 characters, lowercase letters, digits and hyphens, starting
# and ending with a letter or digit.
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")

# Prefixes inside the log buckets.
CLOUDTRAIL_PREFIX = "cloudtrail"

# Object actions the optional VPC-endpoint restriction covers. Bucket configuration stays
# reachable from outside the VPC, so the stack's own deployments keep working.
DATA_ACTIONS = ("s3:GetObject*", "s3:PutObject*", "s3:DeleteObject*", "s3:RestoreObject")



def bucket_name(project: str, stack: str, purpose: str, account: str, region: str) -> str:
    """`<project>-<stack>-<purpose>-<account>-<region>`: unique per stack, account and
    region, so two stacks (or one stack in two regions) never claim the same name."""
    name = f"{project}-{stack}-{purpose}-{account}-{region}".lower()
    if not _BUCKET_NAME.match(name) or "--" in name:
        raise ValueError(
            f"bucket name {name!r} breaks S3's naming rules (3-63 lowercase letters, digits and single "
            "hyphens); use a shorter stack name"
        )
    return name


def bucket_arn(name: str, partition: str = "aws") -> str:
    return f"arn:{partition}:s3:::{name}"


@dataclass(frozen=True)
class TrailDelivery:
    """A CloudTrail trail that writes into the bucket."""

    trail_arn: str
    account: str
    prefix: str = CLOUDTRAIL_PREFIX

    @property
    def log_path(self) -> str:
        return f"{self.prefix}/AWSLogs/{self.account}"

    @property
    def digest_path(self) -> str:
        # CloudTrail writes its digest files with SSE-S3 whatever the trail's key: the one
        # place in the bucket where the key rule below cannot apply.
        return f"{self.log_path}/CloudTrail-Digest"


def bucket_policy(
    bucket: str,
    kms_key_arn: str,
    *,
    account: str,
    log_delivery_sources: tuple[str, ...] = (),
    trail: TrailDelivery | None = None,
    vpc_endpoint_id: str | None = None,
    owned_prefixes: tuple[tuple[str, str | tuple[str, ...]], ...] = (),  # (prefix, its owner role ARN or ARNs)
    partition: str = "aws",
) -> dict:
    """TLS only; every new object under this bucket's key; plus the log deliveries this
    bucket receives and, optionally, object access only through the VPC endpoint, and
    prefixes (prefix, role ARN) whose objects only that role may read or write."""
    arn = bucket_arn(bucket, partition)
    objects = f"{arn}/*"
    # Writes that name no encryption get the bucket's default, which is this key: S3 log
    # delivery, FSx export and SDK clients write that way, so a missing header must pass.
    # `...IfExists` would not do: it is true when the key is absent, so a Deny with it
    # refuses every such write. Each Deny therefore requires its header to be present
    # (`Null: false`) and refuses: another algorithm (SSE-S3), another key, or aws:kms
    # without a key, which S3 would encrypt under the AWS managed aws/s3 key. Separate
    # statements, because the keys inside one condition are ANDed.
    algorithm, key_id = "s3:x-amz-server-side-encryption", "s3:x-amz-server-side-encryption-aws-kms-key-id"
    wrong_encryption = [
        {
            "Sid": "DenyObjectsNotEncryptedWithKms",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:PutObject",
            "Resource": objects,
            "Condition": {"StringNotEquals": {algorithm: "aws:kms"}, "Null": {algorithm: "false"}},
        },
        {
            "Sid": "DenyObjectsEncryptedWithAnotherKey",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:PutObject",
            "Resource": objects,
            "Condition": {"StringNotEquals": {key_id: kms_key_arn}, "Null": {key_id: "false"}},
        },
        {
            "Sid": "DenyKmsWithoutTheBucketKey",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:PutObject",
            "Resource": objects,
            "Condition": {"Null": {algorithm: "false", key_id: "true"}},
        },
    ]
    statements: list[dict] = [
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [arn, objects],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
    ]
    if trail is None:
        statements += wrong_encryption
    else:
        digests = f"{arn}/{trail.digest_path}/*"
        # Everything but the digest files; and nobody but CloudTrail writes digest files.
        statements += [
            {**{k: v for k, v in rule.items() if k != "Resource"}, "NotResource": digests} for rule in wrong_encryption
        ]
        statements += [
            {
                "Sid": "OnlyCloudTrailWritesDigests",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": digests,
                "Condition": {"StringNotEqualsIfExists": {"aws:PrincipalServiceName": "cloudtrail.amazonaws.com"}},
            },
            {
                "Sid": "CloudTrailAclCheck",
                "Effect": "Allow",
                "Principal": {"Service": "cloudtrail.amazonaws.com"},
                "Action": "s3:GetBucketAcl",
                "Resource": arn,
                "Condition": {"StringEquals": {"aws:SourceArn": trail.trail_arn}},
            },
            {
                "Sid": "CloudTrailWrite",
                "Effect": "Allow",
                "Principal": {"Service": "cloudtrail.amazonaws.com"},
                "Action": "s3:PutObject",
                "Resource": f"{arn}/{trail.log_path}/*",
                "Condition": {
                    "StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control", "aws:SourceArn": trail.trail_arn}
                },
            },
        ]
    if log_delivery_sources:
        statements.append(
            {
                "Sid": "S3ServerAccessLogDelivery",
                "Effect": "Allow",
                "Principal": {"Service": "logging.s3.amazonaws.com"},
                "Action": "s3:PutObject",
                "Resource": objects,
                "Condition": {
                    "ArnLike": {"aws:SourceArn": [bucket_arn(b, partition) for b in log_delivery_sources]},
                    "StringEquals": {"aws:SourceAccount": account},
                },
            }
        )
    if vpc_endpoint_id:
        statements.append(
            {
                "Sid": "ObjectAccessOnlyThroughTheVpcEndpoint",
                "Effect": "Deny",
                "Principal": "*",
                "Action": list(DATA_ACTIONS),
                "Resource": objects,
                "Condition": {
                    "StringNotEqualsIfExists": {"aws:SourceVpce": vpc_endpoint_id},
                    # AWS services acting on the bucket themselves (log delivery, FSx data
                    # repositories) do not come through our endpoint.
                    "BoolIfExists": {"aws:PrincipalIsAWSService": "false", "aws:ViaAWSService": "false"},
                    "ArnNotLikeIfExists": {"aws:PrincipalArn": f"arn:{partition}:iam::{account}:{FSX_S3_ROLE}"},
                },
            }
        )
    for prefix, owner in owned_prefixes:
        # A prefix with owners (a tenant's feature store, a model's request logs, the model
        # repository, MLflow's artifacts, a tenant's runs): no other principal reaches it,
        # whatever its own policies allow.
        statements.append(
            {
                "Sid": "OnlyOwnerReads" + "".join(part.capitalize() for part in prefix.strip("/").replace("-", "/")
                                                  .split("/")),
                "Effect": "Deny",
                "Principal": "*",
                "Action": list(DATA_ACTIONS),
                "Resource": f"{arn}/{prefix}*",
                "Condition": {"ArnNotEquals": {"aws:PrincipalArn": owner if isinstance(owner, str) else list(owner)}},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


@dataclass(frozen=True)
class LifecycleRule:
    id: str
    noncurrent_days: int | None = None  # expire versions this long after they were replaced
    expire_days: int | None = None  # expire current objects (log buckets, and retained prefixes)
    abort_multipart_days: int | None = None
    prefix: str = ""  # the keys it applies to; "" the whole bucket


# Half-finished multipart uploads are invisible in listings but billed; a week is ample.
ABORT_MULTIPART_DAYS = 7


def lifecycle_rules(noncurrent_days: int, expire_days: int | None = None,
                    retained: tuple[tuple[str, int], ...] = ()) -> list[LifecycleRule]:
    """Old versions go after `noncurrent_days`; current objects stay unless `expire_days`.
    Each (prefix, days) of `retained` is kept that long and no longer: its objects expire,
    and the versions expiry leaves behind go the next day (the whole bucket's noncurrent
    rule would keep them for `noncurrent_days`; S3 applies the shorter of overlapping
    expirations)."""
    for label, days in (("noncurrent_days", noncurrent_days), ("expire_days", expire_days),
                        *((f"retention of {prefix}", d) for prefix, d in retained)):
        if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 1):
            raise ValueError(f"{label} must be a whole number of days, 1 or more; got {days!r}")
    rules = [
        LifecycleRule("expire-noncurrent-versions", noncurrent_days=noncurrent_days),
        LifecycleRule("abort-incomplete-multipart-uploads", abort_multipart_days=ABORT_MULTIPART_DAYS),
    ]
    if expire_days is not None:
        rules.append(LifecycleRule("expire-objects", expire_days=expire_days))
    for prefix, days in retained:
        rules.append(LifecycleRule(f"retain-{prefix.strip('/').replace('/', '-')}", expire_days=days,
                                   noncurrent_days=1, prefix=prefix))
    return rules
