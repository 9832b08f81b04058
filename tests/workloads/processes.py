"""A workload's verb as its own process, as a pod runs it: `python -m module args`, with
what it printed, how long it took and its peak memory."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMIT_SECONDS = 60  # past this a run is taken for a hang, killed, and the test fails


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str
    seconds: float
    rss: int  # the process's peak resident memory, bytes


def run(module: str, *args: str, python: Path | str = sys.executable, env: dict[str, str] | None = None) -> Done:
    """`python -m module args` from the repository root, through the module's own entry
    point; killed (and failed) if it runs past LIMIT_SECONDS, as a hang would. Its peak
    memory is its own VmHWM, read while it runs: the rusage of a child counts the memory of
    the process it was forked from (pytest's, 2 GB late in a full run), which Linux carries
    over into the child's at exec."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen([str(python), "-m", module, *args], cwd=REPO, stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=err, env={**os.environ, **(env or {})})
        peak = 0
        while True:
            peak = max(peak, _own_peak(process.pid, module))
            pid, status, _usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > LIMIT_SECONDS:
                process.kill()
                os.wait4(process.pid, 0)
                process.returncode = -9
                pytest.fail(f"{module} {' '.join(args)}: still running after {LIMIT_SECONDS} s")
            time.sleep(0.01)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return Done(process.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                    seconds, peak)


def _own_peak(pid: int, module: str) -> int:
    """The child's VmHWM in bytes once it runs `-m module` (before its exec, /proc shows
    the parent's image); 0 while it cannot be read."""
    try:
        if f"-m\0{module}\0".encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0
