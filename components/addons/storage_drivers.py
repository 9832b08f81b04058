"""Storage drivers: the FSx for Lustre CSI driver and the scratch file system as a
PersistentVolumeClaim `lustre-scratch` in each tenant namespace (specs in volumes.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from components.addons.charts import helm_release
from components.addons.objects import create
from components.addons.values import AddonContext, fsx_csi_values
from components.addons.volumes import LustreVolume, scratch_claim, scratch_volume

@dataclass(frozen=True)
class StorageDriversArgs:
    context: AddonContext
    lustre: LustreVolume | None = None
    tenant_namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    chart_mirror: str | None = None
    depends_on: tuple[pulumi.Resource, ...] = ()


class StorageDrivers(pulumi.ComponentResource):
    claims: dict[str, pulumi.CustomResource]

    def __init__(self, name: str, args: StorageDriversArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:addons:StorageDrivers", name, None, opts)
        self.claims = {}
        if args.lustre is not None:
            driver = helm_release("aws-fsx-csi-driver", fsx_csi_values(args.context), args.chart_mirror,
                                  pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)))
            for namespace, ns_resource in args.tenant_namespaces.items():
                volume = create(scratch_volume(namespace, args.lustre),
                                pulumi.ResourceOptions(parent=self, depends_on=[driver], retain_on_delete=True))
                self.claims[namespace] = create(
                    scratch_claim(namespace, args.lustre),
                    pulumi.ResourceOptions(parent=self, depends_on=[volume, ns_resource], retain_on_delete=True),
                )
        self.register_outputs({"claims": list(self.claims)})
