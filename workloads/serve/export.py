"""Export a token-id -> logits model to ONNX and prove ONNX Runtime computes the same thing.

The graph keeps the batch and sequence axes dynamic, so Triton's dynamic batcher can stack
requests of any batch size and clients may send any length up to the model's context.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from workloads.serve.spec import INPUT_NAME, OUTPUT_NAME

# fp32 parity the issue asks for between PyTorch and ONNX Runtime.
PARITY_ATOL = 1e-4
# Above this many bytes of weights the graph is written with its weights in a side file:
# a single ONNX protobuf cannot exceed 2 GiB.
EXTERNAL_DATA_BYTES = 1 << 30
# Shapes the parity check runs: single token, odd sizes, and a full batch.
PARITY_SHAPES = ((1, 1), (3, 7), (8, 16))


class ParityError(Exception):
    """ONNX Runtime's answer differs from PyTorch's by more than the tolerance."""


@dataclass(frozen=True)
class ExportResult:
    path: Path
    files: tuple[Path, ...]  # the graph and, for large models, its external weights
    max_abs_diff: float


def parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def export_onnx(model: torch.nn.Module, path: Path, *, vocab_size: int, max_sequence: int) -> list[Path]:
    """Write `model` to `path` as ONNX with dynamic batch and sequence axes.

    `max_sequence` bounds the sequence axis (a learned position table has that many rows);
    the example input stays above 1 on both axes so the exporter does not specialise them.
    """
    model = model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    example_len = max(2, min(8, max_sequence))
    example = torch.randint(0, vocab_size, (2, example_len), dtype=torch.int64)
    batch = torch.export.Dim("batch", min=1)
    sequence = torch.export.Dim("sequence", min=1, max=max_sequence)
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    # The exporter logs each optional operator library it does not find (torchvision) and
    # uses a deprecated pytree API itself: nothing the caller can act on.
    exporter_log.setLevel(logging.ERROR)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            program = torch.onnx.export(
                model,
                (example,),
                dynamo=True,
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_shapes=({0: batch, 1: sequence},),
                verbose=False,
            )
    finally:
        exporter_log.setLevel(level)
    external = parameter_bytes(model) > EXTERNAL_DATA_BYTES
    program.save(path, external_data=external)
    return sorted(p for p in path.parent.iterdir() if p.name == path.name or p.name.startswith(path.name + "."))


def ort_session(path: Path, *, intra_op_threads: int = 0):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def check_parity(
    model: torch.nn.Module,
    path: Path,
    *,
    vocab_size: int,
    max_sequence: int,
    shapes: tuple[tuple[int, int], ...] = PARITY_SHAPES,
    atol: float = PARITY_ATOL,
    seed: int = 0,
) -> float:
    """Largest absolute difference between PyTorch and ONNX Runtime logits over `shapes`
    (each (batch, sequence), clipped to the model's context); ParityError above `atol`."""
    session = ort_session(path)
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    model = model.eval()
    for batch, length in shapes:
        length = min(length, max_sequence)
        ids = torch.randint(0, vocab_size, (batch, length), dtype=torch.int64, generator=generator)
        with torch.no_grad():
            expected = model(ids).float().numpy()
        (got,) = session.run([OUTPUT_NAME], {INPUT_NAME: ids.numpy()})
        if got.shape != expected.shape:
            raise ParityError(f"ONNX output shape {got.shape} differs from PyTorch's {expected.shape}")
        diff = float(np.max(np.abs(got - expected)))
        worst = max(worst, diff)
        if not diff <= atol:  # also catches NaN
            raise ParityError(
                f"ONNX Runtime differs from PyTorch by {diff:.3g} (> {atol:g}) at batch {batch}, sequence {length}"
            )
    return worst


def export_checked(model: torch.nn.Module, path: Path, *, vocab_size: int, max_sequence: int) -> ExportResult:
    """Export, then check parity; the files are removed again if parity fails."""
    files = export_onnx(model, path, vocab_size=vocab_size, max_sequence=max_sequence)
    try:
        diff = check_parity(model, path, vocab_size=vocab_size, max_sequence=max_sequence)
    except ParityError:
        for file in files:
            file.unlink(missing_ok=True)
        raise
    return ExportResult(path=path, files=tuple(files), max_abs_diff=diff)
