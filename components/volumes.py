"""`VolumeEncryption`: every new EBS volume in the region encrypted with the platform's
volumes key, whoever creates it and however.

Both settings belong to the account and region, not to a stack: a second stack setting
them would overwrite the first's key, and every other EBS user's in the account. So only
the stack whose config says `mlplat:storage: ebsAccountDefaults: true` makes this
component, and exactly one stack per account and region may say so."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class VolumeEncryptionArgs:
    kms_key_arn: pulumi.Input[str]


class VolumeEncryption(pulumi.ComponentResource):
    def __init__(self, name: str, args: VolumeEncryptionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:storage:VolumeEncryption", name, None, opts)
        # Both are region-wide account settings. Encryption by default stays on after the
        # stack is gone: turning it off would be a surprise to everyone else in the account.
        self.encryption_by_default = aws.ebs.EncryptionByDefault(
            name, enabled=True, opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        )
        # Kept too: a stack that gives the settings up (or is destroyed) must not reset
        # the key under every other EBS user of the account.
        self.default_key = aws.ebs.DefaultKmsKey(
            name,
            key_arn=args.kms_key_arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.encryption_by_default], retain_on_delete=True),
        )
        self.register_outputs({"keyArn": self.default_key.key_arn})
