"""What a stack's cluster should hold: its node pools, with the instance catalog's numbers.

Pure data from the stack file and infra/catalog.py, so a check compares a node with the
same facts the node pools were built from, never with a number typed a second time. A
customer's GPU node group (no instance type, no metadata service) is described from its
descriptor by `onprem_pool_expectation`, with the same `NodeFabric` its training pods get.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.fabric_spec import NodeFabric
from components.specs.nodepool import LABEL_PREFIX, local_storage_strategy
from infra.catalog import InstanceType, lookup
from infra.config import PlatformConfig
from infra.training_plan import resolve_training

# The label the node pools put on their nodes (components/specs/nodepool.py); Kubernetes
# sets the instance type label itself.
POOL_LABEL = f"{LABEL_PREFIX}/pool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"

# 2 MiB pages an EFA node must hold: libfabric registers its buffers in huge pages, and
# every training pod asks for hugepages-2Mi: 5120Mi.
HUGEPAGES_2M_MIN = 5120
# Where the AMI's setup-local-disks (run by nodeadm with the pool's localStorage
# strategy) mounts instance-store NVMe: a RAID0 of all disks at <dir>/0, with kubelet,
# containerd and pod logs bind-mounted onto it; a single disk mounted as is at <dir>/1.
LOCAL_DISKS_DIR = "/mnt/k8s-disks"


@dataclass(frozen=True)
class LocalDisks:
    strategy: str  # nodeadm's localStorage strategy: "RAID0" or "Mount"
    disks: int
    mount_point: str


@dataclass(frozen=True)
class PoolExpectation:
    name: str
    role: str
    instance_type: str
    nodes: int  # nodes a fresh deploy brings up: the desired size, else the minimum
    gpus: int
    gpu_model: str | None  # the catalog's short model, e.g. "h100"
    # How the device plugin shares GPUs (mlplat:addons): each GPU advertised this many
    # times, and the MIG strategy ("none": whole GPUs only).
    time_slicing_replicas: int
    mig_strategy: str
    efa_interfaces: int  # 0 when the pool attaches no EFA interfaces
    hugepages_2m: int  # minimum 2 MiB huge pages; 0 when none are required
    local_disks: LocalDisks | None  # None: the type has no instance-store NVMe
    # A customer's GPU nodes: their InfiniBand or RoCE fabric, whose every HCA's port must be
    # up at the fabric's rate (node check `rdma_ports`); None on AWS.
    fabric: NodeFabric | None = None
    # An EC2 node, whose metadata service must refuse token-less requests (IMDSv2); False on
    # a customer's own nodes, which have none.
    imds: bool = True
    # A customer's node group: the labels its nodes carry (the descriptor's GPU node labels),
    # which place a node in the pool where no mlplat.io/pool label does.
    node_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StackExpectation:
    stack: str
    pools: tuple[PoolExpectation, ...]
    # The pool the stack's training job runs on: the GPU node check runs on its nodes
    # (components/training_spec.py); None when the stack trains nowhere.
    training_pool: str | None = None
    # The all-reduce check's bus bandwidth floor (GB/s) when the training job is multi-node
    # on EFA, else None: the check does not run there.
    collective_threshold_gbps: float | None = None
    # The model the stack serves through Triton (mlplat:inference), None when it serves none.
    served_model: str | None = None

    def pool_of(self, node: Mapping[str, Any]) -> PoolExpectation | None:
        """The pool a node object belongs to: its pool label, else the one pool whose node
        labels it carries, else the one pool of its type."""
        labels = node.get("metadata", {}).get("labels") or {}
        by_name = {p.name: p for p in self.pools}
        if labels.get(POOL_LABEL) in by_name:
            return by_name[labels[POOL_LABEL]]
        labelled = [p for p in self.pools if p.node_labels and all(labels.get(k) == v for k, v in p.node_labels)]
        if labelled:
            return labelled[0] if len(labelled) == 1 else None
        same_type = [p for p in self.pools if p.instance_type == labels.get(INSTANCE_TYPE_LABEL)]
        return same_type[0] if len(same_type) == 1 else None


def pool_expectation(pool: Any, addons: Any) -> PoolExpectation:
    """One `NodePoolConfig` with its instance type's facts and the stack's GPU sharing."""
    itype = lookup(pool.instance_type)
    efa = itype.efa_interfaces if pool.efa else 0
    return PoolExpectation(
        name=pool.name,
        role=pool.role,
        instance_type=itype.name,
        nodes=pool.desired_size if pool.desired_size is not None else pool.min_size,
        gpus=itype.gpus,
        gpu_model=itype.gpu.model if itype.gpu else None,
        time_slicing_replicas=addons.time_slicing_replicas,
        mig_strategy=addons.mig_strategy,
        efa_interfaces=efa,
        hugepages_2m=HUGEPAGES_2M_MIN if efa else 0,
        local_disks=local_disks(itype),
    )


def onprem_pool_expectation(name: str, nodes: int, gpus: int, gpu_model: str | None, fabric: NodeFabric | None,
                            hardware: str = "customer node", role: str = "gpu", time_slicing_replicas: int = 1,
                            mig_strategy: str = "none", node_labels: Mapping[str, str] | None = None
                            ) -> PoolExpectation:
    """A node group of a customer's cluster, as its descriptor states it: `gpus` GPUs of
    `gpu_model` (the catalog's short model, e.g. "h100") on each of `nodes` nodes, the
    nodes' RDMA fabric, and the labels that pick its nodes out. `hardware` stands where an
    instance type would in findings. No EFA, no huge pages (NCCL's IB verbs transport needs
    none), no instance-store layout and no metadata service to judge."""
    return PoolExpectation(
        name=name,
        role=role,
        instance_type=hardware,
        nodes=nodes,
        gpus=gpus,
        gpu_model=gpu_model,
        time_slicing_replicas=time_slicing_replicas,
        mig_strategy=mig_strategy,
        efa_interfaces=0,
        hugepages_2m=0,
        local_disks=None,
        fabric=fabric,
        imds=False,
        node_labels=tuple(sorted((node_labels or {}).items())),
    )


def local_disks(itype: InstanceType) -> LocalDisks | None:
    strategy = local_storage_strategy(itype)
    if strategy is None:
        return None
    index = 0 if strategy == "RAID0" else 1
    return LocalDisks(strategy, itype.nvme_disks, f"{LOCAL_DISKS_DIR}/{index}")


def stack_expectation(stack: str, config: PlatformConfig) -> StackExpectation:
    training = resolve_training(config)
    return StackExpectation(
        stack,
        tuple(pool_expectation(p, config.addons) for p in config.node_pools),
        training_pool=training.pool.name if training else None,
        collective_threshold_gbps=training.min_busbw_gbps if training and training.collective_check else None,
        served_model=served_model(config),
    )


def served_model(config: PlatformConfig) -> str | None:
    inference = config.inference
    return inference.model_name if inference is not None and inference.enabled else None
