"""The trainer's command line (workloads/train/train.py), apart from the trainer: it imports
no torch, so `python -m workloads.train` refuses a bad flag in one line before the seconds a
process takes to import torch (workloads/train/__main__.py)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from workloads import inputs
from workloads.arguments import printable, real, whole
from workloads.train.shapes import PIPELINE_SCHEDULES, PRESETS

DESCRIPTION = "The training loop. Launched by torchrun (c10d rendezvous, elastic node counts):"
EXIT_BAD_INPUT = 2
# Autocast dtypes by name (train.py PRECISIONS maps them to torch's).
PRECISION_NAMES = ("bf16", "fp16", "fp32")

# Bounds of the numbers the command line takes (workloads/arguments.py): each far beyond any
# real run, so only a typo or a hostile value meets one, as one line before anything starts.
MAX_STEPS = 1_000_000_000  # steps, and step intervals
MAX_VOCAB = 10_000_000  # the largest vocabularies in use have about 256,000 tokens
MAX_LAYERS = MAX_HEADS = 1024
MAX_WIDTH = 65536  # n_embd
MAX_TOKENS = 1 << 20  # a block, or a sample: about a million tokens
MAX_RANKS = 65536  # tp, pp, dp-replicate
MAX_BATCH = 65536  # micro-batch samples, micro-batches per step
MAX_GLOBAL_BATCH = 1 << 24
# Synthetic shards are for smoke runs (the platform writes 20,000,000 tokens); they are
# made in memory, about 70 bytes a token.
MAX_SYNTHETIC_TOKENS = 100_000_000
MAX_SEED = 2**32 - 1  # NumPy's and torch's seeds alike
MAX_NAME = 256  # an MLflow run or experiment name


class _Parser(argparse.ArgumentParser):
    """argparse's refusals as every other bad input of the trainer: one line from rank 0
    (every rank parses the same command line), exit 2."""

    def error(self, message: str) -> None:
        self.exit(EXIT_BAD_INPUT, f"train: error: {message}\n" if os.environ.get("RANK", "0") == "0" else None)


def _output(what: str, folder: bool = False) -> Callable[[str], str]:
    """A path the run writes to, checked before anything starts: a FIFO there would block
    the first write forever, a device swallow it (workloads/inputs.py check_output)."""

    def parse(text: str) -> str:
        try:
            inputs.check_output(text, what, folder=folder)
        except inputs.InputError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return text

    parse.__name__ = "path"
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m workloads.train", description=DESCRIPTION)
    data = p.add_argument_group("data")
    # --data's path is the dataset's URI tag in MLflow.
    data.add_argument("--data", required=True, type=printable(4096),
                      help="directory of *.bin token shards (the Lustre mount or local)")
    data.add_argument("--synthetic-tokens", type=whole(0, MAX_SYNTHETIC_TOKENS), default=0, metavar="N",
                      help="if --data holds no shards, first write this many synthetic tokens there (at most "
                           "100,000,000)")
    model = p.add_argument_group("model")
    model.add_argument("--model", choices=sorted(PRESETS), default="gpt2-124m")
    model.add_argument("--vocab-size", type=whole(1, MAX_VOCAB), metavar="N",
                       help="override the preset's vocabulary size (1 to 10,000,000)")
    model.add_argument("--n-layer", type=whole(1, MAX_LAYERS), metavar="N", help="override the preset's depth")
    model.add_argument("--n-head", type=whole(1, MAX_HEADS), metavar="N",
                       help="override the preset's attention heads")
    model.add_argument("--n-embd", type=whole(1, MAX_WIDTH), metavar="N", help="override the preset's width")
    model.add_argument("--block-size", type=whole(1, MAX_TOKENS), metavar="N",
                       help="override the preset's longest sequence")
    model.add_argument("--seq-len", type=whole(1, MAX_TOKENS), metavar="N",
                       help="tokens per sample (default: the preset's block size)")
    model.add_argument("--dropout", type=real(0, 1), default=0.0, metavar="P", help="a fraction, 0 to 1")
    par = p.add_argument_group("parallelism and precision")
    par.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp",
                     help="ddp: replicate the model; fsdp: shard parameters, gradients and optimizer (FSDP2)")
    par.add_argument("--tp", type=whole(1, MAX_RANKS), default=1, metavar="N",
                     help="tensor-parallel ranks (with sequence parallelism); "
                     "within a node")
    par.add_argument("--pp", type=whole(1, MAX_RANKS), default=1, metavar="N", help="pipeline stages' ranks")
    par.add_argument("--dp-replicate", type=whole(1, MAX_RANKS), default=1, metavar="N",
                     help="replicas of the FSDP-sharded model (HSDP: shard within a node, replicate across)")
    par.add_argument("--pp-schedule", choices=PIPELINE_SCHEDULES, default="1f1b",
                     help="1f1b, or interleaved (two stages per rank: a smaller pipeline bubble)")
    par.add_argument("--activation-checkpoint", choices=("none", "selective", "full"), default="none",
                     help="recompute activations in the backward pass: selective keeps matmuls and attention")
    par.add_argument("--precision", choices=PRECISION_NAMES, default="bf16",
                     help="autocast dtype; fp16 adds a gradient scaler")
    par.add_argument("--compile", action="store_true", help="torch.compile the model")
    par.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    par.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--micro-batch", type=whole(1, MAX_BATCH), default=8, metavar="N",
                     help="samples per process per forward pass")
    opt.add_argument("--grad-accum", type=whole(1, MAX_BATCH), default=1, metavar="N",
                     help="micro-batches per optimizer step")
    opt.add_argument("--global-batch", type=whole(1, MAX_GLOBAL_BATCH), metavar="N",
                     help="samples per optimizer step; sets --grad-accum from the world size, so a resized "
                          "job keeps its batch")
    opt.add_argument("--max-steps", type=whole(0, MAX_STEPS), default=1000, metavar="N")
    opt.add_argument("--lr", type=real(0, 10), default=6e-4, help="learning rate, 0 to 10")
    opt.add_argument("--min-lr-ratio", type=real(0, 1), default=0.1, help="final lr as a fraction of --lr, 0 to 1")
    opt.add_argument("--warmup-steps", type=whole(0, MAX_STEPS), default=0, metavar="N")
    opt.add_argument("--weight-decay", type=real(0, 10), default=0.1, help="0 to 10")
    opt.add_argument("--grad-clip", type=real(0, 1e6), default=1.0,
                     help="max global gradient norm; 0 turns clipping off")
    opt.add_argument("--seed", type=whole(0, MAX_SEED), default=1234, metavar="N", help="0 to 2**32 - 1")
    run = p.add_argument_group("checkpoints and metrics")
    run.add_argument("--checkpoint-dir", type=_output("checkpoints", folder=True), help="root of this run's checkpoints (shared by all nodes)")
    run.add_argument("--checkpoint-every", type=whole(0, MAX_STEPS), default=0, metavar="N",
                     help="steps between checkpoints; 0: only at the end")
    run.add_argument("--keep-checkpoints", type=whole(0, MAX_STEPS), default=3, metavar="N",
                     help="newest complete checkpoints kept; 0 keeps all")
    run.add_argument("--no-resume", action="store_true", help="start fresh even if a checkpoint exists")
    run.add_argument("--metrics", type=_output("metrics file"), help="JSON-lines file for metrics (appended); rank 0 also prints them")
    run.add_argument("--log-every", type=whole(1, MAX_STEPS), default=1, metavar="N")
    run.add_argument("--peak-tflops", type=real(0, 1e6, above_low=True), help="per-GPU peak dense TFLOPS for MFU "
                     "(default: $MLPLAT_GPU_PEAK_TFLOPS, or the catalog's value for --gpu-model)")
    run.add_argument("--gpu-model", help="GPU model to look up in the instance catalog for MFU, e.g. H100")
    run.add_argument("--stop-after-step", type=whole(0, MAX_STEPS), metavar="N",
                     help="exit hard after this step (simulates a killed job)")
    track = p.add_argument_group("tracking (MLflow) and the checkpoints bucket")
    track.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                       help="the platform's MLflow server (default: $MLFLOW_TRACKING_URI; unset: no tracking)")
    # Names MLflow shows and keeps as tags: printable, at most 256 characters.
    track.add_argument("--experiment", default=os.environ.get("MLPLAT_EXPERIMENT", "training"),
                       type=printable(MAX_NAME),
                       help="MLflow experiment, by convention <tenant>/<job> (default: $MLPLAT_EXPERIMENT)")
    track.add_argument("--run-name", type=printable(MAX_NAME), help="MLflow run name")
    track.add_argument("--track-every", type=whole(1, MAX_STEPS), default=10, metavar="N",
                       help="steps between metric batches sent to MLflow")
    track.add_argument("--checkpoint-upload", default=os.environ.get("MLPLAT_CHECKPOINT_UPLOAD"),
                       help="s3://bucket/prefix: rank 0 copies each checkpoint there with a manifest of hashes "
                            "(default: $MLPLAT_CHECKPOINT_UPLOAD)")
    return p
