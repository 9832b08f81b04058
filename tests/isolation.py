"""Run a reader of hostile input in a forked child, under a time limit and a memory cap, so
that a regression (an endless read of /dev/zero, a blocking open of a FIFO) fails its test
in seconds instead of hanging the run or taking the machine's memory."""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import time
from collections.abc import Callable
from typing import Any

SECONDS = 10
MEMORY = 1 << 30  # bytes the child may add to what it inherits


def _data_size() -> int:
    """This process's data segment now (VmData), which RLIMIT_DATA bounds."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(call: Callable[[], Any], out: int, memory: int) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (_data_size() + memory, resource.RLIM_INFINITY))
        try:
            payload = pickle.dumps(("returned", call()))
        except BaseException as err:  # noqa: BLE001 - carried to the parent, which raises it
            try:
                payload = pickle.dumps(("raised", err))
            except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
                payload = pickle.dumps(("raised", RuntimeError(f"{type(err).__name__}: {err}")))
        os.write(out, payload)
    finally:
        os._exit(0)


def isolated(call: Callable[[], Any], *, seconds: float = SECONDS, memory: int = MEMORY) -> Any:
    """call() in a forked child: what it returns, or the exception it raises, raised here.
    AssertionError where it runs past `seconds` or dies (a MemoryError past `memory` is
    raised as itself)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(call, write_end, memory)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"still running after {seconds} s")
            ready, _, _ = select.select([read_end], [], [], left)
            if ready:
                chunk = os.read(read_end, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if not chunks:
        raise AssertionError("the child died without an answer")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "raised":
        raise value
    return value
