"""Checkpoint -> ONNX with dynamic batch and sequence axes, equal to PyTorch within 1e-4."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from workloads.serve.export import PARITY_ATOL, ParityError, check_parity, export_checked, ort_session
from tests.workloads.serve.conftest import CONTEXT, VOCAB


def test_graph_has_dynamic_batch_and_sequence_axes(exported):
    graph = onnx.load(str(exported.path)).graph
    [inp], [out] = graph.input, graph.output
    assert (inp.name, out.name) == ("input_ids", "logits")
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    in_dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    out_dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    assert in_dims == ["batch", "sequence"]
    assert out_dims == ["batch", "sequence", VOCAB]
    # A model this small is one self-contained file, as Triton's repository layout expects.
    assert [p.name for p in exported.files] == ["model.onnx"]


@pytest.mark.parametrize("batch, length", [(1, 1), (5, 33), (32, CONTEXT)])
def test_onnxruntime_matches_pytorch_at_any_batch_and_length(tiny_gpt, exported, batch, length):
    model, _ = tiny_gpt
    ids = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        expected = model(ids).numpy()
    (got,) = ort_session(exported.path).run(["logits"], {"input_ids": ids.numpy()})
    assert got.shape == (batch, length, VOCAB) and got.dtype == np.float32
    assert np.max(np.abs(got - expected)) <= PARITY_ATOL
    assert exported.max_abs_diff <= PARITY_ATOL


def test_export_from_the_trainers_checkpoint(checkpoint_root, tiny_gpt, tmp_path):
    from workloads.train.checkpoint import load_for_inference

    model, config = load_for_inference(checkpoint_root)
    result = export_checked(model, tmp_path / "model.onnx", vocab_size=config.vocab_size,
                            max_sequence=config.block_size)
    assert result.max_abs_diff <= PARITY_ATOL
    # The checkpoint holds the same weights as the model it was saved from.
    ids = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(ids), tiny_gpt[0](ids))


def test_parity_check_catches_a_different_model(tiny_gpt, exported):
    from workloads.train.model import GPT

    other = GPT(tiny_gpt[1])  # fresh weights: not what was exported
    with pytest.raises(ParityError, match=r"ONNX Runtime differs from PyTorch by .* \(> 0.0001\) at batch 1"):
        check_parity(other, exported.path, vocab_size=VOCAB, max_sequence=CONTEXT)
