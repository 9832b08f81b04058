"""Customer-managed KMS keys, one per data class, each with its own key policy."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.key_policy import KeyUse, key_policy

# AWS's longest pending window: a key scheduled for deletion by mistake can be recovered
# for a month, and nothing it encrypted is lost in the meantime.
DELETION_WINDOW_DAYS = 30


@dataclass(frozen=True)
class KeysArgs:
    prefix: str  # e.g. "mlplat-dev": alias names and descriptions start with it
    account_id: str
    region: str
    uses: Mapping[str, KeyUse]  # data class -> the services that may use its key


class PlatformKeys(pulumi.ComponentResource):
    """A rotating, single-region, protected CMK with an alias for each data class."""

    keys: dict[str, aws.kms.Key]
    aliases: dict[str, aws.kms.Alias]

    def __init__(self, name: str, args: KeysArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:storage:PlatformKeys", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.keys, self.aliases = {}, {}
        for data_class, use in args.uses.items():
            services = ", ".join(use.services) or "no service"
            key = aws.kms.Key(
                f"{name}-{data_class}",
                description=f"{args.prefix} {data_class} ({services})",
                enable_key_rotation=True,
                multi_region=False,
                deletion_window_in_days=DELETION_WINDOW_DAYS,
                policy=json.dumps(key_policy(args.account_id, args.region, use)),
                tags={"data-class": data_class},
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=True)),
            )
            self.aliases[data_class] = aws.kms.Alias(
                f"{name}-{data_class}",
                name=f"alias/{args.prefix}-{data_class}",
                target_key_id=key.key_id,
                opts=child,
            )
            self.keys[data_class] = key
        self.register_outputs({c: k.arn for c, k in self.keys.items()})
