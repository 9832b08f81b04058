"""Tensor, pipeline and data parallelism on CPU (gloo), 2 to 4 processes.

- tensor parallelism (tp=2) and pipeline parallelism (pp=2: 1F1B, and interleaved with two
  stages per rank) each log the single process's losses over 20 steps, same seed and data;
- one optimizer step reduces gradients once however many micro-steps it accumulates
  (DDP and FSDP2), counted by the profiler inside the trainer;
- dropout masks differ between data-parallel ranks;
- the 6.7B preset is built and sharded on the meta device in five layouts;
- FSDP2 with bf16 and fp16 resumes exactly; a dp=2 checkpoint loads into tp=2 and pp=2 and
  is written back equal;
- an elastic job shrinks through every node count its planned global batch admits.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from infra.training_plan import plan_global_batch
from tests.workloads.launch import events, losses, python_module, torchrun
from tests.workloads.test_train_distributed import ok
from workloads.train.shapes import PRESETS
from workloads.train.train import SIMULATED_CRASH_EXIT
from workloads.train.train import main as train_main

pytestmark = pytest.mark.slow

TRAIN = "workloads.train"
# Float sums in another order (sharded matmuls, reduce-scatters) drift apart slowly; measured
# on this model over 20 steps: tp 2.5e-6, pp 2e-7 relative.
LOSS_TOLERANCE = 1e-5


def flags(shards, run_dir, *extra):
    return ["--data", str(shards), "--model", "tiny", "--n-layer", "4", "--precision", "fp32", "--lr", "1e-2",
            "--warmup-steps", "2", "--seed", "11", "--micro-batch", "4", "--grad-accum", "2",
            "--metrics", str(run_dir / "metrics.jsonl"), *extra]


# --- loss equivalence ----------------------------------------------------------------

@pytest.fixture(scope="module")
def single(shards, tmp_path_factory):
    run = tmp_path_factory.mktemp("single")
    ok(python_module(TRAIN, *flags(shards, run, "--max-steps", "20")))
    return losses(run / "metrics.jsonl")


@pytest.mark.parametrize("layout", [("--tp", "2"), ("--pp", "2"), ("--pp", "2", "--pp-schedule", "interleaved")],
                         ids=["tp2", "pp2-1f1b", "pp2-interleaved"])
def test_model_parallel_losses_equal_one_process(shards, tmp_path, single, layout):
    ok(torchrun(2, TRAIN, *flags(shards, tmp_path, "--max-steps", "20", *layout)))
    start = events(tmp_path / "metrics.jsonl", "start")[0]
    assert start["layout"].startswith("dp_replicate=1 dp_shard=1 ") and start["global_batch"] == 8
    assert sorted(losses(tmp_path / "metrics.jsonl")) == list(range(1, 21))
    assert losses(tmp_path / "metrics.jsonl") == pytest.approx(single, rel=LOSS_TOLERANCE)
    assert single[20] < single[1] - 0.5  # it learned: equal curves of a model that learns nothing prove little


# --- inside the process group: collectives, dropout, a 6.7B model on meta --------------

@pytest.fixture(scope="module")
def probe(shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("probe") / "report.json"
    ok(torchrun(4, "tests.workloads.probe", "--data", str(shards), "--out", str(out)))
    return json.loads(out.read_text())


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
@pytest.mark.parametrize("accumulation", [1, 4])
def test_each_step_reduces_each_gradient_exactly_once(probe, strategy, accumulation):
    """One step's gradient reductions are exactly one per DDP bucket (all-reduces beyond
    those of the same step with gradient sync off: its loss) or one reduce-scatter per
    FSDP2-sharded module, with 1 micro-batch or 4: a trainer that never syncs makes none,
    one that syncs every micro-step makes 4 x as many."""
    counts = probe["collectives"]
    key = f"{strategy}/{accumulation}"
    synced, unsynced, expected = counts[f"{key}/sync"], counts[f"{key}/nosync"], counts[f"{key}/expected"]
    assert expected > 0
    if strategy == "ddp":
        op = "c10d::allreduce_"
        assert synced.get(op, 0) - unsynced.get(op, 0) == expected, counts
    else:
        op = "c10d::_reduce_scatter_base_"
        assert synced.get(op, 0) == expected and unsynced.get(op, 0) == 0, counts


def test_dropout_masks_differ_between_data_parallel_ranks(probe):
    ddp = probe["dropout"]["ddp"]
    assert len(set(ddp)) == 4  # same input, same weights: only the masks differ
    tp = probe["dropout"]["tp2"]  # ranks (0, 1) and (2, 3) are tensor-parallel pairs
    assert tp[0] == tp[1] and tp[2] == tp[3] and tp[0] != tp[2]  # a pair's logits are one tensor


def test_7b_class_model_is_sharded_on_meta(probe):
    with torch.device("meta"):
        from workloads.train.model import GPT

        total = GPT(PRESETS["gpt-6.7b"]()).num_params()
    assert 6.6e9 < total < 6.8e9
    meta = probe["meta"]
    for name, ranks in meta.items():
        assert all(r["on_meta"] for r in ranks), name
    # Four ranks hold a quarter each, whatever the layout (pipeline stages hold about half
    # the blocks of each half of the ranks; the last stage's embedding copy is extra).
    for name in ("fsdp", "tp2", "pp2", "tp2-pp2"):
        for rank in meta[name]:
            assert rank["local_elements"] == pytest.approx(total / 4, rel=0.04), name
    for rank in meta["hsdp"]:  # two replicas of a model sharded in two
        assert rank["local_elements"] == pytest.approx(total / 2, rel=0.01)
    qkv = "blocks.0.attn.qkv.weight"
    assert meta["fsdp"][0]["placements"][qkv] == ["S(0)"]
    assert meta["hsdp"][0]["placements"][qkv] == ["R", "S(0)"]
    assert meta["tp2"][0]["placements"][qkv][-1] == "S(0)"  # column-parallel over tp, FSDP over dp
    assert meta["tp2"][0]["placements"]["blocks.0.attn.proj.weight"][-1] == "S(1)"  # row-parallel
    assert [r["stages"] for r in meta["pp2"]] == [[0], [0], [1], [1]]
    first, last = meta["pp2"][0]["placements"], meta["pp2"][2]["placements"]
    assert "wte.weight" in first and "lm_head.weight" not in first and "blocks.15.mlp.fc.weight" in first
    assert "wte.weight" not in last and "lm_head.weight" in last and "blocks.16.mlp.fc.weight" in last


# --- resume: exact with FSDP2 in bf16 and fp16; resharded into other layouts -------------

RESUME = ("--strategy", "fsdp", "--micro-batch", "2", "--dropout", "0.1", "--max-steps", "6",
          "--checkpoint-every", "3", "--keep-checkpoints", "0")


@pytest.fixture(scope="module")
def fsdp_runs(shards, tmp_path_factory):
    """Uninterrupted 2-process FSDP2 runs, checkpointed at step 3, by precision."""
    runs = {}
    for precision in ("bf16", "fp16"):
        run = runs[precision] = tmp_path_factory.mktemp(f"fsdp-{precision}")
        ok(torchrun(2, TRAIN, *flags(shards, run, *RESUME, "--precision", precision,
                                     "--checkpoint-dir", str(run / "ckpt"))))
    return runs


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fsdp_resumes_exactly(shards, tmp_path, fsdp_runs, precision):
    reference = fsdp_runs[precision]
    (tmp_path / "ckpt").mkdir()
    shutil.copytree(reference / "ckpt" / "step_00000003", tmp_path / "ckpt" / "step_00000003")
    ok(torchrun(2, TRAIN, *flags(shards, tmp_path, *RESUME, "--precision", precision,
                                 "--checkpoint-dir", str(tmp_path / "ckpt"))))
    expected = losses(reference / "metrics.jsonl")
    assert losses(tmp_path / "metrics.jsonl") == {s: expected[s] for s in (4, 5, 6)}  # bit for bit


def full_state(checkpoint, into):
    dcp_to_torch_save(checkpoint, into)
    return torch.load(into, weights_only=False)


def reshard(shards, saved, out, *layout) -> dict:
    """The checkpoint loaded into `layout` (fp32) and saved again under out/again; the loss
    and gradient norm of one pass of the loaded model."""
    ok(torchrun(2, "tests.workloads.reshard", "--checkpoint", str(saved), "--resaved", str(out / "again"),
                "--step-out", str(out / "step.json"), "--",
                *flags(shards, out, "--strategy", "fsdp", "--precision", "fp32", "--dropout", "0.1", *layout)))
    return json.loads((out / "step.json").read_text())


@pytest.fixture(scope="module")
def source_pass(shards, fsdp_runs, tmp_path_factory):
    """The pass in the checkpoint's own layout (dp=2, 2 samples each: the same 4 samples)."""
    return reshard(shards, fsdp_runs["bf16"] / "ckpt" / "step_00000003", tmp_path_factory.mktemp("source"),
                   "--micro-batch", "2")


@pytest.mark.parametrize("layout", [("--tp", "2"), ("--pp", "2")], ids=["tp2", "pp2"])
def test_checkpoint_reshards_into_another_layout(shards, tmp_path, fsdp_runs, source_pass, layout):
    """A dp=2 checkpoint loaded into tp=2 (or pp=2) and written straight back is the same
    checkpoint: model, optimizer, scheduler and progress, tensor for tensor; and the loaded
    model computes what it computed in its own layout: the same loss and gradient norm on
    the same batch, forward and backward."""
    saved = fsdp_runs["bf16"] / "ckpt" / "step_00000003"
    step = reshard(shards, saved, tmp_path, "--micro-batch", "4", *layout)
    assert step["loss"] == pytest.approx(source_pass["loss"], rel=1e-5)
    assert step["grad_norm"] == pytest.approx(source_pass["grad_norm"], rel=1e-4)
    before = full_state(saved, tmp_path / "before.pt")
    after = full_state(tmp_path / "again" / "step_00000003", tmp_path / "after.pt")
    assert before["progress"] == after["progress"] and before["scheduler"] == after["scheduler"]
    for section in ("model", "optim"):
        assert set(before[section]) == set(after[section]), section
        for key, value in before[section].items():
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(after[section][key], value, rtol=0, atol=0, msg=key)
            else:
                assert after[section][key] == value, key


# --- elastic: every node count the planned batch admits -------------------------------

def test_elastic_job_shrinks_through_every_admitted_count(shards, tmp_path):
    """A job planned for 1 to 3 nodes (one process each here) gets the batch every count
    keeps; run at 3, it loses a node at step 2 and another at step 4, and logs the losses
    of the run that never shrank."""
    batch = plan_global_batch(None, micro_batch=2, gpus_per_node=1, min_nodes=1, nodes=3)
    assert batch == 12
    common = ("--micro-batch", "2", "--global-batch", str(batch), "--max-steps", "6", "--checkpoint-every", "2",
              "--keep-checkpoints", "0", "--strategy", "fsdp")
    whole = tmp_path / "whole"
    ok(torchrun(3, TRAIN, *flags(shards, whole, *common, "--checkpoint-dir", str(whole / "ckpt"))))
    shrunk = tmp_path / "shrunk"
    (shrunk / "ckpt").mkdir(parents=True)
    shutil.copytree(whole / "ckpt" / "step_00000002", shrunk / "ckpt" / "step_00000002")
    lost_another = torchrun(2, TRAIN, *flags(shards, shrunk, *common, "--checkpoint-dir", str(shrunk / "ckpt"),
                                             "--stop-after-step", "4"))
    assert f"exitcode  : {SIMULATED_CRASH_EXIT}" in lost_another.stderr, lost_another.stderr[-2000:]
    ok(torchrun(1, TRAIN, *flags(shards, shrunk, *common, "--checkpoint-dir", str(shrunk / "ckpt"))))
    starts = events(shrunk / "metrics.jsonl", "start")
    assert [(s["world_size"], s["grad_accum"], s["global_batch"]) for s in starts] == [(2, 3, 12), (1, 6, 12)]
    expected = losses(whole / "metrics.jsonl")
    assert losses(shrunk / "metrics.jsonl") == pytest.approx({s: expected[s] for s in range(3, 7)},
                                                              rel=LOSS_TOLERANCE)


# --- layouts the world or the model cannot take ----------------------------------------

@pytest.mark.parametrize("extra, world, message", [
    (("--n-head", "12", "--n-embd", "96", "--vocab-size", "258", "--tp", "3"), "2",
     "train: error: tp 3 x pp 1 x dp_replicate 1 = 3 does not divide the world size 2; choose sizes whose "
     "product divides it"),
    (("--pp", "3"), "3",
     "train: error: pp 3 (1f1b) makes 3 pipeline stages but the model has 2 layers; every stage needs at least "
     "one, so choose pp <= 2"),
    (("--tp", "2", "--n-head", "3", "--n-embd", "96"), "2",
     "train: error: tp 2 does not divide attention heads (3); tensor parallelism splits them evenly, so choose a tp "
     "that divides 3"),
    (("--pp", "2", "--grad-accum", "1"), "2",
     "train: error: pp 2 needs at least 2 micro-batches per step to fill the pipeline, and the step has 1; raise "
     "the global batch or gradient accumulation"),
], ids=["tp-world", "pp-layers", "tp-heads", "pp-micro-batches"])
def test_impossible_layout_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, extra, world, message):
    """Checked before any process group forms, from the world size torchrun gives each
    worker (the trainer's main, in this process: no group is started)."""
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("RANK", "0")
    assert train_main(["--data", str(tmp_path), "--model", "tiny", *extra]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not any(tmp_path.iterdir())  # nothing written


def test_only_rank_zero_says_why(tmp_path):
    """The same refusal from a worker other than rank 0, as torchrun starts it: exit 2, silent."""
    done = python_module(TRAIN, "--data", str(tmp_path), "--model", "tiny", "--pp", "3",
                         env={"WORLD_SIZE": "3", "RANK": "1"})
    assert done.returncode == 2 and done.stderr == ""
