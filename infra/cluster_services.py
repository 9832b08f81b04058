"""Tenancy and cluster add-ons for one stack: what runs inside the cluster before any
workload, wired after the compute half of `build_platform`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components.addons import AddonsArgs, ClusterAddons, LustreVolume
from components.addons.alerts import AlertThresholds
from components.addons.plan import addon_context, chart_mirror, gpu_pools
from components.specs.cluster import default_storage_class
from components.tenancy import Tenancy, TenancyArgs
from components.tenancy_spec import tenants_from_config
from infra.config import PlatformConfig

# The encrypted default StorageClass the cluster's core add-ons create (gp3, volumes key).
STORAGE_CLASS = default_storage_class("")["metadata"]["name"]


@dataclass(frozen=True)
class ClusterServices:
    tenancy: Tenancy
    addons: ClusterAddons


def s3_prefix_list_cidrs(region: str, aws_provider: aws.Provider) -> list[str]:
    """The S3 gateway endpoint's addresses: pods read datasets from S3 through it."""
    prefix_list = aws.ec2.get_prefix_list(name=f"com.amazonaws.{region}.s3",
                                          opts=pulumi.InvokeOptions(provider=aws_provider))
    return list(prefix_list.cidr_blocks)


def build_cluster_services(
    config: PlatformConfig,
    account_id: str,
    compute: Any,  # infra.compute.Compute
    aws_provider: aws.Provider,
    lustre: LustreVolume | None = None,
) -> ClusterServices:
    providers = {"aws": aws_provider, "kubernetes": compute.cluster.k8s_provider}
    tenants = tenants_from_config(config.tenants)
    tenancy = Tenancy(
        "tenancy",
        TenancyArgs(
            tenants=tenants,
            cluster_name=compute.cluster.eks.name,
            endpoint_cidrs=[config.network.vpc_cidr, *s3_prefix_list_cidrs(config.region, aws_provider)],
        ),
        opts=pulumi.ResourceOptions(providers=providers),
    )
    telemetry = config.addons.telemetry
    addons = ClusterAddons(
        "addons",
        AddonsArgs(
            context=addon_context(config, account_id, STORAGE_CLASS),
            pools=gpu_pools(config.node_pools),
            tenants=tenants,
            tenant_namespaces=tenancy.namespaces,
            chart_mirror=chart_mirror(config.addons.chart_mirror, account_id, config.region),
            thresholds=AlertThresholds(telemetry.gpu_temperature_celsius, telemetry.gpu_idle_percent),
            lustre=lustre,
            # Releases wait for Ready pods: the nodes, the CNI and the encrypted StorageClass
            # (Prometheus' volumes) must be there first.
            depends_on=(compute.core_addons.storage_class, *compute.core_addons.addons.values(),
                        *(p.node_group for p in compute.node_pools.values())),
        ),
        opts=pulumi.ResourceOptions(providers=providers),
    )
    return ClusterServices(tenancy, addons)


def lustre_volume(config: PlatformConfig, storage: Any) -> LustreVolume | None:
    """The stack's Lustre scratch file system (infra.storage), as the add-ons mount it."""
    if getattr(storage, "lustre", None) is None:
        return None
    fs = storage.lustre.file_system
    return LustreVolume(fs.id, fs.dns_name, fs.mount_name, config.storage.lustre.storage_capacity_gib)
