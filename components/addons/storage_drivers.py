"""Storage drivers: the FSx for Lustre CSI driver, the scratch file system as a
PersistentVolumeClaim `lustre-scratch` in each tenant namespace, and the Job that makes each
tenant's directory on it (specs in volumes.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from components.addons.charts import helm_chart
from components.addons.objects import create
from components.addons.values import AddonContext, fsx_csi_values
from components.addons.volumes import (
    LustreVolume,
    directories_claim,
    directories_job,
    directories_network_policy,
    directories_volume,
    scratch_claim,
    scratch_volume,
)


@dataclass(frozen=True)
class StorageDriversArgs:
    context: AddonContext
    lustre: LustreVolume | None = None
    tenant_namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    tenant_groups: Mapping[str, int] = field(default_factory=dict)  # each tenant's group
    chart_mirror: str = field(kw_only=True)  # the in-region chart repository (oci://...)
    depends_on: tuple[pulumi.Resource, ...] = ()


class StorageDrivers(pulumi.ComponentResource):
    claims: dict[str, pulumi.CustomResource]
    # The Job that makes the tenants' directories; None without Lustre. Workloads that
    # write to Lustre depend on it (Pulumi waits for a Job to complete).
    tenant_directories: pulumi.CustomResource | None

    def __init__(self, name: str, args: StorageDriversArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:addons:StorageDrivers", name, None, opts)
        self.claims = {}
        self.tenant_directories = None
        if args.lustre is not None:
            driver = helm_chart("aws-fsx-csi-driver", fsx_csi_values(args.context), args.chart_mirror,
                                  pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)))
            for namespace, ns_resource in args.tenant_namespaces.items():
                volume = create(scratch_volume(namespace, args.lustre),
                                pulumi.ResourceOptions(parent=self, depends_on=[driver], retain_on_delete=True))
                self.claims[namespace] = create(
                    scratch_claim(namespace, args.lustre),
                    pulumi.ResourceOptions(parent=self, depends_on=[volume, ns_resource], retain_on_delete=True),
                )
            if args.tenant_namespaces:
                volume = create(directories_volume(args.lustre),
                                pulumi.ResourceOptions(parent=self, depends_on=[driver], retain_on_delete=True))
                claim = create(directories_claim(args.lustre),
                               pulumi.ResourceOptions(parent=self, depends_on=[volume], retain_on_delete=True))
                # The policy first, so the Job's pod never runs with network access.
                isolation = create(directories_network_policy(),
                                   pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)))
                self.tenant_directories = create(
                    directories_job([(t, args.tenant_groups[t]) for t in args.tenant_namespaces],
                                    args.context.image("node-debug").uri),
                    pulumi.ResourceOptions(parent=self, depends_on=[claim, isolation]),
                )
        self.register_outputs({"claims": list(self.claims)})
