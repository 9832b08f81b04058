"""Trainer throughput, measured by running the trainer itself (torchrun, the real process
group: gloo on CPU, NCCL on a GPU); nothing is emulated.

    python bench/train.py                 # CPU: 2 processes; DDP fp32 and bf16, tp=2 and pp=2 in fp32
    python bench/train.py --device cuda   # one GPU: the GPU lane (below)
    python bench/train.py --smoke [--output FILE]   # the first run only, 2 steps (bench/options.py)

Prints tokens/s per configuration (the median over the steps after warm-up) and, on a GPU,
model FLOPs utilisation against the GPU's peak dense BF16 throughput from the instance
catalog. Writes the figures to bench/results/train-<device>.json, with the CPU model and
whether it has AVX512-BF16 and AMX (bf16 on a CPU without them is emulated and several
times slower than fp32), the torch version, and the load before and after.

The GPU lane first runs what CPU runs never reach, and stops if any fails: fused AdamW with
the fp16 gradient scaler, NCCL's all_gather_object (every checkpoint gathers the ranks'
random states), and an exact resume with dropout on, which restores the CUDA generator.
Then it measures the 124M preset at 16 and 32 sequences per step (bf16, torch.compile; the
goal is MFU >= 40% on an H100)
and the 1.3B preset (bf16, compile, selective activation checkpointing).
"""

from __future__ import annotations

import argparse
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

from bench import options  # noqa: E402
from bench.machine import describe, finish, record  # noqa: E402
from workloads.train.data import generate_synthetic_shards  # noqa: E402
from workloads.train.metrics import read_metrics  # noqa: E402

# CPU: a small GPT (4 layers, width 128, 128 tokens): big enough that matrix multiplies,
# not Python overhead, dominate a step on a CPU core. Two processes, so the parallel
# layouts' runs show what their communication costs against DDP.
CPU_MODEL = ["--model", "tiny", "--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "128",
             "--vocab-size", "512", "--micro-batch", "8", "--grad-accum", "2"]
CPU_RUNS = {
    "DDP fp32": ["--precision", "fp32"],
    "DDP bf16 autocast": ["--precision", "bf16"],
    "tp=2 fp32": ["--precision", "fp32", "--tp", "2"],
    "pp=2 1F1B fp32": ["--precision", "fp32", "--pp", "2"],
}
# GPU: GPT-2 small, 16 and 32 sequences of 1024 tokens per step; GPT-3 XL's shape, 4 of 2048.
GPU_RUNS = {
    "124M bf16+compile": ["--model", "gpt2-124m", "--micro-batch", "16", "--precision", "bf16", "--compile"],
    "124M bf16+compile, 32 per step": ["--model", "gpt2-124m", "--micro-batch", "32", "--precision", "bf16",
                                       "--compile"],
    "1.3B bf16+compile+selective AC": ["--model", "gpt-1.3b", "--micro-batch", "4", "--precision", "bf16",
                                       "--compile", "--activation-checkpoint", "selective"],
}
# The GPU lane's first checks: small steps of the 124M model, one process under torchrun
# (so NCCL runs), dropout on.
GPU_CHECK = ["--model", "gpt2-124m", "--micro-batch", "4", "--seq-len", "256", "--dropout", "0.1", "--max-steps", "6",
             "--checkpoint-every", "3", "--keep-checkpoints", "0", "--device", "cuda", "--deterministic"]


def gpu_model_of(device_name: str) -> str | None:
    """The catalog's GPU model for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "h100")."""
    import re

    from infra.catalog import CATALOG

    for model in sorted({it.gpu.model for it in CATALOG.values() if it.gpu}, key=len, reverse=True):
        if re.search(rf"\b{re.escape(model.split('-')[0])}\b", device_name, re.IGNORECASE):
            return model
    return None


def run_trainer(nproc: int, args: list[str], metrics: Path, expect: int = 0) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # what --deterministic needs of cuBLAS
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "workloads.train", *args, "--metrics", str(metrics)]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if (proc.returncode != 0) != (expect != 0):
        sys.exit(f"trainer exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def gpu_checks(shards: Path, tmp: Path) -> dict:
    """What only a GPU runs. fp16 with DDP on CUDA takes fused AdamW and the gradient
    scaler; each checkpoint gathers random states over NCCL; a run killed after step 3 and
    resumed must log the uninterrupted run's losses, which needs the CUDA generator back."""
    from workloads.train.train import SIMULATED_CRASH_EXIT

    common = ["--data", str(shards), *GPU_CHECK, "--precision", "fp16"]
    whole, resumed = tmp / "check-whole", tmp / "check-resumed"
    run_trainer(1, [*common, "--checkpoint-dir", str(whole / "ckpt")], whole / "m.jsonl")
    run_trainer(1, [*common, "--checkpoint-dir", str(resumed / "ckpt"), "--stop-after-step", "3"],
                resumed / "m.jsonl", expect=SIMULATED_CRASH_EXIT)
    run_trainer(1, [*common, "--checkpoint-dir", str(resumed / "ckpt")], resumed / "m.jsonl")
    expected = {r["step"]: r["loss"] for r in read_metrics(whole / "m.jsonl")}
    got = {r["step"]: r["loss"] for r in read_metrics(resumed / "m.jsonl") if r["step"] > 3}
    exact = got == {s: expected[s] for s in (4, 5, 6)}
    if not exact:
        sys.exit(f"GPU lane: the resumed run's losses {got} differ from the uninterrupted run's {expected}")
    return {"fused_adamw_fp16_scaler": True, "nccl_all_gather_object": True, "cuda_rng_exact_resume": exact}


def summarise(metrics: Path, warmup: int) -> dict:
    steps = [r for r in read_metrics(metrics) if r["step"] > warmup]
    start = read_metrics(metrics, "start")[0]
    what = (f"{start['params'] / 1e6:.1f}M params, {start['world_size']} process(es), {start['strategy']}, "
            f"{start['layout']}, {start['precision']}" + (", compiled" if start["compile"] else "")
            + (f", {start['activation_checkpoint']} activation checkpointing"
               if start["activation_checkpoint"] != "none" else "")
            + f", {start['global_batch']} x {start['seq_len']} tokens per step")
    mfus = [r["mfu"] for r in steps if r.get("mfu") is not None]
    return {
        "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in steps), 1),
        "step_time_s": round(statistics.median(r["step_time_s"] for r in steps), 5),
        "mfu": round(statistics.median(mfus), 4) if mfus else None,
        "params": start["params"],
        "world_size": start["world_size"],
        "tokens_per_step": start["global_batch"] * start["seq_len"],
        "final_loss": round(steps[-1]["loss"], 4),
        "what": what,
        "measured_steps": len(steps),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--steps", type=int, help="optimizer steps per run (default: 40 on CPU, 60 on a GPU)")
    p.add_argument("--warmup-steps", type=int, help="steps left out of the figures (default: 10 CPU, 20 GPU)")
    p.add_argument("--peak-tflops", type=float, help="per-GPU peak for MFU (default: the catalog's, by device name)")
    p.add_argument("--runs", help="comma-separated names of the runs to make (default: all of the device's)")
    # Smoke: two steps, the first left out; and only the device's first run (below).
    args = options.parse(p, {"steps": 2, "warmup_steps": 1})

    import torch

    machine = record()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("bench/train.py --device cuda: no CUDA device here")
        device = torch.cuda.get_device_name(0)
        runs, vocab = GPU_RUNS, 50304
        steps, warmup = args.steps or 60, args.warmup_steps or 20
        peak = ["--peak-tflops", str(args.peak_tflops)] if args.peak_tflops else []
        if not peak:
            model = gpu_model_of(device)
            if model is None:
                sys.exit(f"{device!r} is not in the instance catalog; give --peak-tflops")
            peak = ["--gpu-model", model]
        model_args = ["--device", "cuda", *peak]
        measured = f"the trainer on one {device} under torchrun (NCCL)"
    else:
        device = f"{machine['cpu']} ({machine['cores']} cores)"
        runs, vocab = CPU_RUNS, 512
        steps, warmup = args.steps or 40, args.warmup_steps or 10
        model_args = [*CPU_MODEL, "--device", "cpu"]
        measured = "the trainer on this CPU, 2 processes under torchrun (gloo), one thread each"
    names = args.runs.split(",") if args.runs else list(runs)[:1] if args.smoke else list(runs)
    unknown = [n for n in names if n not in runs]
    if unknown:
        sys.exit(f"bench/train.py: no run named {', '.join(unknown)} on {args.device}; the runs: {', '.join(runs)}")
    runs = {name: runs[name] for name in names}

    results, checks = {}, None
    with tempfile.TemporaryDirectory() as tmp:
        shards = Path(tmp) / "shards"
        generate_synthetic_shards(shards, num_shards=4, tokens_per_shard=250_000, vocab_size=vocab, seed=0)
        if args.device == "cuda":
            checks = gpu_checks(shards, Path(tmp))
        for name, extra in runs.items():
            metrics = Path(tmp) / f"{name}.jsonl"
            run_trainer(1 if args.device == "cuda" else 2,
                        ["--data", str(shards), *model_args, *extra, "--max-steps", str(steps), "--log-every", "1"],
                        metrics)
            results[name] = summarise(metrics, warmup)
    machine = finish(machine)

    print(f"device: {device}; {describe(machine)}; torch {torch.__version__}")
    print(f"{'run':<32} {'processes':>9} {'params':>13} {'tokens/s':>11} {'step (s)':>9} {'MFU':>7}")
    for name, r in results.items():
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        print(f"{name:<32} {r['world_size']:>9} {r['params']:>13,} {r['tokens_per_s']:>11,.0f} "
              f"{r['step_time_s']:>9.4f} {mfu:>7}")
    if checks:
        print("GPU lane checks: " + ", ".join(f"{k} ok" for k in checks))

    options.write(options.output(args, REPO / "bench" / "results" / f"train-{args.device}.json"), {
        "device": device, "machine": describe(machine), "cpu": machine, "date": date.today().isoformat(),
        "torch": torch.__version__, "measured": measured, "python": platform.python_version(), "steps": steps,
        "warmup_steps": warmup, "gpu_checks": checks, "runs": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
