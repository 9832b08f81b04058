"""Kueue objects: a ResourceFlavor per GPU instance type, a ClusterQueue per tenant and a
LocalQueue named `default` in each tenant namespace.

Each ClusterQueue has two resource groups. CPU and memory come from one flavor that
matches any node; GPUs and EFA interfaces come from the GPU flavors, one per instance type,
which pin admitted pods to that type and add the GPU toleration. A job asking for 8 GPUs
gets `default` for its CPU and memory and, say, `p5.48xlarge` for its GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from components.addons.values import EFA_RESOURCE, GPU_RESOURCE, GPU_TOLERATION, INSTANCE_TYPE_LABEL
from components.tenancy_spec import Tenant

API_VERSION = "kueue.x-k8s.io/v1beta2"
CPU_FLAVOR = "default"
LOCAL_QUEUE = "default"  # the name the training job's kueue.x-k8s.io/queue-name label uses


@dataclass(frozen=True)
class PoolCapacity:
    """One GPU pool at its largest."""

    instance_type: str
    max_nodes: int
    gpus_per_node: int
    efa_per_node: int  # 0 unless the pool attaches EFA
    # Labels beyond the instance type that the pool's nodes carry and its GPU jobs must match
    # (a customer's node groups); empty on AWS.
    node_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FlavorCapacity:
    instance_type: str
    gpus: int  # advertised nvidia.com/gpu: physical GPUs x time-slicing replicas
    efa: int
    node_labels: tuple[tuple[str, str], ...] = ()


def flavor_capacities(pools: Iterable[PoolCapacity], time_slicing_replicas: int = 1) -> list[FlavorCapacity]:
    """What each GPU instance type can ever hold, summed over its pools, in pool order."""
    totals: dict[str, list[int]] = {}
    labels: dict[str, tuple[tuple[str, str], ...]] = {}
    for pool in pools:
        labels.setdefault(pool.instance_type, pool.node_labels)
        gpus, efa = totals.setdefault(pool.instance_type, [0, 0])
        totals[pool.instance_type] = [gpus + pool.max_nodes * pool.gpus_per_node * time_slicing_replicas,
                                      efa + pool.max_nodes * pool.efa_per_node]
    return [FlavorCapacity(t, g, e, labels[t]) for t, (g, e) in totals.items()]


def split_quota(total: int, capacities: Sequence[tuple[str, int]]) -> dict[str, int]:
    """Spread a tenant's quota over flavors in order, each up to what it can hold, so the
    nominal quotas add up to exactly the tenant's quota."""
    left = total
    split = {}
    for name, capacity in capacities:
        take = min(left, capacity)
        split[name] = take
        left -= take
    return split


def resource_flavors(capacities: Sequence[FlavorCapacity]) -> list[dict[str, Any]]:
    flavors = [{
        "apiVersion": API_VERSION, "kind": "ResourceFlavor",
        "metadata": {"name": CPU_FLAVOR},
        "spec": {},
    }]
    for cap in capacities:
        flavors.append({
            "apiVersion": API_VERSION, "kind": "ResourceFlavor",
            "metadata": {"name": cap.instance_type, "labels": {"mlplat.io/gpu-flavor": "true"}},
            "spec": {
                "nodeLabels": {INSTANCE_TYPE_LABEL: cap.instance_type, **dict(cap.node_labels)},
                # Admitted pods get the toleration, so a job needs no GPU-specific scheduling.
                "tolerations": [GPU_TOLERATION],
            },
        })
    return flavors


def _quota(name: str, amount: int | str) -> dict[str, Any]:
    return {"name": name, "nominalQuota": amount}


def cluster_queue(tenant: Tenant, capacities: Sequence[FlavorCapacity]) -> dict[str, Any]:
    usable = [c for c in capacities if tenant.instance_types is None or c.instance_type in tenant.instance_types]
    if tenant.instance_types is not None:  # the tenant's own order of preference
        usable.sort(key=lambda c: tenant.instance_types.index(c.instance_type))
    groups: list[dict[str, Any]] = [{
        "coveredResources": ["cpu", "memory"],
        "flavors": [{"name": CPU_FLAVOR, "resources": [
            _quota("cpu", str(tenant.cpu)), _quota("memory", f"{tenant.memory_gi}Gi"),
        ]}],
    }]
    if usable:
        gpus = split_quota(tenant.gpu, [(c.instance_type, c.gpus) for c in usable])
        efa = split_quota(tenant.efa, [(c.instance_type, c.efa) for c in usable])
        groups.append({
            "coveredResources": [GPU_RESOURCE, EFA_RESOURCE],
            "flavors": [{"name": c.instance_type, "resources": [
                _quota(GPU_RESOURCE, str(gpus[c.instance_type])), _quota(EFA_RESOURCE, str(efa[c.instance_type])),
            ]} for c in usable],
        })
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant.name}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": groups,
        # Quota lent inside the cohort is taken back when its owner needs it.
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    }
    if tenant.cohort:
        spec["cohortName"] = tenant.cohort
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": tenant.name}, "spec": spec}


def local_queue(tenant: Tenant) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION, "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": tenant.name},
        "spec": {"clusterQueue": tenant.name},
    }
