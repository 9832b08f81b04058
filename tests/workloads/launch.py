"""Start workload processes the way the platform does: torchrun for distributed runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # One thread per process: two ranks share this machine's cores, and fixed thread counts
    # keep floating-point reductions in the same order from run to run.
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(extra or {})}


def torchrun(nproc: int, module: str, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", module, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=REPO)


def python_module(module: str, *args: str, timeout: int = 240,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(env), cwd=REPO)


def events(path: Path, event: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, Path(path).read_text().splitlines()) if r["event"] == event]


def losses(path: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in events(path, "step")}
