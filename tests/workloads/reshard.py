"""Load a checkpoint into the layout the flags describe and write it straight back, at the
same step, under --resaved: run under torchrun by tests/workloads/test_parallel.py, which
compares the two checkpoints tensor for tensor (a layout that loaded or saved any part
wrongly would differ).

    torchrun --nproc-per-node=2 tests/workloads/reshard.py --checkpoint DIR --resaved DIR2 \
        -- <trainer flags>
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch.distributed as dist

from workloads.train import dataset_version
from workloads.train.train import Trainer, build_parser, init_runtime


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("--checkpoint", required=True)
    cli.add_argument("--resaved", required=True)
    cli.add_argument("flags", nargs=argparse.REMAINDER)
    opts = cli.parse_args()
    args = build_parser().parse_args([f for f in opts.flags if f != "--"] + ["--checkpoint-dir", opts.resaved])
    rt = init_runtime("cpu")
    trainer = Trainer(args, rt)
    trainer.dataset_id = dataset_version.load_or_build(args.data).id
    trainer.restore(Path(opts.checkpoint))
    trainer.save()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
