"""The acceptance runs: torchrun with 2 processes on CPU (gloo).

- the loss falls on synthetic shards;
- 2 processes with half the batch each end with the weights of 1 process with the whole;
- a run killed after a checkpoint and resumed logs the losses of an uninterrupted run,
  step for step (dropout on, so the random streams must be restored too);
- FSDP2 (`fully_shard`) trains to the same weights as DDP.

Elastic shrinks and resharding between layouts: tests/workloads/test_parallel.py.
"""

from __future__ import annotations


import pytest
import torch

from tests.workloads.launch import events, losses, python_module, torchrun
from tests.workloads.test_train_single import WEIGHT_TOLERANCE
from workloads.train.checkpoint import load_for_inference
from workloads.train.train import SIMULATED_CRASH_EXIT

pytestmark = pytest.mark.slow

TRAIN = "workloads.train"


def common(shards, run_dir, *extra):
    return ["--data", str(shards), "--model", "tiny", "--precision", "fp32", "--lr", "1e-2", "--warmup-steps", "2",
            "--seed", "11", "--metrics", str(run_dir / "metrics.jsonl"), "--checkpoint-dir", str(run_dir / "ckpt"),
            *extra]


def ok(proc):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


# --- loss falls; kill and resume ---------------------------------------------------

RESUME_ARGS = ("--micro-batch", "4", "--grad-accum", "2", "--dropout", "0.1", "--max-steps", "30",
               "--checkpoint-every", "4", "--keep-checkpoints", "0")


@pytest.fixture(scope="module")
def uninterrupted(shards, tmp_path_factory):
    run = tmp_path_factory.mktemp("uninterrupted")
    ok(torchrun(2, TRAIN, *common(shards, run, *RESUME_ARGS)))
    return run


@pytest.fixture(scope="module")
def killed_and_resumed(shards, tmp_path_factory):
    run = tmp_path_factory.mktemp("resumed")
    killed = torchrun(2, TRAIN, *common(shards, run, *RESUME_ARGS, "--stop-after-step", "6"))
    steps_before = sorted(losses(run / "metrics.jsonl"))
    checkpoints = sorted(p.name for p in (run / "ckpt").iterdir())
    resumed = ok(torchrun(2, TRAIN, *common(shards, run, *RESUME_ARGS)))
    return run, killed, steps_before, checkpoints, resumed


def test_loss_falls(uninterrupted):
    curve = losses(uninterrupted / "metrics.jsonl")
    assert sorted(curve) == list(range(1, 31))
    first, last = sum(curve[s] for s in range(1, 6)) / 5, sum(curve[s] for s in range(26, 31)) / 5
    assert first > 5.0  # about ln(256): a fresh model guesses uniformly
    assert last < first - 1.0, curve


def test_start_event_describes_the_run(uninterrupted):
    start = events(uninterrupted / "metrics.jsonl", "start")[0]
    assert start["world_size"] == 2 and start["global_batch"] == 16 and start["grad_accum"] == 2
    assert start["resumed_from"] is None
    step = events(uninterrupted / "metrics.jsonl", "step")[-1]
    assert step["tokens_per_s"] > 0 and step["step_time_s"] > 0 and step["mfu"] is None  # no GPU, no peak


def test_killed_run_died_after_its_checkpoint(killed_and_resumed):
    _, killed, steps_before, checkpoints, _ = killed_and_resumed
    assert killed.returncode != 0
    assert f"exitcode  : {SIMULATED_CRASH_EXIT}" in killed.stderr  # torchrun's failure report
    assert steps_before == [1, 2, 3, 4, 5, 6]
    assert checkpoints == ["step_00000004"]


def test_resumed_losses_equal_the_uninterrupted_run(uninterrupted, killed_and_resumed):
    run = killed_and_resumed[0]
    starts = events(run / "metrics.jsonl", "start")
    assert starts[1]["resumed_from"].endswith("step_00000004") and starts[1]["step"] == 4
    resumed = [r for r in events(run / "metrics.jsonl", "step")][6:]  # the lines after the restart
    reference = losses(uninterrupted / "metrics.jsonl")
    assert [r["step"] for r in resumed] == list(range(5, 31))
    assert {r["step"]: r["loss"] for r in resumed} == {s: reference[s] for s in range(5, 31)}


# --- 2 x half batch == 1 x full batch; FSDP2 == DDP ------------------------------------

EQUIV_ARGS = ("--max-steps", "8", "--checkpoint-every", "4", "--keep-checkpoints", "0")


@pytest.fixture(scope="module")
def one_process(shards, tmp_path_factory):
    run = tmp_path_factory.mktemp("one")
    ok(python_module(TRAIN, *common(shards, run, "--micro-batch", "8", *EQUIV_ARGS)))
    return run


@pytest.fixture(scope="module")
def two_processes(shards, tmp_path_factory):
    run = tmp_path_factory.mktemp("two")
    ok(torchrun(2, TRAIN, *common(shards, run, "--micro-batch", "4", *EQUIV_ARGS)))
    return run


def weights(run, step=None):
    path = run / "ckpt" / f"step_{step:08d}" if step else run / "ckpt"
    return load_for_inference(path)[0].state_dict()


def test_two_half_batches_equal_one_full_batch(one_process, two_processes):
    assert events(two_processes / "metrics.jsonl", "start")[0]["world_size"] == 2
    assert losses(two_processes / "metrics.jsonl") == pytest.approx(losses(one_process / "metrics.jsonl"), rel=1e-5)
    torch.testing.assert_close(weights(two_processes), weights(one_process), **WEIGHT_TOLERANCE)


def test_fsdp2_trains_like_ddp(shards, tmp_path, two_processes):
    ok(torchrun(2, TRAIN, *common(shards, tmp_path, "--micro-batch", "4", "--strategy", "fsdp", *EQUIV_ARGS)))
    assert events(tmp_path / "metrics.jsonl", "start")[0]["strategy"] == "fsdp"
    assert losses(tmp_path / "metrics.jsonl") == pytest.approx(losses(two_processes / "metrics.jsonl"), rel=1e-5)
    # The sharded checkpoint loads into a plain model like a DDP one.
    torch.testing.assert_close(weights(tmp_path), weights(two_processes), **WEIGHT_TOLERANCE)
