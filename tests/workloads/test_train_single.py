"""One-process runs of the trainer, in this process: precisions, accumulation, clipping."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.workloads.launch import events, losses
from workloads.train.checkpoint import load_for_inference
from workloads.train.data import generate_synthetic_shards
from workloads.train.train import lr_schedule, main


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread, as the torchrun tests use: on a busy 2-core machine two
    spinning OpenMP threads make a tiny model's step 50 times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("shards")
    generate_synthetic_shards(directory, num_shards=2, tokens_per_shard=20000, vocab_size=256, seed=0)
    return directory


# Float tolerance for weights after a few AdamW steps at lr 1e-2. Summing a gradient in
# two halves rounds differently; Adam moves every weight by about lr per step whatever
# its gradient's size, so where a gradient is near zero that rounding shows up as a
# fraction of lr. atol is 1% of one step's lr.
WEIGHT_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}


def train(shards, tmp_path, *extra):
    metrics = tmp_path / "metrics.jsonl"
    args = ["--data", str(shards), "--model", "tiny", "--lr", "1e-2", "--seed", "3", "--metrics", str(metrics),
            "--checkpoint-dir", str(tmp_path / "ckpt"), *extra]
    assert main(args) == 0
    return metrics


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains(shards, tmp_path, precision):
    curve = losses(train(shards, tmp_path, "--precision", precision, "--micro-batch", "8", "--max-steps", "12"))
    assert all(math.isfinite(v) for v in curve.values())
    assert curve[12] < curve[1] - 0.3


def test_fp16_checkpoint_carries_the_grad_scaler(shards, tmp_path):
    import torch.distributed.checkpoint as dcp

    train(shards, tmp_path, "--precision", "fp16", "--micro-batch", "4", "--max-steps", "2")
    keys = dcp.FileSystemReader(str(tmp_path / "ckpt" / "step_00000002")).read_metadata().state_dict_metadata
    assert "scaler.scale" in keys and "scheduler.last_epoch" in keys and "progress.samples_seen" in keys


def test_ddp_fp16_steps_with_the_fused_adamw_a_gpu_gets(shards, monkeypatch):
    """On a GPU, DDP takes the fused AdamW, and fp16 the gradient scaler; under torchrun
    (a process group, even of one) the two must step together. The same pairing on this
    CPU: the trainer's optimizer made fused, in a one-process gloo group."""
    import torch.distributed as dist

    from workloads.train import train as trainer_module
    from workloads.train.data import ShardedTokens

    made = trainer_module.make_optimizer
    monkeypatch.setattr(trainer_module, "make_optimizer", lambda model, args, fused: made(model, args, fused=True))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        args = trainer_module.build_parser().parse_args(
            ["--data", str(shards), "--model", "tiny", "--precision", "fp16", "--micro-batch", "2", "--max-steps", "3"])
        trainer = trainer_module.Trainer(args, trainer_module.Runtime(0, 0, 1, torch.device("cpu"), True))
        assert all(group["fused"] for o in trainer.optimizers for group in o.param_groups)
        before = [p.detach().clone() for p in trainer.parallel.parameters()]
        tokens = ShardedTokens(str(shards), trainer.seq_len, seed=1)
        losses = [trainer.train_step(tokens)[0] for _ in range(3)]
    finally:
        dist.destroy_process_group()
    assert all(math.isfinite(v) for v in losses)
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.parallel.parameters()))


def test_accumulation_equals_the_larger_batch(shards, tmp_path):
    """4 samples x 2 accumulated micro-batches is one step over the same 8 samples."""
    big = train(shards, tmp_path / "a", "--precision", "fp32", "--micro-batch", "8", "--max-steps", "4")
    accum = train(shards, tmp_path / "b", "--precision", "fp32", "--micro-batch", "4", "--grad-accum", "2",
                  "--max-steps", "4")
    assert losses(big) == pytest.approx(losses(accum), rel=1e-5)
    a, _ = load_for_inference(tmp_path / "a" / "ckpt")
    b, _ = load_for_inference(tmp_path / "b" / "ckpt")
    torch.testing.assert_close(a.state_dict(), b.state_dict(), **WEIGHT_TOLERANCE)


def test_gradient_clipping_bounds_the_update(shards, tmp_path):
    """Clipped to a norm of 1e-9 the weights barely move, unlike in an unclipped run."""
    initial = train(shards, tmp_path / "z", "--precision", "fp32", "--micro-batch", "4", "--max-steps", "1",
                    "--lr", "0", "--weight-decay", "0")  # lr 0: the checkpoint holds the initial weights
    train(shards, tmp_path / "c", "--precision", "fp32", "--micro-batch", "4", "--max-steps", "3",
          "--grad-clip", "1e-9", "--lr", "1e-5", "--weight-decay", "0")
    train(shards, tmp_path / "f", "--precision", "fp32", "--micro-batch", "4", "--max-steps", "3",
          "--grad-clip", "0", "--lr", "1e-5", "--weight-decay", "0")
    assert events(initial, "checkpoint")[0]["step"] == 1
    start, _ = load_for_inference(tmp_path / "z" / "ckpt")
    c, _ = load_for_inference(tmp_path / "c" / "ckpt")
    f, _ = load_for_inference(tmp_path / "f" / "ckpt")

    def moved(model):  # mean absolute change of the weights
        deltas = [(p - q).abs().flatten() for p, q in zip(model.parameters(), start.parameters())]
        return torch.cat(deltas).mean().item()

    # Adam divides by the root of the second moment, so an unclipped weight moves by about
    # lr per step; clipped gradients (elements around 1e-12) are far below Adam's eps
    # (1e-8), and the update shrinks by that ratio.
    assert moved(f) > 1e-5
    assert moved(c) < 0.01 * moved(f)


def test_learning_rate_warms_up_then_decays():
    factor = lr_schedule(warmup_steps=4, max_steps=20, min_ratio=0.1)
    assert [factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert factor(4) == 1.0
    assert factor(20) == pytest.approx(0.1)
    assert factor(100) == pytest.approx(0.1)
    assert all(factor(s) >= factor(s + 1) for s in range(4, 20))


def test_synthetic_shards_are_written_when_the_data_directory_is_empty(tmp_path):
    data = tmp_path / "data"
    metrics = tmp_path / "m.jsonl"
    assert main(["--data", str(data), "--synthetic-tokens", "40000", "--model", "tiny", "--precision", "fp32",
                 "--micro-batch", "4", "--max-steps", "2", "--metrics", str(metrics)]) == 0
    # The shards and their dataset version, which the run recorded.
    assert sorted(p.name for p in data.iterdir()) == ["dataset.json", *(f"shard_{k:05d}.bin" for k in range(4))]
    start = json.loads(metrics.read_text().splitlines()[0])
    assert start["dataset"] == json.loads((data / "dataset.json").read_text())["id"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging directory left
    assert sorted(losses(metrics)) == [1, 2]
