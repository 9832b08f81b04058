"""Network, cluster and node pools for one environment: the compute half of the cloud layer."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.cluster import Cluster, ClusterArgs, CoreAddons, CoreAddonsArgs
from components.iam import NodeRole, NodeRoleArgs
from components.network import Network, NetworkArgs
from components.nodepool import GpuNodePool, GpuNodePoolArgs
from components.specs.nodepool import default_root_volume_gib
from infra.config import PlatformConfig


@dataclass(frozen=True)
class Compute:
    network: Network
    cluster: Cluster
    node_role: NodeRole
    node_pools: dict[str, GpuNodePool]
    core_addons: CoreAddons


def build_compute(
    config: PlatformConfig,
    prefix: str,
    keys: dict[str, aws.kms.Key],
    pool_zones: dict[str, tuple[str, ...]],
    aws_provider: aws.Provider,
    account_id: str,
) -> Compute:
    """`prefix` is mlplat-<stack>, also the cluster's name; `keys` the CMKs by data class;
    `pool_zones` the zones each pool may use (from the preflight check); `account_id` the
    deploying account, where the administrator roles named by name live."""
    aws_opts = pulumi.ResourceOptions(providers={"aws": aws_provider})
    logs_key, volumes_key = keys["logs"].arn, keys["volumes"].arn
    network = Network(
        "network",
        NetworkArgs(
            prefix=prefix,
            region=config.region,
            vpc_cidr=config.network.vpc_cidr,
            zone_ids=config.zone_ids,
            account_id=account_id,
            logs_key_arn=logs_key,
            log_retention_days=config.storage.log_retention_days,
            single_nat_gateway=config.network.single_nat_gateway,
            cluster_name=prefix,
            egress=config.network.egress.mode,
            allowed_domains=config.network.egress.allowed_domains,
            # The firewall's rules say what the network reaches: under the logs key, with
            # the network's evidence.
            firewall_key_arn=logs_key,
        ),
        opts=aws_opts,
    )
    public = config.cluster.public_endpoint
    cluster = Cluster(
        "cluster",
        ClusterArgs(
            cluster_name=prefix,
            account_id=account_id,
            region=config.region,
            version=config.cluster.version,
            subnet_ids=tuple(s.id for s in network.subnets.values()),
            secrets_key_arn=keys["cluster"].arn,
            logs_key_arn=logs_key,
            log_retention_days=config.storage.log_retention_days,
            public_access_cidrs=public.cidrs if public.enabled else (),
            deployer_role_arn=config.cluster.role_arn(config.cluster.deployer_role or "", account_id),
            break_glass_role_arn=config.cluster.role_arn(config.cluster.break_glass_role or "", account_id),
            admin_role_arns=config.cluster.admin_role_arns,
            read_only_role_arns=config.cluster.read_only_role_arns,
            deletion_protection=config.cluster.deletion_protection,
        ),
        opts=aws_opts,
    )
    node_role = NodeRole("nodes", NodeRoleArgs(role_name=f"{prefix}-node"), opts=aws_opts)
    node_ready = [cluster.addons["vpc-cni"], cluster.addons["kube-proxy"], cluster.addons["eks-pod-identity-agent"]]
    node_pools: dict[str, GpuNodePool] = {}
    for pool in config.node_pools:
        instance = pool.instance
        node_pools[pool.name] = GpuNodePool(
            f"pool-{pool.name}",
            GpuNodePoolArgs(
                prefix=prefix,
                pool=pool.name,
                role=pool.role,
                instance_type=instance.name,
                min_size=pool.min_size,
                max_size=pool.max_size,
                desired_size=pool.desired_size if pool.desired_size is not None else pool.min_size,
                cluster_name=cluster.eks.name,
                node_role_arn=node_role.role.arn,
                subnet_ids=tuple(network.subnets[z].id for z in pool_zones[pool.name]),
                security_group_ids=(cluster.cluster_security_group_id, network.node_security_group.id),
                volumes_key_arn=volumes_key,
                root_volume_gib=pool.root_volume_gib or default_root_volume_gib(instance),
                efa=pool.efa,
                efa_security_group_id=network.efa_security_group.id if pool.efa else None,
                placement_group=pool.placement_group_zone_id is not None,
                capacity_reservation_id=pool.capacity_reservation_id,
                capacity_block=pool.capacity_block,
                instance_tags=config.default_tags,
            ),
            opts=pulumi.ResourceOptions(providers={"aws": aws_provider}, depends_on=node_ready),
        )
    core_addons = CoreAddons(
        "core-addons",
        CoreAddonsArgs(cluster_name=prefix, account_id=account_id, cluster=cluster.eks, volumes_key_arn=volumes_key),
        opts=pulumi.ResourceOptions(
            providers={"aws": aws_provider},
            depends_on=[p.node_group for p in node_pools.values()],
        ),
    )
    return Compute(network, cluster, node_role, node_pools, core_addons)
