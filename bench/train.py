"""Trainer throughput, measured by running the trainer itself.

    python bench/train.py                 # CPU: DDP on 2 processes (gloo), fp32 vs bf16 autocast
    python bench/train.py --device cuda   # one GPU: the 124M model, bf16 autocast + torch.compile

Prints tokens/s per configuration (the median over the steps after warm-up) and, on a GPU,
model FLOPs utilisation against the GPU's peak dense BF16 throughput from the instance
catalog. Writes the figures to bench/results/train-<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import cpu_name  # noqa: E402
from workloads.train.data import generate_synthetic_shards  # noqa: E402
from workloads.train.metrics import read_metrics  # noqa: E402

# CPU: a small GPT (4 layers, width 128, 128 tokens): big enough that matrix multiplies,
# not Python overhead, dominate a step on a CPU core.
CPU_MODEL = ["--model", "tiny", "--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "128",
             "--vocab-size", "512", "--micro-batch", "8"]
CPU_RUNS = {"fp32": ["--precision", "fp32"], "bf16": ["--precision", "bf16"]}
# GPU: GPT-2 small, 16 sequences of 1024 tokens per step.
GPU_MODEL = ["--model", "gpt2-124m", "--micro-batch", "16"]
GPU_RUNS = {"bf16+compile": ["--precision", "bf16", "--compile"]}


def gpu_model_of(device_name: str) -> str | None:
    """The catalog's GPU model for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "h100")."""
    import re

    from infra.catalog import CATALOG

    for model in sorted({it.gpu.model for it in CATALOG.values() if it.gpu}, key=len, reverse=True):
        if re.search(rf"\b{re.escape(model.split('-')[0])}\b", device_name, re.IGNORECASE):
            return model
    return None


def run_trainer(nproc: int, args: list[str], metrics: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": str(REPO)}
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    else:
        cmd = [sys.executable]
    cmd += ["-m", "workloads.train", *args, "--metrics", str(metrics)]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"trainer failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def summarise(metrics: Path, warmup: int) -> dict:
    steps = [r for r in read_metrics(metrics) if r["step"] > warmup]
    start = read_metrics(metrics, "start")[0]
    mfus = [r["mfu"] for r in steps if r.get("mfu") is not None]
    return {
        "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in steps), 1),
        "step_time_s": round(statistics.median(r["step_time_s"] for r in steps), 5),
        "mfu": round(statistics.median(mfus), 4) if mfus else None,
        "params": start["params"],
        "world_size": start["world_size"],
        "tokens_per_step": start["global_batch"] * start["seq_len"],
        "final_loss": round(steps[-1]["loss"], 4),
        "measured_steps": len(steps),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--steps", type=int, help="optimizer steps per run (default: 40 on CPU, 60 on a GPU)")
    p.add_argument("--warmup-steps", type=int, help="steps left out of the figures (default: 10 CPU, 20 GPU)")
    p.add_argument("--peak-tflops", type=float, help="per-GPU peak for MFU (default: the catalog's, by device name)")
    p.add_argument("--out", type=Path, help="result file (default: bench/results/train-<device>.json)")
    args = p.parse_args()

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("bench/train.py --device cuda: no CUDA device here")
        device = torch.cuda.get_device_name(0)
        model_args, runs, nproc, vocab = GPU_MODEL, GPU_RUNS, 1, 50304
        steps, warmup = args.steps or 60, args.warmup_steps or 20
        peak = ["--peak-tflops", str(args.peak_tflops)] if args.peak_tflops else []
        if not peak:
            model = gpu_model_of(device)
            if model is None:
                sys.exit(f"{device!r} is not in the instance catalog; give --peak-tflops")
            peak = ["--gpu-model", model]
        model_args = [*model_args, "--device", "cuda", *peak]
    else:
        device = f"{cpu_name()} ({os.cpu_count()} cores)"
        model_args, runs, nproc, vocab = CPU_MODEL, CPU_RUNS, 2, 512
        steps, warmup = args.steps or 40, args.warmup_steps or 10
        model_args = [*model_args, "--device", "cpu"]

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        shards = Path(tmp) / "shards"
        generate_synthetic_shards(shards, num_shards=4, tokens_per_shard=250_000, vocab_size=vocab, seed=0)
        for name, extra in runs.items():
            metrics = Path(tmp) / f"{name}.jsonl"
            run_trainer(nproc, ["--data", str(shards), *model_args, *extra, "--max-steps", str(steps),
                                "--log-every", "1"], metrics)
            results[name] = summarise(metrics, warmup)

    print(f"device: {device}")
    print(f"{'run':<14} {'processes':>9} {'params':>11} {'tokens/s':>11} {'step (s)':>9} {'MFU':>7}")
    for name, r in results.items():
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        print(f"{name:<14} {r['world_size']:>9} {r['params']:>11,} {r['tokens_per_s']:>11,.0f} "
              f"{r['step_time_s']:>9.4f} {mfu:>7}")
    if args.device == "cpu" and {"fp32", "bf16"} <= results.keys():
        print(f"bf16 / fp32 tokens/s: {results['bf16']['tokens_per_s'] / results['fp32']['tokens_per_s']:.2f}")

    out = args.out or REPO / "bench" / "results" / f"train-{args.device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device, "date": date.today().isoformat(),
                               "python": platform.python_version(), "steps": steps, "warmup_steps": warmup,
                               "runs": results}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
