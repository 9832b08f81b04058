"""What every benchmark record states about the machine it ran on: the CPU model, whether
it has the instructions that change the figures (AVX512-BF16, AMX), the cores, and the
load average before and after the run."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path
from typing import Any


def children_cpu() -> float:
    """CPU seconds of the finished child processes (and theirs), user and system."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def record() -> dict[str, Any]:
    """The machine, at the start of a run; `finish` adds the load at its end."""
    flags = cpu_flags()
    return {
        "cpu": cpu_name(),
        "avx512_bf16": "avx512_bf16" in flags,
        "amx": "amx_tile" in flags,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": round(os.getloadavg()[0], 2),
    }


def finish(machine: dict[str, Any]) -> dict[str, Any]:
    return {**machine, "load_after": round(os.getloadavg()[0], 2)}


def describe(machine: dict[str, Any]) -> str:
    features = ", ".join(f for f, on in (("AVX512-BF16", machine["avx512_bf16"]), ("AMX", machine["amx"])) if on)
    return (f"{machine['cpu']} ({machine['cores']} cores; {features or 'no AVX512-BF16, no AMX'}), "
            f"Python {machine['python']}, load {machine['load_before']}"
            + (f" -> {machine['load_after']}" if "load_after" in machine else ""))
