"""Did the inference service answer? The serving smoke client (workloads/serve/client.py),
run against the stack's Triton service after a deploy, judged here.

The Triton service is found by what it is, not by what it is called: a Service with a
port for Triton's gRPC endpoint whose selector matches running pods.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from infra.acceptance.cluster import ClusterState, Obj, namespaced

TRITON_GRPC_PORT = 8001


def _selects(selector: Mapping[str, str], pod: Obj) -> bool:
    labels = pod.get("metadata", {}).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def triton_service(state: ClusterState) -> Obj | None:
    """The Service in front of Triton's gRPC port with running pods behind it."""
    for service in state.services:
        spec = service.get("spec", {})
        ports = spec.get("ports") or []
        if not any(TRITON_GRPC_PORT in (p.get("port"), p.get("targetPort")) for p in ports):
            continue
        namespace = service.get("metadata", {}).get("namespace")
        behind = [p for p in state.pods if p.get("metadata", {}).get("namespace") == namespace
                  and _selects(spec.get("selector") or {}, p) and p.get("status", {}).get("phase") == "Running"]
        if behind:
            return service
    return None


def service_grpc_port(service: Obj) -> int:
    for port in service.get("spec", {}).get("ports") or []:
        if TRITON_GRPC_PORT in (port.get("port"), port.get("targetPort")):
            return int(port["port"])
    raise ValueError(f"{namespaced(service)} has no Triton gRPC port")


def smoke_outcome(result: Any) -> dict[str, Any]:
    """A `workloads.serve.client.SmokeResult` as plain data (what replays record)."""
    data = dataclasses.asdict(result)
    data["shape"], data["latencies_ms"], data["problems"] = (
        list(data["shape"]), list(data["latencies_ms"]), list(data["problems"]))
    return data


def check_inference_smoke(outcome: Mapping[str, Any] | str | None, model: str | None) -> list[str]:
    """`outcome`: the smoke client's result, or why it could not run. `model` is the
    stack's served model; None when the stack serves none, and then nothing is asked."""
    if model is None:
        return []
    if outcome is None or isinstance(outcome, str):
        return [f"the inference smoke client could not ask model {model!r}: {outcome or 'no result'}"]
    problems = list(outcome.get("problems") or [])
    if not outcome.get("latencies_ms") and not problems:
        problems = ["no round completed"]
    if problems:
        return [f"the inference smoke client got no good answer from model {outcome.get('model', model)!r}: "
                + "; ".join(problems)]
    return []


@contextmanager
def port_forward(namespace: str, service: str, port: int, kubeconfig: str | None = None,
                 context: str | None = None, timeout: float = 30) -> Iterator[str]:
    """`kubectl port-forward svc/<service>` to a free local port; yields "127.0.0.1:<port>"."""
    command = ["kubectl", *(["--kubeconfig", kubeconfig] if kubeconfig else []),
               *(["--context", context] if context else []),
               "port-forward", "-n", namespace, f"svc/{service}", f":{port}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = _first_line(process, timeout)
        match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
        if not match:
            raise RuntimeError(f"kubectl port-forward: {line.strip() or 'no output'}")
        yield f"127.0.0.1:{match.group(1)}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _first_line(process: subprocess.Popen, timeout: float) -> str:
    import threading

    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0] if lines else f"no answer within {timeout:g} s"
