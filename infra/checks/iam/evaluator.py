"""The real IAM evaluator: @cloud-copilot/iam-simulate (npm, pinned in package.json beside
this file, installed by `make setup`), driven by simulate.mjs in one Node process for every
request."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "simulate.mjs"
INSTALLED = HERE / "node_modules" / "@cloud-copilot" / "iam-simulate"
INSTALL = "npm ci --prefix infra/checks/iam (make setup)"
TIMEOUT_SECONDS = 300
PER_PROCESS = 20  # requests worth a Node process's start (about 0.25 s) of their own


class EvaluatorError(RuntimeError):
    """The evaluator is not there, or did not answer: one line saying which."""


def simulate(requests: list[tuple[str, dict[str, Any]]],
             timeout: float = TIMEOUT_SECONDS) -> dict[str, dict[str, Any]]:
    """{id: {"result": Allowed | ExplicitlyDenied | ImplicitlyDenied | Error, "errors": ...}}
    for each (id, simulation). Past PER_PROCESS requests, split among one Node process per
    core: each request takes the evaluator milliseconds, and they are independent."""
    node = shutil.which("node")
    if node is None:
        raise EvaluatorError("node not found: install Node.js 20 (Debian/Ubuntu: apt-get install nodejs npm)")
    if not INSTALLED.is_dir():
        raise EvaluatorError(f"the IAM evaluator is not installed: run {INSTALL}")
    parts = max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                       len(requests) // PER_PROCESS))
    if parts == 1:
        return _run(node, requests, timeout)
    size = -(-len(requests) // parts)
    with ThreadPoolExecutor(max_workers=parts) as pool:
        answers: dict[str, dict[str, Any]] = {}
        for part in pool.map(lambda i: _run(node, requests[i:i + size], timeout), range(0, len(requests), size)):
            answers.update(part)
    return answers


def _run(node: str, requests: list[tuple[str, dict[str, Any]]], timeout: float) -> dict[str, dict[str, Any]]:
    payload = json.dumps([{"id": key, "simulation": simulation} for key, simulation in requests])
    try:
        done = subprocess.run([node, str(SCRIPT)], input=payload, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EvaluatorError(f"the IAM evaluator gave no answer in {timeout:.0f} s") from None
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()] or ["no output"]
        raise EvaluatorError(f"the IAM evaluator failed: {lines[-1][:300]}")
    try:
        answers = json.loads(done.stdout)
    except ValueError:
        raise EvaluatorError("the IAM evaluator's answer is not JSON") from None
    return {a["id"]: a for a in answers if isinstance(a, dict) and isinstance(a.get("id"), str)
            and isinstance(a.get("result"), str)}
