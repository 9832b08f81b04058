"""Which inference service a stack runs: the `mlplat:inference` section resolved against the
stack's pools and tenants. Pure: the config validator calls `resolve_inference`, so a model
Triton would refuse, GPUs asked for on a CPU-only stack or more replicas than the pool can
ever hold are one-line config errors before anything is registered.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from components.inference_spec import DISK_OVERHEAD_GI, replica_disk_gi
from workloads.serve.spec import ServeSpecError, check_contract, check_serving, gpu_refusal

# What a GPU replica leaves to the node: a fifth of the CPU and a quarter of the memory go
# to the kubelet, the system and the platform's daemon sets (as for training pods).
NODE_CPU_SHARE = 0.8
NODE_MEMORY_SHARE = 0.75
# Of a node's disk (the instance-store RAID where kubelet lives on it, else the root
# volume), half is left to pods' ephemeral storage: the rest holds the OS and the container
# images (Triton's alone is over 10 GB).
NODE_DISK_SHARE = 0.5
_ACM_ARN = re.compile(r"^arn:aws[a-z-]*:acm:([a-z0-9-]+):[0-9]{12}:certificate/[0-9a-f-]{36}$")


class InferenceConfigError(ValueError):
    """A problem with one key under `mlplat:inference`."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class ResolvedInference:
    settings: Any  # infra.config.InferenceConfig
    pool: Any  # infra.config.NodePoolConfig the replicas run on
    cpu: int  # cores per replica (requests = limits)
    memory_gi: int
    gpus: int  # per replica: 1 on GPU, 0 on CPU
    repository_gi: int  # the replica's copy of the model repository

    @property
    def device(self) -> str:
        return self.settings.device

    @property
    def instance(self) -> Any:
        return self.pool.instance


def replica_size(settings: Any, instance: Any) -> tuple[int, int, int]:
    """(cores, GiB, GPUs) of one replica. On GPU, one GPU and that GPU's share of the node;
    on CPU, what the stack asks for."""
    if settings.device == "gpu":
        per_gpu = max(1, instance.gpus)
        return (max(1, math.floor(instance.vcpus * NODE_CPU_SHARE / per_gpu)),
                max(1, math.floor(instance.memory_gib * NODE_MEMORY_SHARE / per_gpu)), 1)
    return settings.cpu_per_replica, settings.memory_gi_per_replica, 0


def node_disk(pool: Any) -> tuple[int, str]:
    """(GiB, what to change) of the disk kubelet and containerd use on one of the pool's
    nodes: nodeadm moves them onto the instance store only when it builds a RAID0 of two or
    more disks; a single disk is merely mounted, and they stay on the root volume."""
    from components.specs.nodepool import default_root_volume_gib, local_storage_strategy

    if local_storage_strategy(pool.instance) == "RAID0":
        return math.floor(pool.instance.nvme_gb * 1e9 / 2**30), "pick an instance type with more instance storage"
    return pool.root_volume_gib or default_root_volume_gib(pool.instance), "give the pool a larger rootVolumeGib"


def drift_tenant(settings: Any) -> str | None:
    """The tenant whose namespace runs the model's drift check, or None where there is none."""
    drift = settings.drift
    if not drift.enabled or settings.auth is None:
        return None
    return drift.tenant or settings.auth.tenants[0]


def resolve_inference(config: Any) -> ResolvedInference | None:
    """The service `config` asks for, or None where the stack serves nothing. Raises
    InferenceConfigError naming the key at fault."""
    settings = getattr(config, "inference", None)
    if settings is None or not settings.enabled:
        return None
    roles = [pool.role for pool in config.node_pools]
    refusal = gpu_refusal(config.environment, roles)
    try:
        check_serving(
            model_name=settings.model_name,
            device=settings.device,
            max_batch_size=settings.max_batch_size,
            preferred_batch_sizes=settings.preferred_batch_sizes,
            max_queue_delay_microseconds=settings.max_queue_delay_microseconds,
            instance_count=settings.instance_count,
            keep_versions=settings.keep_versions,
            gpu_allowed=not refusal,
            gpu_refusal=refusal,
        )
        check_contract(device=settings.device, top_k=settings.top_k, precision=settings.precision,
                       accelerator=settings.accelerator)
    except ServeSpecError as err:
        raise InferenceConfigError(err.key, str(err)) from None

    if not config.addons.telemetry.enabled:
        raise InferenceConfigError(
            "enabled", "the autoscaler reads Triton's queue time (or CPU use) from the Prometheus stack, which "
                       "this stack turns off; set mlplat:addons.telemetry.enabled: true")

    role = "inference" if settings.device == "gpu" else "cpu"
    candidates = [pool for pool in config.node_pools if pool.role == role]
    if settings.pool is None:
        if not candidates:
            raise InferenceConfigError(
                "device", f"'{settings.device}' serving needs a node pool with role {role!r}; this stack has none")
        pool = candidates[0]
    else:
        pool = next((p for p in candidates if p.name == settings.pool), None)
        if pool is None:
            allowed = ", ".join(p.name for p in candidates) or "none"
            raise InferenceConfigError(
                "pool", f"{settings.pool!r} is not a node pool with role {role!r}; allowed: {allowed}")

    tenants = {tenant.name for tenant in config.tenants}
    if settings.auth is None:
        raise InferenceConfigError(
            "auth", "is required: every request to the inference API is authenticated at its gateway; give the "
                    "enterprise identity provider (issuer, audiences, jwksUri) and the tenants the model serves")
    strangers = [t for t in settings.auth.tenants if t not in tenants]
    if strangers:
        raise InferenceConfigError(
            "auth.tenants", f"{', '.join(map(repr, strangers))} {'is not a tenant' if len(strangers) == 1 else 'are not tenants'} "
                            f"of this stack; tenants: {', '.join(sorted(tenants)) or 'none'}")
    drift = settings.drift
    if drift.enabled:
        if settings.version is None:
            raise InferenceConfigError("drift.enabled", "the drift check compares the served version with its own "
                                                        "training data: pin it with mlplat:inference.version")
        if not drift.registered_model:
            raise InferenceConfigError("drift.registeredModel", "is required with enabled: true: the registry's name "
                                                                "of the served model, where its lineage is")
        if not settings.request_logging.enabled:
            raise InferenceConfigError("drift.enabled", "the drift check reads the request logs: turn "
                                                        "requestLogging on")
        if not config.tracking.enabled:
            raise InferenceConfigError("drift.enabled", "the drift check finds the training data through the "
                                                        "registry: turn mlplat:tracking on")
        if drift.tenant is not None and drift.tenant not in settings.auth.tenants:
            raise InferenceConfigError("drift.tenant", f"{drift.tenant!r} is not one of the model's tenants "
                                                       f"({', '.join(settings.auth.tenants)})")
    if settings.namespace in tenants:
        raise InferenceConfigError(
            "namespace", f"{settings.namespace!r} is a tenant's namespace; the inference service gets its own "
                         "(its quota forbids the load balancer and its policies the clients)")
    if settings.min_replicas > settings.max_replicas:
        raise InferenceConfigError(
            "minReplicas", f"{settings.min_replicas} is above maxReplicas {settings.max_replicas}")

    cpu, memory_gi, gpus = replica_size(settings, pool.instance)
    usable_cpu = math.floor(pool.instance.vcpus * NODE_CPU_SHARE)
    usable_memory = math.floor(pool.instance.memory_gib * NODE_MEMORY_SHARE)
    if cpu > usable_cpu or memory_gi > usable_memory:
        raise InferenceConfigError(
            "cpuPerReplica" if cpu > usable_cpu else "memoryGiPerReplica",
            f"a replica of {cpu} cores and {memory_gi} GiB does not fit a {pool.instance_type} node "
            f"(at most {usable_cpu} cores and {usable_memory} GiB are left to pods)")
    disk_gi = replica_disk_gi(settings.repository_gi_per_replica)
    disk_gib, larger = node_disk(pool)
    usable_disk = math.floor(disk_gib * NODE_DISK_SHARE)
    if disk_gi > usable_disk:
        raise InferenceConfigError(
            "repositoryGiPerReplica",
            f"a replica's {disk_gi} GiB of local disk ({settings.repository_gi_per_replica} for the repository copy "
            f"+ {DISK_OVERHEAD_GI}) does not fit a {pool.instance_type} node of pool {pool.name!r} (at most "
            f"{usable_disk} GiB are left to pods); lower it or {larger}")
    per_node = min(usable_cpu // cpu, usable_memory // memory_gi, usable_disk // disk_gi)
    if gpus:
        per_node = min(per_node, pool.instance.gpus)
    capacity = per_node * pool.max_size
    if settings.max_replicas > capacity:
        raise InferenceConfigError(
            "maxReplicas", f"{settings.max_replicas} replicas can never all run: pool {pool.name!r} holds at most "
                           f"{capacity} ({pool.max_size} x {pool.instance_type}, {per_node} per node)")

    balancer = settings.load_balancer
    if balancer.enabled:
        match = _ACM_ARN.match(balancer.certificate_arn or "")
        if match is None:
            raise InferenceConfigError(
                "loadBalancer.certificateArn",
                f"{balancer.certificate_arn!r} is not an ACM certificate ARN "
                "(arn:aws:acm:<region>:<account>:certificate/<id>); the load balancer only speaks TLS")
        if match.group(1) != config.region:
            raise InferenceConfigError(
                "loadBalancer.certificateArn",
                f"the certificate is in {match.group(1)}, not {config.region}; a load balancer takes certificates "
                "from its own region")
    return ResolvedInference(settings=settings, pool=pool, cpu=cpu, memory_gi=memory_gi, gpus=gpus,
                             repository_gi=settings.repository_gi_per_replica)
