"""Smoke client: after a deploy, send a batch to Triton over gRPC and check the answer.

It checks that the server and the model are ready, that the logits come back as
[batch, sequence, vocab] fp32 with finite values, and that the median latency of a few
rounds stays within a budget. Any failure is a named problem, never a silent pass.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workloads.serve.spec import INPUT_NAME, OUTPUT_NAME
from workloads.serve.triton_config import max_sequence

GRPC_PORT = 8001


@dataclass(frozen=True)
class SmokeResult:
    model: str
    batch_size: int
    sequence: int
    shape: tuple[int, ...] = ()
    latencies_ms: tuple[float, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems and bool(self.latencies_ms)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")

    @property
    def max_ms(self) -> float:
        return max(self.latencies_ms) if self.latencies_ms else float("nan")

    def summary(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        line = (f"{verdict}: {self.model} batch {self.batch_size} x {self.sequence} tokens -> {list(self.shape)}, "
                f"p50 {self.p50_ms:.1f} ms, max {self.max_ms:.1f} ms over {len(self.latencies_ms)} rounds")
        return "; ".join([line, *self.problems])


def connect(url: str, *, ssl: bool = False, root_certificates: str | None = None) -> Any:
    """A Triton gRPC client; `ssl` for the TLS load balancer, with its CA bundle if private."""
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url=url, ssl=ssl, root_certificates=root_certificates)


def _vocab_from_metadata(metadata: dict[str, Any]) -> int | None:
    for output in metadata.get("outputs", []):
        if output.get("name") == OUTPUT_NAME and output.get("shape"):
            last = int(output["shape"][-1])
            return last if last > 0 else None
    return None


def smoke_test(
    client: Any,
    model: str,
    *,
    batch_size: int = 4,
    sequence: int = 16,
    rounds: int = 5,
    max_latency_ms: float = 1000.0,
    version: str = "",
    seed: int = 0,
) -> SmokeResult:
    """Run the checks against `client` (a `tritonclient.grpc.InferenceServerClient`)."""
    from tritonclient.grpc import InferInput, InferRequestedOutput
    from tritonclient.utils import InferenceServerException

    result = SmokeResult(model, batch_size, sequence)
    try:
        if not client.is_server_ready():
            return _fail(result, "server is not ready (/v2/health/ready)")
        if not client.is_model_ready(model, version):
            return _fail(result, f"model {model!r} version {version or 'latest'} is not ready")
        vocab = _vocab_from_metadata(client.get_model_metadata(model, version, as_json=True))
        longest = max_sequence(client.get_model_config(model, version).config)
    except InferenceServerException as err:
        return _fail(result, f"cannot reach the server: {err.message()}")
    if vocab is None:
        return _fail(result, f"model {model!r} has no output {OUTPUT_NAME!r} with a fixed vocabulary axis")
    if longest is not None and sequence > longest:
        # Refused here, before ONNX Runtime fails on the positional table mid-request.
        return _fail(result, f"{sequence} tokens is more than model {model!r} takes (max_sequence {longest} in "
                             "its config.pbtxt); send at most that many")

    ids = np.random.default_rng(seed).integers(0, vocab, size=(batch_size, sequence), dtype=np.int64)
    request = InferInput(INPUT_NAME, list(ids.shape), "INT64")
    request.set_data_from_numpy(ids)
    wanted = [InferRequestedOutput(OUTPUT_NAME)]
    latencies: list[float] = []
    logits = None
    # One extra round first: it warms the connection and the model's memory arena.
    for attempt in range(rounds + 1):
        started = time.perf_counter()
        try:
            answer = client.infer(model, [request], model_version=version, outputs=wanted)
        except InferenceServerException as err:
            return _fail(result, f"inference failed: {err.message()}", latencies)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if attempt:
            latencies.append(elapsed_ms)
        logits = answer.as_numpy(OUTPUT_NAME)
    result = SmokeResult(model, batch_size, sequence, tuple(logits.shape) if logits is not None else (),
                         tuple(latencies))
    problems = []
    expected = (batch_size, sequence, vocab)
    if logits is None:
        problems.append(f"the answer has no {OUTPUT_NAME!r} output")
    elif tuple(logits.shape) != expected:
        problems.append(f"answer shape {list(logits.shape)} is not {list(expected)}")
    elif logits.dtype != np.float32:
        problems.append(f"answer type {logits.dtype} is not float32")
    elif not np.isfinite(logits).all():
        problems.append("answer holds NaN or infinite logits")
    if result.p50_ms > max_latency_ms:
        problems.append(f"p50 latency {result.p50_ms:.1f} ms is above the {max_latency_ms:g} ms budget")
    return SmokeResult(result.model, batch_size, sequence, result.shape, result.latencies_ms, tuple(problems))


def _fail(result: SmokeResult, problem: str, latencies: list[float] | None = None) -> SmokeResult:
    return SmokeResult(result.model, result.batch_size, result.sequence, result.shape,
                       tuple(latencies or ()), (*result.problems, problem))
