"""Checkpoint directories: atomic, pruned, and loadable for inference without a process
group. (Resuming a distributed run exactly is tested in test_train_distributed.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from workloads.train import checkpoint as ckpt
from workloads.train.model import GPT, GPTConfig


def save_model(root, step, seed=0, keep=0):
    torch.manual_seed(seed)
    config = GPTConfig.tiny()
    model = GPT(config)
    path = ckpt.save(root, step, {"model": model.state_dict()}, {"model": config.to_dict()}, keep=keep)
    return model, path


def test_save_writes_a_complete_directory_and_no_temporary(tmp_path):
    _, path = save_model(tmp_path, 7)
    assert path == tmp_path / "step_00000007"
    assert (path / ".metadata").is_file()
    assert json.loads((path / "config.json").read_text())["step"] == 7
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000007"]


def test_incomplete_checkpoints_are_ignored(tmp_path):
    save_model(tmp_path, 4)
    # A run killed while writing step 8 leaves its temporary directory behind...
    (tmp_path / ".tmp-step_00000008").mkdir()
    (tmp_path / ".tmp-step_00000008" / "__0_0.distcp").write_bytes(b"partial")
    # ...and directories without DCP metadata or without config.json are not checkpoints.
    (tmp_path / "step_00000012").mkdir()
    (tmp_path / "step_00000012" / "config.json").write_text("{}")
    (tmp_path / "step_00000016").mkdir()
    (tmp_path / "step_00000016" / ".metadata").write_bytes(b"x")
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step_00000004"


def test_a_stale_temporary_directory_is_replaced(tmp_path):
    stale = tmp_path / ".tmp-step_00000003"
    stale.mkdir()
    (stale / "junk.distcp").write_bytes(b"old")
    _, path = save_model(tmp_path, 3)
    assert not stale.exists()
    assert not (path / "junk.distcp").exists()


def test_keep_prunes_the_oldest(tmp_path):
    for step in (1, 2, 3, 4):
        save_model(tmp_path, step, keep=2)
    assert [p.name for p in ckpt.complete_checkpoints(tmp_path)] == ["step_00000003", "step_00000004"]


def test_saving_a_step_again_replaces_it(tmp_path):
    save_model(tmp_path, 5, seed=1)
    model, _ = save_model(tmp_path, 5, seed=2)
    loaded, _ = ckpt.load_for_inference(tmp_path)
    torch.testing.assert_close(loaded.state_dict(), model.state_dict())


def test_load_for_inference_takes_the_latest(tmp_path):
    save_model(tmp_path, 1, seed=1)
    newest, _ = save_model(tmp_path, 2, seed=2)
    model, config = ckpt.load_for_inference(tmp_path)
    assert config == GPTConfig.tiny()
    assert not model.training
    torch.testing.assert_close(model.state_dict(), newest.state_dict())
    assert model.lm_head.weight is model.wte.weight  # still tied after loading


def test_load_for_inference_of_a_named_checkpoint(tmp_path):
    first, path = save_model(tmp_path, 1, seed=1)
    save_model(tmp_path, 2, seed=2)
    model, _ = ckpt.load_for_inference(path)
    torch.testing.assert_close(model.state_dict(), first.state_dict())


def test_no_checkpoint_is_an_error(tmp_path):
    (tmp_path / ".tmp-step_00000001").mkdir()
    with pytest.raises(FileNotFoundError, match="no complete checkpoint in"):
        ckpt.load_for_inference(tmp_path)


def test_rng_states_round_trip():
    torch.manual_seed(3)
    saved = ckpt.rng_states()
    expected = torch.rand(4)
    torch.rand(10)
    ckpt.set_rng_states(saved)
    torch.testing.assert_close(torch.rand(4), expected)
