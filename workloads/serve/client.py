"""Smoke client: after a deploy, send a batch to Triton over gRPC and check the answer.

It checks that the server and the model are ready, that the next token's top k comes back
as [batch, k] ids within the vocabulary with finite log-probabilities, most likely first,
and that the median latency of a few rounds stays within a budget. Any failure is a named
problem, never a silent pass. It asks for the top k only, as a client should: the full
logits are there for those who need them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workloads.serve.spec import INPUT_NAME, OUTPUT_NAME, TOP_K_IDS, TOP_K_LOGPROBS
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


def _last_axis(metadata: dict[str, Any], name: str) -> int | None:
    """The fixed size of output `name`'s last axis (the vocabulary, or k), from the model's
    metadata; None if the model has no such output."""
    for output in metadata.get("outputs", []):
        if output.get("name") == name and output.get("shape"):
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
    headers: dict[str, str] | None = None,
) -> SmokeResult:
    """Run the checks against `client` (a `tritonclient.grpc.InferenceServerClient`);
    `headers` go with every call (the gateway's `authorization`)."""
    from tritonclient.grpc import InferInput, InferRequestedOutput
    from tritonclient.utils import InferenceServerException

    result = SmokeResult(model, batch_size, sequence)
    try:
        if not client.is_server_ready(headers=headers):
            return _fail(result, "server is not ready (/v2/health/ready)")
        if not client.is_model_ready(model, version, headers=headers):
            return _fail(result, f"model {model!r} version {version or 'latest'} is not ready")
        metadata = client.get_model_metadata(model, version, headers=headers, as_json=True)
        vocab, top_k = _last_axis(metadata, OUTPUT_NAME), _last_axis(metadata, TOP_K_IDS)
        longest = max_sequence(client.get_model_config(model, version, headers=headers).config)
    except InferenceServerException as err:
        return _fail(result, f"cannot reach the server: {err.message()}")
    if vocab is None or top_k is None:
        return _fail(result, f"model {model!r} does not answer for the next token (outputs {OUTPUT_NAME!r} "
                             f"[batch, vocab] and {TOP_K_IDS!r} [batch, k]); export it again with this release")
    if longest is not None and sequence > longest:
        # Refused here, before ONNX Runtime fails on the positional table mid-request.
        return _fail(result, f"{sequence} tokens is more than model {model!r} takes (max_sequence {longest} in "
                             "its config.pbtxt); send at most that many")

    ids = np.random.default_rng(seed).integers(0, vocab, size=(batch_size, sequence), dtype=np.int64)
    request = InferInput(INPUT_NAME, list(ids.shape), "INT64")
    request.set_data_from_numpy(ids)
    wanted = [InferRequestedOutput(TOP_K_IDS), InferRequestedOutput(TOP_K_LOGPROBS)]
    latencies: list[float] = []
    top_ids = top_logprobs = None
    # One extra round first: it warms the connection and the model's memory arena.
    for attempt in range(rounds + 1):
        started = time.perf_counter()
        try:
            answer = client.infer(model, [request], model_version=version, outputs=wanted, headers=headers)
        except InferenceServerException as err:
            return _fail(result, f"inference failed: {err.message()}", latencies)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if attempt:
            latencies.append(elapsed_ms)
        top_ids, top_logprobs = answer.as_numpy(TOP_K_IDS), answer.as_numpy(TOP_K_LOGPROBS)
    result = SmokeResult(model, batch_size, sequence, tuple(top_ids.shape) if top_ids is not None else (),
                         tuple(latencies))
    problems = _top_k_problems(top_ids, top_logprobs, (batch_size, top_k), vocab)
    if result.p50_ms > max_latency_ms:
        problems.append(f"p50 latency {result.p50_ms:.1f} ms is above the {max_latency_ms:g} ms budget")
    return SmokeResult(result.model, batch_size, sequence, result.shape, result.latencies_ms, tuple(problems))


def _top_k_problems(ids: Any, logprobs: Any, expected: tuple[int, int], vocab: int) -> list[str]:
    """What is wrong with a top-k answer: its shapes and types, ids outside the vocabulary,
    log-probabilities that are not finite, above 0 or out of order."""
    if ids is None or logprobs is None:
        return [f"the answer lacks {TOP_K_IDS!r} or {TOP_K_LOGPROBS!r}"]
    if tuple(ids.shape) != expected or tuple(logprobs.shape) != expected:
        return [f"answer shapes {list(ids.shape)} and {list(logprobs.shape)} are not {list(expected)}"]
    if ids.dtype != np.int64 or logprobs.dtype != np.float32:
        return [f"answer types {ids.dtype} and {logprobs.dtype} are not int64 and float32"]
    if ids.min() < 0 or ids.max() >= vocab:
        return [f"answer holds token ids outside the vocabulary of {vocab}"]
    if not np.isfinite(logprobs).all() or (logprobs > 1e-6).any():
        return ["answer holds log-probabilities that are NaN, infinite or above 0"]
    if (np.diff(logprobs, axis=-1) > 1e-6).any():
        return ["answer's top k is not ordered most likely first"]
    return []


def _fail(result: SmokeResult, problem: str, latencies: list[float] | None = None) -> SmokeResult:
    return SmokeResult(result.model, result.batch_size, result.sequence, result.shape,
                       tuple(latencies or ()), (*result.problems, problem))
