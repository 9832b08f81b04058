"""Metrics lines and model FLOPs utilisation."""

from __future__ import annotations

import io
import json

import pytest

from workloads.train.metrics import (
    PEAK_TFLOPS_ENV,
    MetricsWriter,
    model_flops_utilisation,
    read_metrics,
    resolve_peak_tflops,
)


def test_mfu_is_achieved_over_peak_flops():
    # 8 GPUs at 989 TFLOPS peak; 1e6 tokens/s at 3.9e9 FLOPs per token -> 3.9e15 FLOP/s.
    mfu = model_flops_utilisation(1e6, 3.9e9, num_gpus=8, peak_tflops=989.0)
    assert mfu == pytest.approx(3.9e15 / (8 * 989e12))


def test_no_peak_no_mfu():
    assert model_flops_utilisation(1e6, 3.9e9, 8, None) is None


def test_peak_comes_from_flag_then_environment_then_catalog(monkeypatch):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    assert resolve_peak_tflops(None, None) is None
    assert resolve_peak_tflops(None, "h100") == 989.0  # infra/catalog.py: H100 dense BF16
    assert resolve_peak_tflops(None, "p4d.24xlarge") == 312.0  # by instance type: A100
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "500")
    assert resolve_peak_tflops(None, "h100") == 500.0
    assert resolve_peak_tflops(123.0, "h100") == 123.0


def test_writer_appends_json_lines(tmp_path):
    path = tmp_path / "m" / "metrics.jsonl"
    out = io.StringIO()
    writer = MetricsWriter(path, stream=out)
    writer.write("step", step=1, loss=2.5)
    writer.close()
    MetricsWriter(path, echo=False).write("step", step=2, loss=float("nan"))  # a resumed run appends
    assert read_metrics(path) == [{"event": "step", "step": 1, "loss": 2.5}, {"event": "step", "step": 2, "loss": "nan"}]
    assert json.loads(out.getvalue()) == {"event": "step", "step": 1, "loss": 2.5}
