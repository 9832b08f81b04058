"""`RegionPinnedBucket`: an S3 bucket that is private, CMK-encrypted and TLS-only."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class BucketArgs:
    bucket_name: str  # globally unique: derived from project, stack, purpose and account
    kms_key_arn: pulumi.Input[str]
    force_destroy: bool = False


def tls_only_policy(bucket_arn: str) -> dict:
    """Bucket policy that refuses every request not made over TLS."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }
        ],
    }


class RegionPinnedBucket(pulumi.ComponentResource):
    """A bucket in the provider's region with SSE-KMS (bucket key on), all public access
    blocked, owner-enforced ownership, versioning, and a TLS-only bucket policy."""

    bucket: aws.s3.Bucket

    def __init__(self, name: str, args: BucketArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:storage:RegionPinnedBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = aws.s3.Bucket(
            name,
            bucket=args.bucket_name,
            force_destroy=args.force_destroy,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=not args.force_destroy)),
        )
        bucket_id = self.bucket.id
        aws.s3.BucketServerSideEncryptionConfiguration(
            name,
            bucket=bucket_id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms",
                        kms_master_key_id=args.kms_key_arn,
                    ),
                    bucket_key_enabled=True,
                )
            ],
            opts=child,
        )
        access_block = aws.s3.BucketPublicAccessBlock(
            name,
            bucket=bucket_id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketOwnershipControls(
            name,
            bucket=bucket_id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=child,
        )
        aws.s3.BucketVersioning(
            name,
            bucket=bucket_id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"),
            opts=child,
        )
        # After the access block: S3 rejects a policy write that races the block's creation.
        aws.s3.BucketPolicy(
            name,
            bucket=bucket_id,
            policy=self.bucket.arn.apply(lambda arn: json.dumps(tls_only_policy(arn))),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[access_block])),
        )
        self.register_outputs({"bucket": self.bucket.bucket, "arn": self.bucket.arn})
