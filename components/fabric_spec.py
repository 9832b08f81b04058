"""The fabrics GPU nodes talk to each other over, and how a node's fabric is described.

On AWS the fabric is EFA (libfabric under aws-ofi-nccl; the pool's instance type says how
many interfaces). On a customer's own cluster it is InfiniBand or RoCE: RDMA verbs on
NVIDIA (Mellanox) HCAs, handed to pods by the Network Operator's RDMA shared device plugin,
with GPUDirect RDMA through nvidia-peermem. NCCL speaks IB verbs to both itself.
"""

from __future__ import annotations

from dataclasses import dataclass

RDMA_SHARED_RESOURCE = "rdma/rdma_shared_device_a"  # the Network Operator's default resource name


@dataclass(frozen=True)
class FabricKind:
    name: str
    rdma: bool  # RDMA verbs through the Network Operator (InfiniBand, RoCE); False: EFA
    port_rates_gbps: tuple[int, ...]  # the line rates a port of this kind runs at
    description: str


FABRICS = {
    "efa": FabricKind("efa", False, (100, 200, 400),
                      "AWS Elastic Fabric Adapter (libfabric and aws-ofi-nccl; the instance type says how many)"),
    "infiniband": FabricKind("infiniband", True, (100, 200, 400, 800),
                             "InfiniBand (EDR 100, HDR 200, NDR 400, XDR 800 Gb/s per port)"),
    "roce": FabricKind("roce", True, (100, 200, 400), "RDMA over Converged Ethernet v2"),
}


@dataclass(frozen=True)
class NodeFabric:
    """A GPU node's RDMA fabric on a customer's cluster, as its descriptor states it."""

    kind: str  # a key of FABRICS, with rdma: infiniband or roce
    hcas: tuple[str, ...]  # RDMA devices as the kernel names them (mlx5_0, ...): NCCL_IB_HCA
    port_rate_gbps: int  # each HCA port's line rate
    rdma_resource: str = RDMA_SHARED_RESOURCE
    gid_index: int | None = None  # RoCE v2: the GID index NCCL uses (NCCL_IB_GID_INDEX); None on InfiniBand

    @property
    def line_rate_gbps(self) -> int:
        """The node's total fabric line rate, every HCA together."""
        return self.port_rate_gbps * len(self.hcas)


def fabric_problem(kind: str) -> str | None:
    """Why `kind` is not a fabric a customer's GPU nodes can use here, or None."""
    known = FABRICS.get(kind)
    if known is None:
        return (f"{kind!r} is not a fabric in the catalog; known: "
                f"{', '.join(name for name, f in FABRICS.items() if f.rdma)} (efa is AWS's own)")
    if not known.rdma:
        return f"{kind!r} is AWS's fabric; a customer's cluster runs infiniband or roce"
    return None
