"""One catalog of the instance types the platform runs on: the facts every part needs.

Pure data, no Pulumi: the config validators, the node pool specs, the training code
(model-FLOPs utilisation needs the peak) and the acceptance checks (EFA devices a node
must advertise) all read it. A type missing here is a config error, so a pool can never
attach fewer EFA interfaces than the hardware has because a number was guessed.

Sources: the EC2 accelerated/general purpose instance specifications and the EFA user
guide (interfaces per type, one per network card), NVIDIA data sheets for peak dense
(non-sparse) BF16 tensor throughput.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    model: str  # short lower-case name, also the node label value: "h100"
    name: str  # as NVIDIA sells it
    memory_gib: int  # per GPU
    bf16_tflops: float  # per GPU, peak dense BF16 tensor throughput
    gpudirect_rdma: bool  # NCCL can move GPU memory over EFA without a host copy


A10G = Gpu("a10g", "NVIDIA A10G", 24, 70.0, False)
L4 = Gpu("l4", "NVIDIA L4", 24, 121.0, False)
L40S = Gpu("l40s", "NVIDIA L40S", 48, 362.0, False)
A100_40 = Gpu("a100", "NVIDIA A100 40GB SXM", 40, 312.0, True)
A100_80 = Gpu("a100-80gb", "NVIDIA A100 80GB SXM", 80, 312.0, True)
H100 = Gpu("h100", "NVIDIA H100 80GB SXM", 80, 989.0, True)
H200 = Gpu("h200", "NVIDIA H200 141GB SXM", 141, 989.0, True)
B200 = Gpu("b200", "NVIDIA B200", 180, 2250.0, True)


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    network_gbps: float  # the type's peak; "up to" (burst) where `network_burst`
    network_cards: int
    efa_interfaces: int  # 0: no EFA. Otherwise one per network card the pool attaches
    nvme_disks: int = 0  # local instance-store NVMe SSDs
    nvme_gb_each: int = 0
    gpu: Gpu | None = None
    gpus: int = 0
    network_burst: bool = False
    # A customer's node class: its InfiniBand or RoCE HCAs (0 on every EC2 type, whose
    # fabric is EFA), so GPU jobs on it run the collective check as EFA pools do.
    rdma_hcas: int = 0
    # Every type in this catalog is x86_64; a Graviton type would say arm64. Images are
    # mirrored with every platform the node pools run (infra/mirror.py).
    architecture: str = "amd64"

    @property
    def platform(self) -> str:
        return f"linux/{self.architecture}"

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def has_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def has_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def gpudirect_rdma(self) -> bool:
        return self.gpu is not None and self.gpu.gpudirect_rdma and (self.has_efa or self.rdma_hcas > 0)

    @property
    def customer_node_class(self) -> bool:
        """A customer's own node class (register_node_class), not an EC2 type."""
        return self.name not in EC2_TYPES

    @property
    def reservation_advised(self) -> bool:
        """The UltraCluster training types (p4d, p5, p6...): AWS seldom has several of them
        on demand at once, so a pool of them wants a capacity reservation or Capacity Block."""
        return self.gpudirect_rdma

    @property
    def nvme_gb(self) -> int:
        return self.nvme_disks * self.nvme_gb_each

    @property
    def peak_bf16_tflops(self) -> float:
        """All GPUs of one instance together."""
        return self.gpus * self.gpu.bf16_tflops if self.gpu else 0.0


def _sizes(family: str, rows: list[tuple], **common) -> dict[str, InstanceType]:
    out = {}
    for size, *values in rows:
        name = f"{family}.{size}"
        out[name] = InstanceType(name, *values, **common)
    return out


# Columns: size, vCPUs, memory GiB, network Gbps, network cards, EFA interfaces,
# NVMe disks, GB per disk, then GPU model and count where the family has GPUs.
_CATALOG: dict[str, InstanceType] = {
    # --- Training: 8 GPUs, one EFA per network card, GPUDirect RDMA ---------------------
    **_sizes("p4d", [("24xlarge", 96, 1152, 400, 4, 4, 8, 1000, A100_40, 8)]),
    **_sizes("p4de", [("24xlarge", 96, 1152, 400, 4, 4, 8, 1000, A100_80, 8)]),
    **_sizes("p5", [("48xlarge", 192, 2048, 3200, 32, 32, 8, 3840, H100, 8)]),
    **_sizes("p5e", [("48xlarge", 192, 2048, 3200, 32, 32, 8, 3840, H200, 8)]),
    **_sizes("p5en", [("48xlarge", 192, 2048, 3200, 16, 16, 8, 3840, H200, 8)]),
    **_sizes("p6-b200", [("48xlarge", 192, 2048, 3200, 8, 8, 8, 3840, B200, 8)]),
    # --- Inference and small training: one EFA from 8xlarge up (g6e: 2 and 4 at the top) -
    **_sizes("g5", [
        ("xlarge", 4, 16, 10, 1, 0, 1, 250, A10G, 1),
        ("2xlarge", 8, 32, 10, 1, 0, 1, 450, A10G, 1),
        ("4xlarge", 16, 64, 25, 1, 0, 1, 600, A10G, 1),
        ("8xlarge", 32, 128, 25, 1, 1, 1, 900, A10G, 1),
        ("12xlarge", 48, 192, 40, 1, 1, 1, 3800, A10G, 4),
        ("16xlarge", 64, 256, 25, 1, 1, 1, 1900, A10G, 1),
        ("24xlarge", 96, 384, 50, 1, 1, 1, 3800, A10G, 4),
        ("48xlarge", 192, 768, 100, 1, 1, 2, 3800, A10G, 8),
    ]),
    **_sizes("g6", [
        ("xlarge", 4, 16, 10, 1, 0, 1, 250, L4, 1),
        ("2xlarge", 8, 32, 10, 1, 0, 1, 450, L4, 1),
        ("4xlarge", 16, 64, 25, 1, 0, 1, 600, L4, 1),
        ("8xlarge", 32, 128, 25, 1, 1, 2, 450, L4, 1),
        ("12xlarge", 48, 192, 40, 1, 1, 4, 940, L4, 4),
        ("16xlarge", 64, 256, 25, 1, 1, 2, 940, L4, 1),
        ("24xlarge", 96, 384, 50, 1, 1, 4, 940, L4, 4),
        ("48xlarge", 192, 768, 100, 1, 1, 8, 940, L4, 8),
    ]),
    **_sizes("g6e", [
        ("xlarge", 4, 32, 20, 1, 0, 1, 250, L40S, 1),
        ("2xlarge", 8, 64, 20, 1, 0, 1, 450, L40S, 1),
        ("4xlarge", 16, 128, 20, 1, 0, 1, 600, L40S, 1),
        ("8xlarge", 32, 256, 25, 1, 1, 1, 900, L40S, 1),
        ("12xlarge", 48, 384, 100, 1, 1, 2, 1900, L40S, 4),
        ("16xlarge", 64, 512, 35, 1, 1, 1, 1900, L40S, 1),
        ("24xlarge", 96, 768, 200, 2, 2, 2, 1900, L40S, 4),
        ("48xlarge", 192, 1536, 400, 4, 4, 4, 1900, L40S, 8),
    ]),
    # --- CPU pools: system add-ons and the smb stack ------------------------------------
    **_sizes("m7i", [
        ("large", 2, 8, 12.5, 1, 0),
        ("xlarge", 4, 16, 12.5, 1, 0),
        ("2xlarge", 8, 32, 12.5, 1, 0),
        ("4xlarge", 16, 64, 12.5, 1, 0),
    ], network_burst=True),
    **_sizes("m7i", [
        ("8xlarge", 32, 128, 12.5, 1, 0),
        ("12xlarge", 48, 192, 18.75, 1, 0),
        ("16xlarge", 64, 256, 25, 1, 0),
        ("24xlarge", 96, 384, 37.5, 1, 0),
        ("48xlarge", 192, 768, 50, 1, 1),
    ]),
    **_sizes("c7i", [
        ("large", 2, 4, 12.5, 1, 0),
        ("xlarge", 4, 8, 12.5, 1, 0),
        ("2xlarge", 8, 16, 12.5, 1, 0),
        ("4xlarge", 16, 32, 12.5, 1, 0),
    ], network_burst=True),
    **_sizes("c7i", [
        ("8xlarge", 32, 64, 12.5, 1, 0),
        ("12xlarge", 48, 96, 18.75, 1, 0),
        ("16xlarge", 64, 128, 25, 1, 0),
        ("24xlarge", 96, 192, 37.5, 1, 0),
        ("48xlarge", 192, 384, 50, 1, 1),
    ]),
}

# g5/g6/g6e below 8xlarge burst ("up to") rather than sustain their network figure.
for _name, _it in list(_CATALOG.items()):
    if _it.family in ("g5", "g6", "g6e") and _it.name.split(".")[1] in ("xlarge", "2xlarge", "4xlarge"):
        _CATALOG[_name] = InstanceType(**{**_it.__dict__, "network_burst": True})

CATALOG: dict[str, InstanceType] = dict(sorted(_CATALOG.items()))
FAMILIES: tuple[str, ...] = tuple(sorted({it.family for it in CATALOG.values()}))


class UnknownInstanceType(KeyError):
    pass


def lookup(name: str) -> InstanceType:
    """The catalog entry, matched case-insensitively; UnknownInstanceType otherwise."""
    found = CATALOG.get(name.strip().lower())
    if found is None:
        raise UnknownInstanceType(name)
    return found


def unknown_type_message(name: str) -> str:
    """One line for a type outside the catalog: a near miss if there is one, the families."""
    close = difflib.get_close_matches(name.strip().lower(), CATALOG, n=1, cutoff=0.8)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{name!r} is not in the instance catalog (infra/catalog.py); {hint}known families: {', '.join(FAMILIES)}"


def efa_types() -> list[InstanceType]:
    return [it for it in CATALOG.values() if it.has_efa]


# --- A customer's own nodes --------------------------------------------------------
# On a customer's cluster the nodes are no EC2 type: each group of identical nodes is a
# node class that its descriptor describes (infra/descriptor.py: CPUs, memory, GPUs and
# their model, the fabric's line rate). The descriptor registers its classes here before
# the environment's settings are validated, so everything that reads the catalog (quotas,
# the training job's pods and its bandwidth gate, the queues' flavors) reads a node class
# as it reads an instance type.

GPUS: dict[str, Gpu] = {g.model: g for g in (A10G, L4, L40S, A100_40, A100_80, H100, H200, B200)}
EC2_TYPES: frozenset[str] = frozenset(CATALOG)


class NodeClassError(ValueError):
    """A node class that cannot be registered: an EC2 type's name, or a second, different
    description of a class already registered."""


def register_node_class(node_class: InstanceType) -> InstanceType:
    """Add a customer's node class to the catalog (idempotent for the same facts)."""
    name = node_class.name.strip().lower()
    if name in EC2_TYPES:
        raise NodeClassError(f"{node_class.name!r} is an EC2 instance type; name the customer's node class "
                             "differently (the value its nodes carry in node.kubernetes.io/instance-type)")
    existing = CATALOG.get(name)
    if existing is not None and existing != node_class:
        raise NodeClassError(f"node class {name!r} is described twice, differently; give each group of "
                             "different nodes its own instanceType")
    CATALOG[name] = node_class
    return node_class


def gpu_model_message(model: str) -> str:
    return f"{model!r} is not a GPU model the catalog knows; known: {', '.join(sorted(GPUS))}"
