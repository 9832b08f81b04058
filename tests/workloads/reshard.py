"""Load a checkpoint into the layout the flags describe and write it straight back, at the
same step, under --resaved; then run the loaded model, one forward and backward pass on the
step's batch with dropout off, and write its loss and gradient norm to --step-out. Run under
torchrun by tests/workloads/test_parallel.py, which compares the two checkpoints tensor for
tensor (a layout that loaded or saved any part wrongly would differ) and the pass with the
one in the checkpoint's own layout (a layout that loaded the weights into the wrong places,
or runs them wrongly, computes another loss).

    torchrun --nproc-per-node=2 tests/workloads/reshard.py --checkpoint DIR --resaved DIR2 \
        --step-out step.json -- <trainer flags>
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch.distributed as dist

from workloads.train import dataset_version
from workloads.train.data import ShardedTokens
from workloads.train.train import Trainer, build_parser, init_runtime


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("--checkpoint", required=True)
    cli.add_argument("--resaved", required=True)
    cli.add_argument("--step-out", required=True)
    cli.add_argument("flags", nargs=argparse.REMAINDER)
    opts = cli.parse_args()
    args = build_parser().parse_args([f for f in opts.flags if f != "--"] + ["--checkpoint-dir", opts.resaved])
    rt = init_runtime("cpu")
    trainer = Trainer(args, rt)
    trainer.dataset_id = dataset_version.load_or_build(args.data).id
    trainer.restore(Path(opts.checkpoint))
    trainer.save()
    # Dropout off: its masks are drawn per rank, so they differ between layouts by design.
    for module in trainer.parallel.modules:
        module.eval()
    loss, grad_norm = trainer.train_step(ShardedTokens(args.data, trainer.seq_len, args.seed))
    if rt.is_main:
        Path(opts.step_out).write_text(json.dumps({"loss": loss, "grad_norm": grad_norm}))
    # Leave together, as the trainer does: a rank that tears gloo down while its peer is
    # still in the last collective can abort at exit ("terminate called without an active
    # exception").
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
