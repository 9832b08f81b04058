"""What the trainer does inside a process group, observed from the inside: run under torchrun
by tests/workloads/test_parallel.py, it writes one JSON report (rank 0) with

- `collectives`: for DDP and FSDP2, with 1 and with 4 accumulation micro-steps, the
  reductions (all-reduce, reduce-scatter, by operation) the profiler saw in one optimizer
  step (`.../sync`), in the same step with every gradient sync turned off (`.../nosync`:
  what the step reduces besides gradients), and how many gradient reductions the model's
  structure calls for (`.../expected`: DDP's gradient buckets, FSDP2's sharded modules);
- `dropout`: a digest of each rank's forward output on the same input, weights and model;
- `meta`: for the 6.7B preset built on the meta device in several layouts, each rank's
  parameter elements and what each parameter's placements are.

    torchrun --nproc-per-node=4 tests/workloads/probe.py --data DIR --out report.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from workloads.train import parallel as par
from workloads.train.data import ShardedTokens
from workloads.train.shapes import PRESETS, Layout
from workloads.train import train
from workloads.train.train import Trainer, build_parser, init_runtime

GRADIENT_REDUCTIONS = ("c10d::allreduce_", "c10d::_reduce_scatter_base_", "c10d::reduce_scatter_",
                       "c10d::reduce_scatter_tensor_coalesced_", "c10d::allreduce_coalesced_")


def trainer(data: str, *flags: str) -> Trainer:
    args = build_parser().parse_args(["--data", data, "--model", "tiny", "--precision", "fp32", "--micro-batch", "2",
                                      "--max-steps", "4", *flags])
    return Trainer(args, RUNTIME)


def reductions_per_step(data: str, strategy: str, accumulation: int, sync: bool = True) -> tuple[dict, int]:
    """(the reductions the profiler counted in one step, by operation; the gradient
    reductions the model's structure calls for per step). With `sync` off, every micro-step
    runs without gradient sync, so what is left is what the step reduces besides gradients."""
    t = trainer(data, "--strategy", strategy, "--grad-accum", str(accumulation))
    tokens = ShardedTokens(data, t.seq_len, seed=1)
    t.train_step(tokens)  # warm-up: FSDP2's lazy init, DDP's bucket rebuild
    real = train.gradient_sync
    if not sync:
        train.gradient_sync = lambda module, model, sync: real(module, model, False)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t.train_step(tokens)
    finally:
        train.gradient_sync = real
    counts = Counter(e.name for e in prof.events() if e.name in GRADIENT_REDUCTIONS)
    return dict(counts), expected_reductions(t)


def expected_reductions(t: Trainer) -> int:
    """One all-reduce per DDP gradient bucket; one reduce-scatter per FSDP2-sharded module."""
    module = getattr(t.parallel.callables[0], "_orig_mod", t.parallel.callables[0])
    if isinstance(module, torch.nn.parallel.DistributedDataParallel):
        sizes = str(module._get_ddp_logging_data().get("bucket_sizes", ""))
        return len([s for s in sizes.split(",") if s.strip()])
    from torch.distributed.fsdp import FSDPModule

    return sum(isinstance(m, FSDPModule) for part in t.parallel.modules for m in part.modules())


def dropout_digest(data: str, *flags: str) -> str:
    t = trainer(data, "--dropout", "0.5", *flags)
    module = t.parallel.callables[0]
    module.train()
    inputs = torch.arange(2 * 16).reshape(2, 16) % 256  # the same on every rank
    with torch.no_grad():
        out = module(inputs)
    return hashlib.sha256(out.detach().float().numpy().tobytes()).hexdigest()[:16]


def meta_layout(layout: Layout) -> dict:
    config = PRESETS["gpt-6.7b"]()
    parallel = par.build(config, layout, RUNTIME.world_size, torch.device("meta"), strategy="fsdp",
                         dtype=torch.bfloat16, activation_checkpoint="selective", compile_model=False, seed=0,
                         distributed=True)
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in parallel.parameters())
    placements = {}
    for module in parallel.modules:
        for name, p in module.named_parameters():
            placements[name] = [str(x) for x in getattr(p, "placements", ())]
    return {"local_elements": local, "placements": placements, "stages": parallel.stage_indices,
            "on_meta": all(p.device.type == "meta" for p in parallel.parameters())}


def main() -> None:
    global RUNTIME
    cli = argparse.ArgumentParser()
    cli.add_argument("--data", required=True)
    cli.add_argument("--out", required=True)
    opts = cli.parse_args()
    RUNTIME = init_runtime("cpu")
    report: dict = {"world_size": RUNTIME.world_size}
    report["collectives"] = {}
    for strategy in ("ddp", "fsdp"):
        for accumulation in (1, 4):
            key = f"{strategy}/{accumulation}"
            synced, expected = reductions_per_step(opts.data, strategy, accumulation)
            unsynced, _ = reductions_per_step(opts.data, strategy, accumulation, sync=False)
            report["collectives"].update({f"{key}/sync": synced, f"{key}/nosync": unsynced,
                                          f"{key}/expected": expected})
    digests = {}
    for name, flags in (("ddp", ()), ("tp2", ("--strategy", "fsdp", "--tp", "2"))):
        mine = dropout_digest(opts.data, *flags)
        gathered = [None] * RUNTIME.world_size
        dist.all_gather_object(gathered, mine)
        digests[name] = gathered
    report["dropout"] = digests
    world = RUNTIME.world_size
    layouts = {"fsdp": Layout(), "tp2": Layout(tp=2), "pp2": Layout(pp=2), "hsdp": Layout(dp_replicate=2),
               "tp2-pp2": Layout(tp=2, pp=world // 2 if world >= 4 else 1)}
    report["meta"] = {}
    for name, layout in layouts.items():
        mine = meta_layout(layout)
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
        report["meta"][name] = gathered
    if RUNTIME.is_main:
        with open(opts.out, "w") as fh:
            json.dump(report, fh)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
