"""Training metrics as JSON lines, and model FLOPs utilisation (MFU)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, TextIO

PEAK_TFLOPS_ENV = "MLPLAT_GPU_PEAK_TFLOPS"


def model_flops_utilisation(
    tokens_per_s: float, flops_per_token: float, num_gpus: int, peak_tflops: float | None
) -> float | None:
    """Achieved model FLOPs over the GPUs' peak dense FLOPs, in [0, 1]; None without a peak."""
    if not peak_tflops or num_gpus < 1:
        return None
    return tokens_per_s * flops_per_token / (num_gpus * peak_tflops * 1e12)


def resolve_peak_tflops(peak_tflops: float | None, gpu_model: str | None) -> float | None:
    """The per-GPU peak dense BF16 TFLOPS that MFU is measured against: the flag, else the
    environment (the TrainingJob sets it from the instance catalog), else the catalog's
    entry for `gpu_model` (a GPU such as "h100", or an instance type such as "p5.48xlarge")."""
    if peak_tflops:
        return peak_tflops
    if os.environ.get(PEAK_TFLOPS_ENV):
        return float(os.environ[PEAK_TFLOPS_ENV])
    if gpu_model:
        return catalog_peak_tflops(gpu_model)
    return None


def catalog_peak_tflops(name: str) -> float:
    from infra import catalog  # pure data, no Pulumi; on the images beside workloads/

    wanted = name.strip().lower()
    for it in catalog.CATALOG.values():
        if it.gpu is not None and it.gpu.model == wanted:
            return it.gpu.bf16_tflops
    it = catalog.lookup(wanted)
    if it.gpu is None:
        raise ValueError(f"{name} has no GPU")
    return it.gpu.bf16_tflops


class MetricsWriter:
    """Writes one JSON object per line to a file (appending, so a resumed run continues
    the same file) and, optionally, to stdout. Only rank 0 should hold one."""

    def __init__(self, path: str | Path | None, echo: bool = True, stream: TextIO | None = None) -> None:
        self._file = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", buffering=1)
        self._echo = echo
        self._stream = stream or sys.stdout

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **{k: _finite(v) for k, v in fields.items()}}, sort_keys=False)
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())  # a killed run keeps every line it reported
        if self._echo:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _finite(value: Any) -> Any:
    # JSON has no NaN or infinity; a diverged loss is reported as the string "nan" or "inf".
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def read_metrics(path: str | Path, event: str = "step") -> list[dict[str, Any]]:
    lines = Path(path).read_text().splitlines()
    return [record for record in map(json.loads, filter(None, lines)) if record.get("event") == event]
