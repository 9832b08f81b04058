"""Cluster add-ons: device plugins, GPU telemetry, scheduling and storage drivers.

`ClusterAddons` installs them in dependency order: system namespaces first, then the
Prometheus stack (its CRDs are needed by the exporters' ServiceMonitors and the GPU
rules), the device plugins, JobSet and Kueue with the queues, and the FSx CSI driver.
Workloads depend on `ClusterAddons.workload_dependencies`: nothing may be scheduled before
the GPUs are advertised, the queues exist, the scratch claims are bound and each tenant's
directory exists on the scratch file system.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from components.addons.alerts import AlertThresholds
from components.addons.device_plugins import DevicePlugins, DevicePluginsArgs
from components.addons.objects import create, create_fenced
from components.addons.plan import system_namespaces_needed
from components.addons.queues import PoolCapacity, flavor_capacities
from components.addons.scheduling import Scheduling, SchedulingArgs
from components.addons.storage_drivers import StorageDrivers, StorageDriversArgs
from components.addons.telemetry import GpuTelemetry, GpuTelemetryArgs
from components.addons.values import NAMESPACES, AddonContext
from components.addons.volumes import LustreVolume, SharedScratch, shared_scratch_claim
from components.system_network_spec import ingress_policies
from components.tenancy_spec import SYSTEM_NAMESPACES, Tenant, system_namespace

__all__ = ["AddonsArgs", "ClusterAddons", "LustreVolume", "SharedScratch"]


@dataclass(frozen=True)
class AddonsArgs:
    context: AddonContext
    pools: tuple[PoolCapacity, ...] = ()  # the GPU pools at their largest
    tenants: tuple[Tenant, ...] = ()
    tenant_namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    chart_mirror: str = field(kw_only=True)  # the in-region chart repository (oci://...)
    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    lustre: LustreVolume | None = None
    # A customer's cluster: each tenant's claim of its ReadWriteMany class.
    shared_scratch: SharedScratch | None = None
    depends_on: tuple[pulumi.Resource, ...] = ()  # node pools, the EBS CSI add-on, the StorageClass


class ClusterAddons(pulumi.ComponentResource):
    workload_dependencies: list[pulumi.Resource]

    def __init__(self, name: str, args: AddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:addons:ClusterAddons", name, None, opts)
        ctx = args.context
        base = list(args.depends_on)
        namespaces = {
            ns: create_fenced(system_namespace(SYSTEM_NAMESPACES[ns]), ingress_policies(ns),
                              pulumi.ResourceOptions(parent=self, depends_on=base))
            for ns in system_namespaces_needed(ctx, args.lustre is not None)
            if SYSTEM_NAMESPACES[ns].managed
        }

        def after(*charts: str, extra: list[pulumi.Resource] | None = None) -> tuple[pulumi.Resource, ...]:
            owned = [r for c in charts if NAMESPACES[c] in namespaces for r in namespaces[NAMESPACES[c]]]
            return (*base, *owned, *(extra or []))

        crds: list[pulumi.Resource] = []
        if ctx.telemetry:
            telemetry = GpuTelemetry(f"{name}-telemetry", GpuTelemetryArgs(
                context=ctx, thresholds=args.thresholds, chart_mirror=args.chart_mirror,
                depends_on=after("kube-prometheus-stack"),
            ), opts=pulumi.ResourceOptions(parent=self))
            crds.append(telemetry.stack)

        self.workload_dependencies = []
        if ctx.gpu_instance_types or ctx.efa_instance_types:
            plugins = DevicePlugins(f"{name}-device-plugins", DevicePluginsArgs(
                context=ctx, chart_mirror=args.chart_mirror,
                # The GPU Operator creates a ServiceMonitor for its DCGM exporter.
                depends_on=after("nvidia-device-plugin", "gpu-operator", "aws-efa-k8s-device-plugin", "network-operator",
                                 extra=crds if ctx.device_plugin_mode == "gpu-operator" else None),
            ), opts=pulumi.ResourceOptions(parent=self))
            self.workload_dependencies += plugins.releases
            if plugins.nic_cluster_policy is not None:
                self.workload_dependencies.append(plugins.nic_cluster_policy)

        scheduling = Scheduling(f"{name}-scheduling", SchedulingArgs(
            context=ctx, capacities=tuple(flavor_capacities(args.pools, ctx.time_slicing_replicas)),
            tenants=args.tenants, tenant_namespaces=args.tenant_namespaces, chart_mirror=args.chart_mirror,
            depends_on=after("jobset", "kueue", extra=crds),
        ), opts=pulumi.ResourceOptions(parent=self))

        self.workload_dependencies += [scheduling.jobset, *scheduling.local_queues.values()]

        if args.lustre is not None:
            storage = StorageDrivers(f"{name}-storage", StorageDriversArgs(
                context=ctx, lustre=args.lustre, tenant_namespaces=args.tenant_namespaces,
                tenant_groups={t.name: t.gid for t in args.tenants},
                chart_mirror=args.chart_mirror, depends_on=after("aws-fsx-csi-driver"),
            ), opts=pulumi.ResourceOptions(parent=self))
            self.workload_dependencies += storage.claims.values()
            if storage.tenant_directories is not None:
                self.workload_dependencies.append(storage.tenant_directories)
        if args.shared_scratch is not None:
            for namespace, ns_resource in args.tenant_namespaces.items():
                # Retained: a tenant dropped from the config keeps its checkpoints.
                self.workload_dependencies.append(create(
                    shared_scratch_claim(namespace, args.shared_scratch),
                    pulumi.ResourceOptions(parent=self, depends_on=[*base, ns_resource], retain_on_delete=True)))
        self.register_outputs({"namespaces": list(namespaces)})
