"""Tenancy and cluster add-ons for one environment: what runs inside the cluster before
any workload. The cluster layer builds them from the descriptor; the tenants' access
entries are the cloud layer's (`tenant_access`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons import AddonsArgs, ClusterAddons, LustreVolume, SharedScratch
from components.addons.alerts import AlertThresholds
from components.addons.plan import addon_context, chart_mirror, gpu_pools
from components.specs.cluster import default_storage_class
from components.tenancy import Tenancy, TenancyArgs, TenantAccess, TenantAccessArgs
from components.tenancy_spec import tenants_from_config
from infra.catalog import lookup
from infra.config import PlatformConfig
from infra.descriptor import ClusterDescriptor, CustomerClusterDescriptor

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
    lustre = lustre_volume(config, descriptor)
    tenancy = Tenancy(
        "tenancy",
        TenancyArgs(tenants=tenants, endpoint_cidrs=list(descriptor.endpoint_cidrs), gpu_pools=gpu_pool_names(config),
                    scratch_gi=lustre.capacity_gib if lustre is not None else 0),
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
            lustre=lustre,
            # Releases wait for Ready pods: the encrypted StorageClass (Prometheus' volumes)
            # first. The nodes, the CNI and the EBS CSI driver are the cloud layer's, applied
            # before this layer.
            depends_on=(storage_class,),
        ),
        opts=pulumi.ResourceOptions(providers=providers),
    )
    return ClusterServices(tenancy, addons)


def gpu_pool_names(config: PlatformConfig) -> tuple[tuple[str, str], ...]:
    """(name, instance type) of every pool with GPUs."""
    return tuple((p.name, lookup(p.instance_type).name) for p in config.node_pools if lookup(p.instance_type).has_gpu)


def lustre_volume(config: PlatformConfig, descriptor: ClusterDescriptor) -> LustreVolume | None:
    """The environment's Lustre scratch file system, as the add-ons mount it."""
    if descriptor.lustre is None:
        return None
    fs = descriptor.lustre
    return LustreVolume(fs.file_system_id, fs.dns_name, fs.mount_name, config.storage.lustre.storage_capacity_gib)


def build_customer_services(
    config: PlatformConfig,
    descriptor: CustomerClusterDescriptor,
    k8s_provider: k8s.Provider,
) -> ClusterServices:
    """Tenancy and add-ons on a cluster the customer runs: the same tenants and queues,
    telemetry on its default storage class, every image and chart from its registry; the
    GPU Operator with the driver and the container toolkit (bare metal), the Network
    Operator for its RDMA fabric; each tenant's shared scratch on its ReadWriteMany class.
    None of the AWS-only add-ons (EFA device plugin, FSx CSI driver, EBS, the load balancer
    controller, Pod Identity): its nodes have none of what they serve."""
    providers = {"kubernetes": k8s_provider}
    tenants = tenants_from_config(config.tenants)
    tenancy = Tenancy(
        "tenancy",
        # Tenants' pods reach the object store (HTTPS) and nothing else outside the cluster.
        TenancyArgs(tenants=tenants, endpoint_cidrs=list(descriptor.object_storage.cidrs),
                    gpu_pools=gpu_pool_names(config),
                    scratch_gi=descriptor.storage_classes.scratch_gib if descriptor.storage_classes.shared else 0),
        opts=pulumi.ResourceOptions(providers=providers),
    )
    telemetry = config.addons.telemetry
    fabrics = tuple((g.name, g.fabric.node_fabric()) for g in descriptor.nodes if g.fabric is not None)
    context = replace(addon_context(config, "", descriptor.storage_classes.default),
                      registry=descriptor.registry_host, bare_metal=True, fabrics=fabrics)
    labelled = {g.instance_type: tuple(sorted(g.labels.items())) for g in descriptor.nodes}
    pools = tuple(replace(p, node_labels=labelled.get(p.instance_type, ())) for p in gpu_pools(config.node_pools))
    shared = descriptor.storage_classes.shared
    addons = ClusterAddons(
        "addons",
        AddonsArgs(
            context=context,
            pools=pools,
            tenants=tenants,
            tenant_namespaces=tenancy.namespaces,
            chart_mirror=descriptor.chart_mirror,
            thresholds=AlertThresholds(telemetry.gpu_temperature_celsius, telemetry.gpu_idle_percent),
            shared_scratch=SharedScratch(shared, descriptor.storage_classes.scratch_gib) if shared else None,
        ),
        opts=pulumi.ResourceOptions(providers=providers),
    )
    return ClusterServices(tenancy, addons)
