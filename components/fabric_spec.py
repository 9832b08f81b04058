"""The fabrics GPU nodes talk to each other over, and how a node's fabric is described.

On AWS the fabric is EFA (libfabric under aws-ofi-nccl; the pool's instance type says how
many interfaces). On a customer's own cluster it is InfiniBand or RoCE: RDMA verbs on
NVIDIA (Mellanox) HCAs, handed to pods by the Network Operator's RDMA shared device plugin,
with GPUDirect RDMA through nvidia-peermem. NCCL speaks IB verbs to both itself.

What a training pod on such a node gets from a `NodeFabric` (components/training_spec.py):
- one `rdma_resource` (default `rdma/rdma_shared_device_a`, the name the Network Operator's
  examples give the RDMA shared device plugin's resource). The shared plugin advertises
  `rdmaHcaMax` units of each resource per node, and every allocation hands the container
  every device the resource selects (all the node's HCAs: /dev/infiniband/uverbs*,
  rdma_cm): more than one unit adds no device, only uses up the node's units.
- `NCCL_IB_HCA` (`nccl_ib_hca`): the HCAs with their port, `=` first so that each name
  matches exactly (NCCL reads a bare `mlx5_1` as a prefix, which also takes mlx5_10 and
  up). mlx5 gives each physical port its own RDMA device, so the port is always 1.
- `NCCL_IB_DISABLE=0` and `NCCL_NET=IB`: NCCL's own IB verbs transport, chosen by name, so
  that a net plugin in the image (aws-ofi-nccl in the platform's training image) is not
  tried first, and NCCL stops with an error instead of falling back to TCP sockets if the
  verbs devices are missing.
- `NCCL_IB_GID_INDEX` on RoCE only (`gid_index`, required there): the GID table entry
  that holds the port's RoCE v2 address; InfiniBand addresses ports by LID.
- no `NCCL_NET_GDR_LEVEL`: NCCL already uses GPUDirect RDMA for every GPU whose NIC is
  behind the same PCIe switch (its default level, PXB; through the CPU on Grace's C2C
  platforms, P2C), which is how HGX H100 boards pair each GPU with its HCA. Pinning a
  level could only narrow that. Whether GPUDirect really runs (nvidia-peermem or DMA-BUF
  on the node) is proven by the collective check's bandwidth floor, as on EFA.
- no `NCCL_SOCKET_IFNAME` (NCCL's bootstrap and out-of-band TCP): the descriptor names no
  interface for it, and NCCL's own choice (any interface but lo and docker*: the pod's
  eth0, where the pod has no secondary network) reaches every pod of the job.
- no huge pages: libfabric's EFA provider keeps its bounce buffers in 2 MiB pages, which
  is why EFA pods ask for them; NCCL's IB transport registers its buffers (GPU memory
  through GPUDirect, or ordinary pinned host pages) with `ibv_reg_mr` and needs none.
- no added capability (IPC_LOCK): see components/training_spec.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RDMA_SHARED_RESOURCE = "rdma/rdma_shared_device_a"  # the Network Operator's default resource name
HCA_PORT = 1  # mlx5: one RDMA device per physical port, each with port 1 (workloads/gpucheck/rdma.py PORT)
# /sys/class/infiniband/<hca>/ports/<port>/link_layer on each RDMA fabric (the node checks
# and the GPU check in pods judge each port by it: workloads/gpucheck/rdma.py).
LINK_LAYERS = {"infiniband": "InfiniBand", "roce": "Ethernet"}
# Kernel RDMA device names: mlx5_0, mlx5_bond_0, ibp12s0.
_HCA_NAME = re.compile(r"[A-Za-z0-9_]+")
# An extended resource name: <DNS subdomain>/<name>.
_RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


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

    def __post_init__(self) -> None:
        """A fabric NCCL could not use is refused here, in one line (`node_fabric_problem`)."""
        if isinstance(self.hcas, list):
            object.__setattr__(self, "hcas", tuple(self.hcas))
        problem = node_fabric_problem(self)
        if problem:
            raise ValueError(problem)

    @property
    def line_rate_gbps(self) -> int:
        """The node's total fabric line rate, every HCA together."""
        return self.port_rate_gbps * len(self.hcas)

    @property
    def link_layer(self) -> str:
        """What each port's sysfs `link_layer` says on this fabric."""
        return LINK_LAYERS[self.kind]


def fabric_problem(kind: str) -> str | None:
    """Why `kind` is not a fabric a customer's GPU nodes can use here, or None."""
    known = FABRICS.get(kind)
    if known is None:
        return (f"{kind!r} is not a fabric in the catalog; known: "
                f"{', '.join(name for name, f in FABRICS.items() if f.rdma)} (efa is AWS's own)")
    if not known.rdma:
        return f"{kind!r} is AWS's fabric; a customer's cluster runs infiniband or roce"
    return None


def node_fabric_problem(fabric: NodeFabric) -> str | None:
    """Why NCCL could not use `fabric` as stated, in one line, or None."""
    kind_problem = fabric_problem(fabric.kind)
    if kind_problem:
        return kind_problem
    kind = FABRICS[fabric.kind]
    if isinstance(fabric.hcas, str) or not isinstance(fabric.hcas, tuple) or not fabric.hcas:
        return (f"{fabric.kind} fabric: hcas must list the node's RDMA devices as the kernel names them, "
                f"e.g. (\"mlx5_0\", \"mlx5_1\") (ls /sys/class/infiniband); got {fabric.hcas!r}")
    for hca in fabric.hcas:
        if not isinstance(hca, str) or not _HCA_NAME.fullmatch(hca):
            return (f"{fabric.kind} fabric: HCA {hca!r} is not an RDMA device name (letters, digits and _, "
                    f"e.g. mlx5_0; the port is always {HCA_PORT})")
    repeated = sorted({h for h in fabric.hcas if fabric.hcas.count(h) > 1})
    if repeated:
        return f"{fabric.kind} fabric: HCA {', '.join(repeated)} is listed more than once"
    if isinstance(fabric.port_rate_gbps, bool) or fabric.port_rate_gbps not in kind.port_rates_gbps:
        return (f"{fabric.kind} fabric: port rate {fabric.port_rate_gbps!r} Gb/s is not one of "
                f"{', '.join(str(r) for r in kind.port_rates_gbps)} ({kind.description})")
    if not isinstance(fabric.rdma_resource, str) or not _RESOURCE_NAME.fullmatch(fabric.rdma_resource):
        return (f"{fabric.kind} fabric: rdma_resource {fabric.rdma_resource!r} is not an extended resource name "
                f"like {RDMA_SHARED_RESOURCE} (the RDMA shared device plugin's <prefix>/<resourceName>)")
    if fabric.kind == "roce":
        if fabric.gid_index is None:
            return ("roce fabric: gid_index is required: the GID table index of each port's RoCE v2 address, "
                    "which NCCL uses (NCCL_IB_GID_INDEX); `show_gids` on a node lists it, often 3")
        if isinstance(fabric.gid_index, bool) or not isinstance(fabric.gid_index, int) or fabric.gid_index < 0:
            return f"roce fabric: gid_index {fabric.gid_index!r} is not a GID table index (0 or more)"
    elif fabric.gid_index is not None:
        return (f"infiniband fabric: gid_index {fabric.gid_index!r} is RoCE's (InfiniBand addresses ports by LID); "
                "leave it out")
    return None


def nccl_ib_hca(fabric: NodeFabric) -> str:
    """NCCL_IB_HCA: exactly these HCAs (`=`: names, not prefixes), each at its port."""
    return "=" + ",".join(f"{hca}:{HCA_PORT}" for hca in fabric.hcas)


def nccl_env(fabric: NodeFabric) -> tuple[tuple[str, str], ...]:
    """NCCL's settings for an InfiniBand or RoCE fabric (module docstring says why each)."""
    env = [("NCCL_NET", "IB"), ("NCCL_IB_DISABLE", "0"), ("NCCL_IB_HCA", nccl_ib_hca(fabric))]
    if fabric.kind == "roce":
        env.append(("NCCL_IB_GID_INDEX", str(fabric.gid_index)))
    return tuple(env)
