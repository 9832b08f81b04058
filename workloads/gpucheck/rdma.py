"""An RDMA node's HCA ports, read from sysfs and judged: each expected HCA's port must be
ACTIVE and LinkUp, at the fabric's rate and link layer.

The kernel keeps one directory per port, /sys/class/infiniband/<hca>/ports/<port>/, with:
- `state`: the logical state, "4: ACTIVE" once the subnet manager (InfiniBand) or the link
  (RoCE) has brought the port up; "1: DOWN", "2: INIT" (no subnet manager), "3: ARMED";
- `phys_state`: the physical link, "5: LinkUp"; "3: Disabled", "2: Polling" (no cable or
  no peer), "7: PhyTest";
- `rate`: "400 Gb/sec (4X NDR)", "200 Gb/sec (4X HDR)" (a port that trained at a lower
  speed or width shows it here);
- `link_layer`: "InfiniBand" or "Ethernet" (RoCE).

The same judgement serves the GPU check in pods (before a training pod starts, and every
five minutes on every node) and the acceptance suite's node check
(infra/acceptance/node.py), which reads the files through testinfra instead. Pure Python:
the checks image carries nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

PORT = 1  # mlx5: one RDMA device per physical port, each with port 1
ACTIVE = "4: ACTIVE"
LINK_UP = "5: LinkUp"
ATTRIBUTES = ("state", "phys_state", "rate", "link_layer")
CLASS_DIR = "class/infiniband"  # under sysfs
HCA_NAME = re.compile(r"[a-z][a-z0-9_]*")  # as the kernel names RDMA devices: mlx5_0
SYSFS_DIR = f"/sys/{CLASS_DIR}"


def port_key(hca: str, port: int = PORT) -> str:
    """How a port's readings are keyed: "mlx5_0/1"."""
    return f"{hca}/{port}"


def read_ports(hcas: tuple[str, ...] | list[str], sysfs: str = "/sys") -> dict[str, dict[str, str] | None]:
    """Each HCA's port attributes from sysfs, keyed by `port_key`; None where the port's
    directory is missing (no such HCA)."""
    readings: dict[str, dict[str, str] | None] = {}
    for hca in hcas:
        directory = Path(sysfs, CLASS_DIR, hca, "ports", str(PORT))
        if not directory.is_dir():
            readings[port_key(hca)] = None
            continue
        found = {}
        for name in ATTRIBUTES:
            try:
                found[name] = (directory / name).read_text().strip()
            except OSError:
                continue
        readings[port_key(hca)] = found
    return readings


def rate_gbps(rate: str | None) -> float | None:
    """The number of Gb/s in a port's `rate` ("400 Gb/sec (4X NDR)": 400.0)."""
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec", rate or "")
    return float(match.group(1)) if match else None


def port_problem(hca: str, reading: dict[str, str] | None, rate: int, link_layer: str,
                 port: int = PORT) -> str | None:
    """What is wrong with one HCA's port, in one line naming the HCA and the port, or None.

    A port that is not up is reported by its state alone (a down port's rate means
    nothing); an up port by its link layer, then its rate."""
    where = f"{hca} port {port}"
    if reading is None:
        return f"{where}: no such port ({SYSFS_DIR}/{hca}/ports/{port} is missing: HCA absent or its driver not loaded)"
    state, phys = reading.get("state"), reading.get("phys_state")
    if state != ACTIVE or phys != LINK_UP:
        return (f"{where} is {state or 'unreadable'} (phys_state {phys or 'unreadable'}), "
                f"expected {ACTIVE} and {LINK_UP}")
    if link_layer and reading.get("link_layer") != link_layer:
        return f"{where}: link layer is {reading.get('link_layer') or 'unreadable'}, expected {link_layer}"
    found = rate_gbps(reading.get("rate"))
    if rate and found != rate:
        return f"{where} runs at {reading.get('rate') or 'an unreadable rate'}, expected {rate} Gb/sec"
    return None


def ports_problems(readings: dict[str, dict[str, str] | None], hcas: tuple[str, ...] | list[str], rate: int,
                   link_layer: str) -> list[str]:
    """Every expected HCA's port problem, in the HCAs' order; one line where none of them
    has a port at all (no RDMA driver, or the HCAs go by other names)."""
    if hcas and all(readings.get(port_key(hca)) is None for hca in hcas):
        return [f"none of the {len(hcas)} HCAs ({', '.join(hcas)}) has a port under {SYSFS_DIR}: the RDMA driver "
                "(DOCA/MOFED) is not loaded, or the HCAs have other names"]
    problems = []
    for hca in hcas:
        problem = port_problem(hca, readings.get(port_key(hca)), rate, link_layer)
        if problem:
            problems.append(problem)
    return problems
