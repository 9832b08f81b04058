"""Which training job a stack runs: the `mlplat:training` section resolved against the
stack's pools, tenants and storage. Pure: the config validator calls `resolve_training`, so
a job that could never be admitted (too big for the tenant's quota, multi-node without a
shared file system) is a one-line config error before anything is registered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from components.training_spec import EFA_RESOURCE, GPU_RESOURCE, default_min_busbw_gbps, pod_resources
from workloads.train.shapes import PRESETS, Layout, LayoutError, check_layout


class TrainingConfigError(ValueError):
    """A problem with one key under `mlplat:training`."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class ResolvedTraining:
    settings: Any  # infra.config.TrainingConfig
    pool: Any  # infra.config.NodePoolConfig
    tenant: Any  # infra.config.TenantConfig
    nodes: int
    min_nodes: int
    lustre: bool  # the job's directory is on the Lustre scratch file system
    min_busbw_gbps: float
    collective_check: bool  # multi-node on EFA: the all-reduce check runs
    global_batch: int = 0  # sequences per step, kept at every node count (plan_global_batch)

    @property
    def instance(self):
        return self.pool.instance


def _tenant_allows(tenant: Any, instance_type: str) -> bool:
    return tenant.quotas.gpu > 0 and (tenant.instance_types is None or instance_type in tenant.instance_types)


def _ceiling(tenant: Any, tenants: tuple[Any, ...]) -> dict[str, float]:
    """What the tenant can ever be admitted: its quota plus its cohort's (Kueue lends)."""
    group = [t for t in tenants if t.name == tenant.name or (tenant.cohort and t.cohort == tenant.cohort)]
    return {
        "cpu": sum(t.quotas.cpu for t in group),
        "memory": sum(t.quotas.memory_gi for t in group),
        GPU_RESOURCE: sum(t.quotas.gpu for t in group),
        EFA_RESOURCE: sum(t.quotas.efa for t in group),
    }


def job_requests(instance: Any, efa: bool, nodes: int) -> dict[str, float]:
    """What the job's pods ask of the queue in total (cpu in cores, memory in GiB)."""
    per_pod = pod_resources(instance, efa)["requests"]
    return {
        "cpu": nodes * float(per_pod["cpu"]),
        "memory": nodes * float(per_pod["memory"].removesuffix("Gi")),
        GPU_RESOURCE: nodes * float(per_pod[GPU_RESOURCE]),
        EFA_RESOURCE: nodes * float(per_pod.get(EFA_RESOURCE, 0)),
    }


_QUOTA_KEYS = {"cpu": "cpu", "memory": "memoryGi", GPU_RESOURCE: "gpu", EFA_RESOURCE: "efa"}


def resolve_training(config: Any) -> ResolvedTraining | None:
    """The job `config` asks for, or None where the stack runs none (turned off, or no
    GPU pool). Raises TrainingConfigError naming the key at fault."""
    settings = config.training
    gpu_pools = [p for p in config.node_pools if p.role == "gpu"]
    if not settings.enabled or not gpu_pools:
        return None
    if settings.pool is None:
        pool = gpu_pools[0]
    else:
        pool = next((p for p in gpu_pools if p.name == settings.pool), None)
        if pool is None:
            raise TrainingConfigError(
                "pool", f"{settings.pool!r} is not a gpu pool; allowed: {', '.join(p.name for p in gpu_pools)}"
            )
    if settings.tenant is None:
        tenant = next((t for t in config.tenants if _tenant_allows(t, pool.instance_type)), None)
        if tenant is None:
            raise TrainingConfigError(
                "tenant", f"no tenant has a GPU quota for pool {pool.name!r} ({pool.instance_type}); add one to "
                "mlplat:tenants or set training.enabled: false"
            )
    else:
        tenant = next((t for t in config.tenants if t.name == settings.tenant), None)
        if tenant is None:
            raise TrainingConfigError(
                "tenant", f"{settings.tenant!r} is not a tenant; allowed: "
                f"{', '.join(t.name for t in config.tenants) or 'none'}"
            )
        if not _tenant_allows(tenant, pool.instance_type):
            raise TrainingConfigError(
                "tenant", f"{tenant.name!r} may not use {pool.instance_type} GPUs (pool {pool.name!r}); give it a "
                "gpu quota and the type in its instanceTypes, or pick another tenant"
            )

    # By default as many nodes as the pool starts with; an EFA pool is for multi-node jobs,
    # so two even where it starts empty (Kueue admits the job once the nodes are there).
    nodes = settings.nodes if settings.nodes is not None else max(2 if pool.efa else 1, pool.min_size)
    if nodes > pool.max_size:
        raise TrainingConfigError("nodes", f"{nodes} is more than pool {pool.name!r} holds (maxSize {pool.max_size})")
    min_nodes = settings.min_nodes if settings.min_nodes is not None else nodes
    if min_nodes > nodes:
        raise TrainingConfigError("minNodes", f"{min_nodes} is above nodes {nodes}; set minNodes <= nodes")
    lustre = config.storage.lustre.enabled
    if nodes > 1 and not lustre:
        fix = ("name a ReadWriteMany class in the descriptor's storageClasses.shared"
               if pool.instance.customer_node_class else "set storage.lustre.enabled: true")
        raise TrainingConfigError("nodes", f"{nodes} nodes need a shared file system for checkpoints; {fix} "
                                  "or run on 1 node")
    if settings.data_path is not None and not settings.data_path.startswith("/"):
        raise TrainingConfigError("dataPath", f"{settings.data_path!r} is not an absolute path, e.g. /fsx/datasets/tokens")

    wanted = job_requests(pool.instance, pool.efa, nodes)
    ceiling = _ceiling(tenant, config.tenants)
    for resource, amount in wanted.items():
        if amount > ceiling[resource]:
            unit = "Gi" if resource == "memory" else ""
            raise TrainingConfigError(
                "nodes", f"{nodes} x {pool.instance_type} ask for {amount:g}{unit} {resource}, more than tenant "
                f"{tenant.name!r} can be admitted ({ceiling[resource]:g}{unit}, quotas.{_QUOTA_KEYS[resource]} with "
                "its cohort); lower nodes or raise the quota"
            )
    if settings.framework == "torchrun":
        global_batch = plan_layout(settings, pool, min_nodes, nodes)
    else:
        global_batch = 0  # the tenant's command plans its own batch
        if min_nodes != nodes:
            raise TrainingConfigError(
                "minNodes", f"framework {settings.framework} runs on a fixed number of nodes "
                f"({_FIXED_WORLD[settings.framework]}); leave minNodes unset or equal to nodes ({nodes})")
    threshold = settings.min_bus_bandwidth_gbps or default_min_busbw_gbps(pool.instance)
    return ResolvedTraining(settings, pool, tenant, nodes, min_nodes, lustre, threshold,
                            collective_check=(pool.efa or pool.instance.rdma_hcas > 0) and nodes >= 2,
                            global_batch=global_batch)


# Why the tenant's frameworks are not elastic.
_FIXED_WORLD = {
    "deepspeed": "DeepSpeed checks its batch size against the world size it starts with",
    "horovod": "mpirun starts every rank from one hostfile",
    "tensorflow": "every worker's TF_CONFIG lists the whole cluster",
}


def layout_of(settings: Any) -> Layout:
    p = settings.parallel
    return Layout(tp=p.tp, pp=p.pp, dp_replicate=p.dp_replicate, pp_schedule=p.pp_schedule)


def plan_layout(settings: Any, pool: Any, min_nodes: int, nodes: int) -> int:
    """The global batch of the platform's trainer, after checking its parallel layout at
    every node count the job may run at, as the trainer itself will (shapes.check_layout):
    a layout that only fits some counts would crash the job when it shrinks. Raises
    TrainingConfigError naming the count."""
    layout = layout_of(settings)
    gpus = max(1, pool.instance.gpus)
    config = PRESETS[settings.model]()
    if layout.pp == 1 and layout.pp_schedule != "1f1b":
        raise TrainingConfigError("parallel.ppSchedule", f"{layout.pp_schedule} is a pipeline schedule; it needs "
                                  "pp > 1, or leave ppSchedule at 1f1b")
    if gpus % layout.tp:
        raise TrainingConfigError(
            "parallel.tp", f"{layout.tp} does not divide the {gpus} GPUs of a {pool.instance_type} node; a "
            "tensor-parallel group must sit within one node (it all-reduces every layer over NVLink), so choose "
            f"a tp that divides {gpus}")
    # What no node count changes (the model's shape, the precision) is named without one.
    _check(layout, layout.tp * layout.pp * layout.dp_replicate, config, settings, None)
    counts = range(min_nodes, nodes + 1)
    for n in counts:
        _check(layout, n * gpus, config, settings, n)
    global_batch = plan_global_batch(settings.global_batch, settings.micro_batch, gpus, min_nodes, nodes,
                                     tp=layout.tp, pp=layout.pp)
    for n in counts:
        passes = settings.micro_batch * data_parallel_ranks(n, gpus, layout.tp, layout.pp)
        _check(layout, n * gpus, config, settings, n, micro_batches=global_batch // passes)
    return global_batch


def _check(layout: Layout, world: int, config: Any, settings: Any, nodes: int | None,
           micro_batches: int | None = None) -> None:
    try:
        check_layout(layout, world, config, strategy=settings.strategy, precision=settings.precision,
                     micro_batches=micro_batches)
    except LayoutError as err:
        where = f"at {nodes} node(s) ({world} GPUs): " if nodes is not None else ""
        raise TrainingConfigError("parallel", f"{where}{err}") from None


def data_parallel_ranks(nodes: int, gpus_per_node: int, tp: int = 1, pp: int = 1) -> int:
    """Ranks that read different samples: what tensor and pipeline parallelism leave of the
    world (HSDP's replicas and shards both count). The layout check has made sure tp x pp
    divides the world at every count."""
    return nodes * gpus_per_node // (tp * pp)


def plan_global_batch(asked: int | None, micro_batch: int, gpus_per_node: int, min_nodes: int, nodes: int,
                      tp: int = 1, pp: int = 1) -> int:
    """The global batch an elastic job keeps at every node count it may run at: at each
    count n it must divide into whole passes of micro_batch x the data-parallel ranks at n
    (n x gpus_per_node / (tp x pp)); the trainer's gradient accumulation is the quotient.
    Unset, it is the smallest such batch (micro_batch x the least common multiple of the
    counts' data-parallel ranks), times pp with pipeline stages, so every count's
    accumulation is a multiple of pp and fills the pipeline; given, every count that cannot
    keep it is named."""
    counts = range(min_nodes, nodes + 1)
    passes = {n: micro_batch * max(1, data_parallel_ranks(n, max(1, gpus_per_node), tp, pp)) for n in counts}
    smallest = math.lcm(*passes.values()) * pp
    if asked is None:
        return smallest
    broken = [n for n in counts if asked % passes[n]]
    if broken:
        listed = ", ".join(str(n) for n in broken)
        sizes = ", ".join(f"{micro_batch} x {passes[n] // micro_batch} = {passes[n]} at {n} nodes" for n in broken)
        raise TrainingConfigError(
            "globalBatch", f"{asked} sequences cannot be kept at {listed} node(s): at each count n from minNodes to "
            f"nodes it must divide into passes of microBatch x data-parallel ranks ({sizes}); use a multiple of "
            f"{smallest}, or narrow minNodes..nodes")
    return asked
