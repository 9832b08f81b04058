"""Customer-managed KMS keys, one per data class."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

# AWS's longest pending window: a key scheduled for deletion by mistake can be recovered
# for a month, and nothing it encrypted is lost in the meantime.
DELETION_WINDOW_DAYS = 30


@dataclass(frozen=True)
class KeysArgs:
    prefix: str  # e.g. "mlplat-dev": alias names and descriptions start with it
    data_classes: tuple[str, ...]


class PlatformKeys(pulumi.ComponentResource):
    """A rotating, single-region, protected CMK with an alias for each data class."""

    keys: dict[str, aws.kms.Key]

    def __init__(self, name: str, args: KeysArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:storage:PlatformKeys", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.keys = {}
        for data_class in args.data_classes:
            key = aws.kms.Key(
                f"{name}-{data_class}",
                description=f"{args.prefix} {data_class}",
                enable_key_rotation=True,
                multi_region=False,
                deletion_window_in_days=DELETION_WINDOW_DAYS,
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=True)),
            )
            aws.kms.Alias(
                f"{name}-{data_class}",
                name=f"alias/{args.prefix}-{data_class}",
                target_key_id=key.key_id,
                opts=child,
            )
            self.keys[data_class] = key
        self.register_outputs({c: k.arn for c, k in self.keys.items()})
