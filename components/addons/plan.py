"""From the stack's config to what the add-ons need to know: the GPU pools at their
largest, the add-on context, the system namespaces to create. Plain data, no Pulumi."""

from __future__ import annotations

from typing import Any

from components.addons.queues import PoolCapacity
from components.addons.values import NAMESPACES, AddonContext, ecr_chart_mirror
from infra.catalog import lookup

GPU_ROLES = ("gpu", "inference")


def gpu_pools(node_pools: Any) -> tuple[PoolCapacity, ...]:
    """Every pool whose instance type has GPUs, whatever its role."""
    pools = []
    for pool in node_pools:
        itype = lookup(pool.instance_type)
        if itype.has_gpu:
            pools.append(PoolCapacity(
                instance_type=itype.name,
                max_nodes=pool.max_size,
                gpus_per_node=itype.gpus,
                efa_per_node=itype.efa_interfaces if pool.efa else 0,
            ))
    return tuple(pools)


def addon_context(config: Any, account: str, storage_class: str) -> AddonContext:
    pools = gpu_pools(config.node_pools)
    addons = config.addons
    return AddonContext(
        account=account,
        region=config.region,
        environment=config.environment,
        gpu_instance_types=tuple(dict.fromkeys(p.instance_type for p in pools)),
        efa_instance_types=tuple(dict.fromkeys(p.instance_type for p in pools if p.efa_per_node)),
        device_plugin_mode=addons.device_plugin_mode,
        time_slicing_replicas=addons.time_slicing_replicas,
        mig_strategy=addons.mig_strategy,
        storage_class=storage_class,
        prometheus_retention_days=addons.telemetry.retention_days,
        prometheus_volume_gi=addons.telemetry.prometheus_volume_gi,
        alertmanager_volume_gi=addons.telemetry.alertmanager_volume_gi,
        telemetry=addons.telemetry.enabled,
    )


def chart_mirror(setting: str, account: str, region: str, environment: str) -> str:
    """`ecr`: the environment's repositories in the account's in-region ECR
    (`mlplat/<environment>/charts/<chart>`), where `mlplat mirror` pushes them; an oci://
    URL (a customer's in-country registry) as given."""
    if setting == "ecr":
        return ecr_chart_mirror(account, region, environment)
    return setting


def system_namespaces_needed(ctx: AddonContext, lustre: bool) -> list[str]:
    """The system namespaces the stack's add-ons install into, in a stable order."""
    charts = ["jobset", "kueue"]
    if ctx.telemetry:
        charts.append("kube-prometheus-stack")
    if ctx.gpu_instance_types:
        charts.append("gpu-operator" if ctx.device_plugin_mode == "gpu-operator" else "nvidia-device-plugin")
    if ctx.fabrics:
        charts.append("network-operator")
    if ctx.efa_instance_types:
        charts.append("aws-efa-k8s-device-plugin")
    if lustre:
        charts.append("aws-fsx-csi-driver")
    return list(dict.fromkeys(NAMESPACES[c] for c in charts))
