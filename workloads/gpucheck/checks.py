"""Judge one node's NVML readings against what its instance type should have, and on an
RDMA node (InfiniBand, RoCE) its HCAs' ports (rdma.py).

Pure functions over the data `readings.read_node` returns (plus `rdma_ports`, from
`rdma.read_ports`); every rule is one function so a failure names exactly what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from workloads.gpucheck import rdma

GIB = 1 << 30

# NVML reports a little less memory than the marketed size (the driver's reservation,
# ECC): 81559 MiB on an "80GB" H100, 23028 MiB on a "24GB" A10G. Less than this fraction
# of the marketed size means a GPU is degraded or a different part.
MEMORY_TOLERANCE = 0.9

# NVLink links per GPU on the SXM parts the platform uses (NVIDIA data sheets: A100 SXM
# has 12 third-generation links, H100/H200 SXM 18 fourth-generation, B200 18 fifth-).
# PCIe cards (A10G, L4, L40S) have none.
NVLINKS = {"a100": 12, "h100": 18, "h200": 18, "b200": 18}

# Clock event reasons (NVML's nvmlClocksEventReason* bits) that mean the hardware is
# protecting itself: a GPU that shows them trains slowly and drags the whole job. Idle,
# application clocks, the software power cap under load and sync boost are normal.
HW_SLOWDOWN = 0x08
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
BAD_CLOCK_REASONS = {
    HW_SLOWDOWN: "hardware slowdown",
    SW_THERMAL_SLOWDOWN: "software thermal slowdown",
    HW_THERMAL_SLOWDOWN: "hardware thermal slowdown",
    HW_POWER_BRAKE_SLOWDOWN: "power brake slowdown",
}

# Below the slowdown threshold but this close: worth a warning, not a failure.
TEMPERATURE_MARGIN_C = 5


@dataclass(frozen=True)
class Expected:
    gpus: int
    model: str  # catalog short name: "h100", "a100-80gb", "a10g"
    memory_gib: int
    instance_type: str = ""
    # An RDMA node's fabric (components/fabric_spec.py NodeFabric): the HCAs whose port must
    # be up, at this rate (Gb/s) and link layer ("InfiniBand", "Ethernet"); none on EFA.
    hcas: tuple[str, ...] = ()
    port_rate_gbps: int = 0
    link_layer: str = ""

    @property
    def name_token(self) -> str:
        """What NVML's device name must contain: "H100" for "NVIDIA H100 80GB HBM3"."""
        return self.model.split("-")[0].upper()

    @property
    def nvlinks(self) -> int | None:
        return NVLINKS.get(self.model.split("-")[0])


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # "fail" or "warn"
    message: str
    gpu: int | None = None  # None: about the node


@dataclass
class Report:
    expected: Expected
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not any(f.severity == "fail" for f in self.findings)

    def to_dict(self, readings: dict[str, Any]) -> dict[str, Any]:
        return {"healthy": self.healthy, "expected": asdict(self.expected),
                "findings": [asdict(f) for f in self.findings], "readings": readings}


def check_count(node: dict[str, Any], exp: Expected) -> list[Finding]:
    found = len(node["gpus"])
    if found != exp.gpus:
        return [Finding("gpu_count", "fail", f"{found} GPUs visible, {exp.instance_type or 'expected'} has {exp.gpus}")]
    return []


def check_model(gpu: dict[str, Any], exp: Expected) -> list[Finding]:
    if not re.search(rf"\b{re.escape(exp.name_token)}\b", gpu["name"], re.IGNORECASE):
        return [Finding("gpu_model", "fail", f"{gpu['name']!r} is not a {exp.name_token}", gpu["index"])]
    return []


def check_memory(gpu: dict[str, Any], exp: Expected) -> list[Finding]:
    gib = gpu["memory_total_bytes"] / GIB
    if gib < MEMORY_TOLERANCE * exp.memory_gib:
        return [Finding("memory", "fail", f"{gib:.1f} GiB of memory, expected about {exp.memory_gib} GiB",
                        gpu["index"])]
    return []


def check_ecc(gpu: dict[str, Any], exp: Expected) -> list[Finding]:
    if gpu["ecc_enabled"] is False:
        return [Finding("ecc", "warn", "ECC is disabled: memory errors go undetected", gpu["index"])]
    count = gpu["ecc_volatile_uncorrected"] or 0
    if count > 0:
        return [Finding("ecc", "fail", f"{count} volatile uncorrectable ECC errors since the last driver load",
                        gpu["index"])]
    return []


def check_row_remap(gpu: dict[str, Any], exp: Expected) -> list[Finding]:
    rows = gpu["remapped_rows"]
    if rows is None:
        return []
    if rows["failure"]:
        return [Finding("row_remap", "fail", "row remapping failed: the GPU needs replacing", gpu["index"])]
    if rows["pending"]:
        return [Finding("row_remap", "fail", "a row remap is pending: reset the GPU (or reboot the node)",
                        gpu["index"])]
    return []


def check_temperature(gpu: dict[str, Any], exp: Expected) -> list[Finding]:
    temp, limit = gpu["temperature_c"], gpu["slowdown_temperature_c"]
    if limit is None:
        return []
    if temp >= limit:
        return [Finding("temperature", "fail", f"{temp} C is at or above the slowdown threshold {limit} C",
                        gpu["index"])]
    if temp >= limit - TEMPERATURE_MARGIN_C:
        return [Finding("temperature", "warn", f"{temp} C is within {TEMPERATURE_MARGIN_C} C of the slowdown "
                        f"threshold {limit} C", gpu["index"])]
    return []


def check_nvlink(gpu: dict[str, Any], exp: Expected) -> list[Finding]:
    links = gpu["nvlinks_active"]
    up = sum(links)
    if exp.nvlinks is not None and up < exp.nvlinks:
        return [Finding("nvlink", "fail", f"{up} of {exp.nvlinks} NVLink links up", gpu["index"])]
    if exp.nvlinks is None and up < len(links):
        return [Finding("nvlink", "fail", f"{up} of {len(links)} NVLink links up", gpu["index"])]
    return []


def check_clocks(gpu: dict[str, Any], exp: Expected) -> list[Finding]:
    reasons = gpu["clocks_event_reasons"]
    active = [text for bit, text in BAD_CLOCK_REASONS.items() if reasons & bit]
    if active:
        return [Finding("throttle", "fail", f"clocks held down by {', '.join(active)} (reasons {reasons:#x})",
                        gpu["index"])]
    return []


def check_rdma_ports(node: dict[str, Any], exp: Expected) -> list[Finding]:
    """Each expected HCA's port up (ACTIVE, LinkUp) at the fabric's rate and link layer: a
    port down leaves NCCL a rail short, or stalls the job where the ring needs it."""
    if not exp.hcas:
        return []
    readings = node.get("rdma_ports") or {}
    return [Finding("rdma_port", "fail", problem)
            for problem in rdma.ports_problems(readings, exp.hcas, exp.port_rate_gbps, exp.link_layer)]


PER_GPU = (check_model, check_memory, check_ecc, check_row_remap, check_temperature, check_nvlink, check_clocks)


def evaluate(node: dict[str, Any], exp: Expected) -> Report:
    report = Report(exp, check_count(node, exp))
    for gpu in node["gpus"]:
        for rule in PER_GPU:
            report.findings.extend(rule(gpu, exp))
    report.findings.extend(check_rdma_ports(node, exp))
    return report
