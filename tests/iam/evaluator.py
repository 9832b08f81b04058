"""The real IAM evaluator the path table runs on: @cloud-copilot/iam-simulate (npm, pinned
in tests/iam/package.json, installed by `make setup`), driven by simulate.mjs in one Node
process for every path."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "simulate.mjs"
INSTALLED = HERE / "node_modules" / "@cloud-copilot" / "iam-simulate"


def simulate(requests: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """{id: Allowed | ExplicitlyDenied | ImplicitlyDenied} for each (id, simulation)."""
    if shutil.which("node") is None:
        pytest.fail("node not found: install Node.js 20 (Debian/Ubuntu: apt-get install nodejs npm)", pytrace=False)
    if not INSTALLED.is_dir():
        pytest.fail("the IAM evaluator is not installed: run `make setup` (npm ci --prefix tests/iam)", pytrace=False)
    payload = json.dumps([{"id": key, "simulation": simulation} for key, simulation in requests])
    done = subprocess.run(["node", str(SCRIPT)], input=payload, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout)
    errors = {a["id"]: a["errors"] for a in answers if a["result"] == "Error"}
    assert not errors, f"the evaluator refused these simulations: {errors}"
    return {a["id"]: a["result"] for a in answers}
