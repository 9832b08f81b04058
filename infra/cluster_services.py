"""Tenancy and cluster add-ons for one environment: what runs inside the cluster before
any workload. The cluster layer builds them from the descriptor; the tenants' access
entries are the cloud layer's (`tenant_access`)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons import AddonsArgs, ClusterAddons, LustreVolume
from components.addons.alerts import AlertThresholds
from components.addons.plan import addon_context, chart_mirror, gpu_pools
from components.specs.cluster import default_storage_class
from components.tenancy import Tenancy, TenancyArgs, TenantAccess, TenantAccessArgs
from components.tenancy_spec import tenants_from_config
from infra.config import PlatformConfig
from infra.descriptor import ClusterDescriptor

# The encrypted default StorageClass the cluster layer creates (gp3, volumes key).
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


def tenant_access(config: PlatformConfig, cluster_name: pulumi.Input[str],
                  aws_provider: aws.Provider) -> TenantAccess:
    """The cloud layer's half of tenancy: each tenant role's access entry."""
    return TenantAccess("tenant-access", TenantAccessArgs(tenants_from_config(config.tenants), cluster_name),
                        opts=pulumi.ResourceOptions(providers={"aws": aws_provider}))


def build_cluster_services(
    config: PlatformConfig,
    descriptor: ClusterDescriptor,
    k8s_provider: k8s.Provider,
    storage_class: k8s.storage.v1.StorageClass,
) -> ClusterServices:
    providers = {"kubernetes": k8s_provider}
    tenants = tenants_from_config(config.tenants)
    tenancy = Tenancy(
        "tenancy",
        TenancyArgs(tenants=tenants, endpoint_cidrs=list(descriptor.endpoint_cidrs)),
        opts=pulumi.ResourceOptions(providers=providers),
    )
    telemetry = config.addons.telemetry
    addons = ClusterAddons(
        "addons",
        AddonsArgs(
            context=addon_context(config, descriptor.account_id, STORAGE_CLASS),
            pools=gpu_pools(config.node_pools),
            tenants=tenants,
            tenant_namespaces=tenancy.namespaces,
            chart_mirror=chart_mirror(config.addons.chart_mirror, descriptor.account_id, config.region,
                                       config.environment),
            thresholds=AlertThresholds(telemetry.gpu_temperature_celsius, telemetry.gpu_idle_percent),
            lustre=lustre_volume(config, descriptor),
            # Releases wait for Ready pods: the encrypted StorageClass (Prometheus' volumes)
            # first. The nodes, the CNI and the EBS CSI driver are the cloud layer's, applied
            # before this layer.
            depends_on=(storage_class,),
        ),
        opts=pulumi.ResourceOptions(providers=providers),
    )
    return ClusterServices(tenancy, addons)


def lustre_volume(config: PlatformConfig, descriptor: ClusterDescriptor) -> LustreVolume | None:
    """The environment's Lustre scratch file system, as the add-ons mount it."""
    if descriptor.lustre is None:
        return None
    fs = descriptor.lustre
    return LustreVolume(fs.file_system_id, fs.dns_name, fs.mount_name, config.storage.lustre.storage_capacity_gib)
