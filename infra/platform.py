"""`build_platform`: wires the components for one stack. The same function runs under
the real engine (`pulumi up`) and under the offline preview's mocks."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.bucket import BucketArgs, RegionPinnedBucket
from components.keys import KeysArgs, PlatformKeys
from infra.config import PROJECT, PlatformConfig


# One customer-managed key per class of data, so access to one class can be granted or
# revoked without touching the others.
DATA_CLASSES = ("datasets", "models", "checkpoints", "logs", "cluster", "volumes")


@dataclass(frozen=True)
class Platform:
    aws_provider: aws.Provider
    account_id: str
    keys: PlatformKeys
    buckets: dict[str, RegionPinnedBucket]


def region_provider(config: PlatformConfig) -> aws.Provider:
    """The one AWS provider: pinned to the stack's region, carrying the default tags.
    Default providers are disabled per stack, so a resource that forgets it fails."""
    return aws.Provider(
        f"aws-{config.region}",
        region=config.region,
        default_tags=aws.ProviderDefaultTagsArgs(tags=config.default_tags),
    )


def build_platform(config: PlatformConfig) -> Platform:
    provider = region_provider(config)
    aws_opts = pulumi.ResourceOptions(providers={"aws": provider})
    invoke_opts = pulumi.InvokeOptions(provider=provider)
    account_id = aws.get_caller_identity(opts=invoke_opts).account_id
    prefix = f"{PROJECT}-{pulumi.get_stack()}"

    keys = PlatformKeys("keys", KeysArgs(prefix=prefix, data_classes=DATA_CLASSES), opts=aws_opts)
    buckets = {
        purpose: RegionPinnedBucket(
            purpose,
            BucketArgs(
                bucket_name=f"{prefix}-{purpose}-{account_id}",
                kms_key_arn=keys.keys[purpose].arn,
                force_destroy=config.storage.force_destroy,
            ),
            opts=aws_opts,
        )
        for purpose in ("datasets",)
    }

    pulumi.export("region", config.region)
    pulumi.export("keys", {c: k.arn for c, k in keys.keys.items()})
    pulumi.export("buckets", {p: b.bucket.bucket for p, b in buckets.items()})
    return Platform(provider, account_id, keys, buckets)
