"""What a served model looks like to Triton, as plain data, and the rules it must obey.

Pure Python with no heavy imports: the stack config (`infra/config.py`) checks the same
rules through `check_serving`, so a stack file and the `python -m workloads.serve` command
line reject a bad value with the same sentence, each naming its own key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Device = Literal["gpu", "cpu"]
DEVICES: tuple[str, ...] = ("gpu", "cpu")

# A model name is a directory in the model repository, a path segment of Triton's
# endpoints (/v2/models/<name>/infer) and the value of the serving pods'
# app.kubernetes.io/instance label: it must not need escaping, hide as a dot-file, or break
# the label rules (at most 63 characters, a letter or digit at both ends).
MODEL_NAME_PATTERN = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
# Triton stores these as int32 (batch sizes, instance counts) and uint64 (queue delay).
INT32_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1
INT64_MAX = 2**63 - 1  # Triton's model version numbers
# The largest vocabulary a served model may have. The biggest in use are about 256,000
# tokens; each answer carries a [batch, vocabulary] fp32 logits row, 40 MB per request at
# this bound, so a larger one is a mistake, not a model.
MAX_VOCAB = 10_000_000

# Tensor names the exported graph and the Triton config agree on. The graph answers for
# the next token only: its logits over the vocabulary, and the k most likely ids with
# their log-probabilities. Every position's logits would be [B, T, V] fp32, 206 MB for one
# 1024-token GPT-2 request; a client asks Triton for the outputs it needs (top-k by
# default, a few hundred bytes).
INPUT_NAME = "input_ids"
OUTPUT_NAME = "logits"  # [B, V] fp32: the last position's logits
TOP_K_IDS = "top_k_ids"  # [B, k] int64, most likely first
TOP_K_LOGPROBS = "top_k_logprobs"  # [B, k] fp32, log-softmax of the logits at those ids
DEFAULT_TOP_K = 16

# What the served graph computes in. int8 is ONNX Runtime's dynamic quantization of the
# weights (CPU); fp16 is TensorRT's FP16 mode (GPU), so it needs the TensorRT accelerator.
PRECISIONS: tuple[str, ...] = ("fp32", "int8", "fp16")
ACCELERATORS: tuple[str, ...] = ("none", "tensorrt")


class ServeSpecError(ValueError):
    """A serving setting Triton would refuse. `key` is the camelCase setting name; each
    front end (stack file, command line) prefixes it with its own spelling."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class ModelSpec:
    """One model as Triton serves it: batching, placement and how many versions stay loaded."""

    name: str
    vocab_size: int
    device: Device = "cpu"
    max_batch_size: int = 32
    preferred_batch_sizes: tuple[int, ...] = (8, 16, 32)
    max_queue_delay_microseconds: int = 2000
    instance_count: int = 1
    # Triton loads the newest N versions, so a client can go back to an older one at once.
    keep_versions: int = 2
    # Longest sequence the model accepts (its positional table); -1 leaves it open.
    max_sequence: int = -1
    # ONNX Runtime threads per instance on CPU; 0 leaves ONNX Runtime's default, one per
    # core of the node, which oversubscribes a replica limited to a few cores.
    intra_op_threads: int = 0
    top_k: int = DEFAULT_TOP_K
    precision: str = "fp32"
    accelerator: str = "none"  # GPU: "tensorrt" runs the graph through ONNX Runtime's TensorRT provider

    def __post_init__(self) -> None:
        check_serving(
            model_name=self.name,
            device=self.device,
            max_batch_size=self.max_batch_size,
            preferred_batch_sizes=self.preferred_batch_sizes,
            max_queue_delay_microseconds=self.max_queue_delay_microseconds,
            instance_count=self.instance_count,
            keep_versions=self.keep_versions,
        )
        if self.vocab_size < 1:
            raise ServeSpecError("vocabSize", f"vocabulary size {self.vocab_size} must be at least 1")
        if self.vocab_size > MAX_VOCAB:
            raise ServeSpecError("vocabSize", f"vocabulary size {self.vocab_size} is above {MAX_VOCAB:,}; no served "
                                 "model has a larger one")
        if self.intra_op_threads < 0:
            raise ServeSpecError("cpuThreads", f"{self.intra_op_threads} threads: use 0 (the default) or more")
        check_contract(device=self.device, top_k=self.top_k, precision=self.precision,
                       accelerator=self.accelerator, vocab_size=self.vocab_size)


def check_contract(*, device: str, top_k: int, precision: str, accelerator: str, vocab_size: int = 0) -> None:
    """What the served graph computes in and answers with, against the device it runs on."""
    if precision not in PRECISIONS:
        raise ServeSpecError("precision", f"precision {precision!r} is not allowed; allowed: {', '.join(PRECISIONS)}")
    if accelerator not in ACCELERATORS:
        raise ServeSpecError("accelerator", f"accelerator {accelerator!r} is not allowed; allowed: "
                             f"{', '.join(ACCELERATORS)}")
    if accelerator == "tensorrt" and device != "gpu":
        raise ServeSpecError("accelerator", "'tensorrt' runs on GPUs only; use 'none' on CPU")
    if precision == "int8" and device != "cpu":
        raise ServeSpecError("precision", "'int8' is ONNX Runtime's dynamic quantization for CPUs; on GPUs use "
                             "'fp16' with the 'tensorrt' accelerator")
    if precision == "fp16" and accelerator != "tensorrt":
        raise ServeSpecError("precision", "'fp16' is TensorRT's FP16 mode: set the accelerator to 'tensorrt' "
                             "(GPU only)")
    if top_k < 1 or (vocab_size and top_k > vocab_size):
        bound = f"1 to the vocabulary size {vocab_size}" if vocab_size else "1 or more"
        raise ServeSpecError("topK", f"top-k {top_k} is out of range; use {bound}")


def gpu_refusal(environment: str, pool_roles: Iterable[str]) -> str:
    """Why a stack cannot serve on GPUs, or "" where it can: the smb stack is CPU-only by
    design, and GPU pods need a node pool with role 'inference' to land on."""
    if environment == "smb":
        return "the smb stack is CPU-only; use 'cpu' (ONNX Runtime on the CPU pool)"
    if "inference" not in set(pool_roles):
        return "GPU serving needs a node pool with role 'inference' and this stack has none; use 'cpu'"
    return ""


def model_name_problem(name: str) -> str:
    return (f"model name {name!r} is not servable: use 1-63 letters, digits, '_', '-' or '.', starting and "
            "ending with a letter or digit (it is a directory, a URL path segment and a Kubernetes label value)")


def check_serving(
    *,
    model_name: str,
    device: str,
    max_batch_size: int,
    preferred_batch_sizes: tuple[int, ...] | list[int],
    max_queue_delay_microseconds: int,
    instance_count: int,
    keep_versions: int,
    gpu_allowed: bool = True,
    gpu_refusal: str = "",
) -> None:
    """Raise ServeSpecError for the first setting Triton (or this platform) would refuse.

    The batching rules are the ones Triton's own model-config validation applies, checked
    here so a mistake fails at export or preview time rather than as an UNAVAILABLE model
    in the cluster.
    """
    if not MODEL_NAME_PATTERN.fullmatch(model_name or ""):
        raise ServeSpecError("modelName", model_name_problem(model_name))
    if device not in DEVICES:
        raise ServeSpecError("device", f"device {device!r} is not allowed; allowed: {', '.join(DEVICES)}")
    if device == "gpu" and not gpu_allowed:
        raise ServeSpecError("device", f"'gpu' is not available: {gpu_refusal or 'no GPU node pool'}")
    if max_batch_size < 1:
        raise ServeSpecError(
            "maxBatchSize", f"max batch size {max_batch_size} must be at least 1 for dynamic batching"
        )
    _within_triton("maxBatchSize", f"max batch size {max_batch_size}", max_batch_size, INT32_MAX)
    if not preferred_batch_sizes:
        raise ServeSpecError("preferredBatchSizes", "preferred batch sizes must list at least one size")
    for size in preferred_batch_sizes:
        if size < 1:
            raise ServeSpecError("preferredBatchSizes", f"preferred batch size {size} must be positive")
        if size > max_batch_size:
            raise ServeSpecError(
                "preferredBatchSizes",
                f"preferred batch size {size} is above the max batch size {max_batch_size}; "
                f"use sizes from 1 to {max_batch_size}",
            )
    if len(set(preferred_batch_sizes)) != len(preferred_batch_sizes):
        raise ServeSpecError(
            "preferredBatchSizes", f"preferred batch sizes {list(preferred_batch_sizes)} repeat a size"
        )
    if max_queue_delay_microseconds < 0:
        raise ServeSpecError(
            "maxQueueDelayMicroseconds",
            f"max queue delay {max_queue_delay_microseconds} us is below zero; use 0 or more microseconds",
        )
    _within_triton("maxQueueDelayMicroseconds", f"max queue delay {max_queue_delay_microseconds} us",
                   max_queue_delay_microseconds, UINT64_MAX)
    if instance_count < 1:
        raise ServeSpecError("instanceCount", f"instance count {instance_count} must be at least 1")
    _within_triton("instanceCount", f"instance count {instance_count}", instance_count, INT32_MAX)
    if keep_versions < 1:
        raise ServeSpecError(
            "keepVersions", f"keep versions {keep_versions} must be at least 1 (the version being served)"
        )
    _within_triton("keepVersions", f"keep versions {keep_versions}", keep_versions, INT32_MAX)


def _within_triton(key: str, setting: str, value: int, limit: int) -> None:
    """Triton stores the setting in a fixed-width integer; `setting` names it with its value."""
    if value > limit:
        raise ServeSpecError(key, f"{setting} is above Triton's limit {limit}")
