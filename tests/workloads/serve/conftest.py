"""A tiny trained-shape GPT, its checkpoint and its ONNX export, made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

VOCAB, CONTEXT = 256, 64  # GPTConfig.tiny()


@pytest.fixture(scope="session")
def tiny_gpt():
    import torch

    from workloads.train.model import GPT, GPTConfig

    torch.manual_seed(0)
    config = GPTConfig.tiny()
    assert (config.vocab_size, config.block_size) == (VOCAB, CONTEXT)
    return GPT(config).eval(), config


@pytest.fixture(scope="session")
def checkpoint_root(tiny_gpt, tmp_path_factory) -> Path:
    """A real torch.distributed.checkpoint checkpoint, as the trainer writes it."""
    from workloads.train import checkpoint

    model, config = tiny_gpt
    root = tmp_path_factory.mktemp("checkpoints")
    checkpoint.save(root, 100, {"model": model.state_dict()}, {"model": config.to_dict()})
    return root


@pytest.fixture(scope="session")
def exported(tiny_gpt, tmp_path_factory):
    from workloads.serve.export import export_checked

    model, config = tiny_gpt
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    return export_checked(model, path, vocab_size=config.vocab_size, max_sequence=config.block_size)
