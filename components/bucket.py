"""`RegionPinnedBucket`: an S3 bucket that is private, CMK-encrypted and TLS-only."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.bucket_policy import TrailDelivery, bucket_arn, bucket_policy, lifecycle_rules

S3 = aws.s3


@dataclass(frozen=True)
class ObjectLock:
    """Default retention of an Object Lock (write-once) bucket."""

    mode: str  # GOVERNANCE: privileged users may lift it; COMPLIANCE: nobody may, not even root
    days: int


@dataclass(frozen=True)
class BucketArgs:
    bucket_name: str  # globally unique: derived from project, stack, purpose, account and region
    kms_key_arn: pulumi.Input[str]
    account_id: str
    force_destroy: bool = False
    noncurrent_version_days: int = 90
    expire_after_days: int | None = None  # current objects too (log buckets); None keeps them
    retained: tuple[tuple[str, int], ...] = ()  # (prefix, days): kept that long, then expired
    object_lock: ObjectLock | None = None
    # Server access logs of this bucket go to that bucket, under `access_log_prefix`.
    access_log_bucket: RegionPinnedBucket | None = None
    access_log_prefix: str = ""
    log_delivery_sources: tuple[str, ...] = ()  # buckets whose access logs S3 may write here
    trail: TrailDelivery | None = None  # a CloudTrail trail that writes here
    vpc_endpoint_id: pulumi.Input[str] | None = None  # object access only through this endpoint
    # (prefix, role ARN): objects under the prefix only that role may read or write
    owned_prefixes: tuple[tuple[str, str], ...] = ()


class RegionPinnedBucket(pulumi.ComponentResource):
    """A bucket in the provider's region with SSE-KMS (bucket key on), all public access
    blocked, owner-enforced ownership, versioning, lifecycle rules for old versions, and a
    policy that refuses plain HTTP and objects under any other key."""

    bucket: S3.Bucket
    policy: S3.BucketPolicy
    arn: str

    def __init__(self, name: str, args: BucketArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:storage:RegionPinnedBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.arn = bucket_arn(args.bucket_name)
        self.bucket = S3.Bucket(
            name,
            bucket=args.bucket_name,
            force_destroy=args.force_destroy,
            # Object Lock can only be switched on when the bucket is created.
            object_lock_enabled=True if args.object_lock else None,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=not args.force_destroy)),
        )
        bucket_id = self.bucket.id
        S3.BucketServerSideEncryptionConfiguration(
            name,
            bucket=bucket_id,
            rules=[
                S3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=S3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms",
                        kms_master_key_id=args.kms_key_arn,
                    ),
                    bucket_key_enabled=True,
                )
            ],
            opts=child,
        )
        access_block = S3.BucketPublicAccessBlock(
            name,
            bucket=bucket_id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        S3.BucketOwnershipControls(
            name,
            bucket=bucket_id,
            rule=S3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=child,
        )
        versioning = S3.BucketVersioning(
            name,
            bucket=bucket_id,
            versioning_configuration=S3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child,
        )
        after_versioning = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[versioning]))
        if args.object_lock:
            S3.BucketObjectLockConfiguration(
                name,
                bucket=bucket_id,
                rule=S3.BucketObjectLockConfigurationRuleArgs(
                    default_retention=S3.BucketObjectLockConfigurationRuleDefaultRetentionArgs(
                        mode=args.object_lock.mode, days=args.object_lock.days
                    )
                ),
                opts=after_versioning,
            )
        S3.BucketLifecycleConfiguration(
            name,
            bucket=bucket_id,
            rules=[
                S3.BucketLifecycleConfigurationRuleArgs(
                    id=rule.id,
                    status="Enabled",
                    filter=S3.BucketLifecycleConfigurationRuleFilterArgs(prefix=rule.prefix),
                    noncurrent_version_expiration=(
                        S3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                            noncurrent_days=rule.noncurrent_days
                        )
                        if rule.noncurrent_days
                        else None
                    ),
                    expiration=(
                        S3.BucketLifecycleConfigurationRuleExpirationArgs(days=rule.expire_days)
                        if rule.expire_days
                        else None
                    ),
                    abort_incomplete_multipart_upload=(
                        S3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                            days_after_initiation=rule.abort_multipart_days
                        )
                        if rule.abort_multipart_days
                        else None
                    ),
                )
                for rule in lifecycle_rules(args.noncurrent_version_days, args.expire_after_days, args.retained)
            ],
            opts=after_versioning,
        )
        document = pulumi.Output.all(args.kms_key_arn, args.vpc_endpoint_id).apply(
            lambda values: json.dumps(
                bucket_policy(
                    args.bucket_name,
                    values[0],
                    account=args.account_id,
                    log_delivery_sources=args.log_delivery_sources,
                    trail=args.trail,
                    vpc_endpoint_id=values[1],
                    owned_prefixes=args.owned_prefixes,
                )
            )
        )
        # After the access block: S3 rejects a policy write that races the block's creation.
        self.policy = S3.BucketPolicy(
            name,
            bucket=bucket_id,
            policy=document,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[access_block])),
        )
        if args.access_log_bucket is not None:
            target = args.access_log_bucket
            S3.BucketLogging(
                name,
                bucket=bucket_id,
                target_bucket=target.bucket.bucket,
                target_prefix=args.access_log_prefix,
                target_object_key_format=S3.BucketLoggingTargetObjectKeyFormatArgs(
                    partitioned_prefix=S3.BucketLoggingTargetObjectKeyFormatPartitionedPrefixArgs(
                        partition_date_source="EventTime"
                    )
                ),
                # The target must allow the delivery before logging is switched on.
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[target.policy])),
            )
        self.register_outputs({"bucket": self.bucket.bucket, "arn": self.bucket.arn})
