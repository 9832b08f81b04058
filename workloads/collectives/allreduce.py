"""All-reduce over message sizes from 1 MiB to 1 GiB, reported as nccl-tests does.

    torchrun --nnodes=2 --nproc-per-node=8 ... -m workloads.collectives --min-busbw-gbps 300

For each size S (bytes) and the time t of one all-reduce:

    algbw = S / t                      (GB/s, 1 GB = 1e9 bytes)
    busbw = algbw * 2 * (n - 1) / n    (n ranks)

busbw is what a ring all-reduce moves over the slowest link, so it is comparable across
rank counts and with the hardware's link speed (nccl-tests, doc/PERFORMANCE.md). The check
passes when the best busbw over all sizes (large messages reach it) is at least the
threshold. Two p5.48xlarge nodes reach about 480 GB/s over EFA; a result near a few GB/s
means NCCL fell back to TCP sockets.

Exit codes: 0 pass, 1 below the threshold, 3 a wrong all-reduce result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

EXIT_OK = 0
EXIT_SLOW = 1
EXIT_WRONG_RESULT = 3
MIB = 1 << 20


@dataclass(frozen=True)
class Measurement:
    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbps: float  # GB/s
    busbw_gbps: float  # GB/s
    correct: bool


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth factor for all-reduce: 2(n-1)/n."""
    return algbw * 2 * (world_size - 1) / world_size


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_result(size_bytes: int, device: torch.device, world_size: int, rank: int) -> bool:
    """Rank r contributes r+1 everywhere; every element must then be n(n+1)/2."""
    count = size_bytes // 4
    tensor = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(tensor)
    expected = world_size * (world_size + 1) / 2
    ok = torch.tensor(int(bool(torch.all(tensor == expected))), device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # fails on every rank if it fails on one
    return bool(ok.item())


def time_all_reduce(size_bytes: int, device: torch.device, warmup: int, iters: int) -> float:
    """Seconds per all-reduce, the slowest rank's view (a collective is as slow as its
    slowest member)."""
    tensor = torch.zeros(size_bytes // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    _sync(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    _sync(device)
    elapsed = torch.tensor((time.perf_counter() - started) / iters, dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def measure(size_bytes: int, device: torch.device, warmup: int, iters: int) -> Measurement:
    world, rank = dist.get_world_size(), dist.get_rank()
    correct = check_result(size_bytes, device, world, rank)
    seconds = time_all_reduce(size_bytes, device, warmup, iters)
    algbw = size_bytes / seconds / 1e9
    return Measurement(size_bytes, size_bytes // 4, "float32", seconds * 1e6, algbw, bus_bandwidth(algbw, world),
                       correct)


@dataclass(frozen=True)
class Verdict:
    peak_busbw_gbps: float
    avg_busbw_gbps: float
    threshold_gbps: float
    all_correct: bool

    @property
    def exit_code(self) -> int:
        if not self.all_correct:
            return EXIT_WRONG_RESULT
        return EXIT_OK if self.peak_busbw_gbps >= self.threshold_gbps else EXIT_SLOW

    @property
    def line(self) -> str:
        if not self.all_correct:
            return "FAIL: all-reduce returned wrong values"
        verb = "PASS" if self.exit_code == EXIT_OK else "FAIL"
        return (f"{verb}: peak bus bandwidth {self.peak_busbw_gbps:.2f} GB/s, threshold "
                f"{self.threshold_gbps:.2f} GB/s (average {self.avg_busbw_gbps:.2f} GB/s)")


def judge(results: list[Measurement], threshold_gbps: float) -> Verdict:
    busbw = [m.busbw_gbps for m in results]
    return Verdict(max(busbw), sum(busbw) / len(busbw), threshold_gbps, all(m.correct for m in results))


def format_row(m: Measurement) -> str:
    return (f"{m.size_bytes:>12} {m.count:>12} {m.dtype:>8} {m.time_us:>11.1f} {m.algbw_gbps:>11.2f} "
            f"{m.busbw_gbps:>11.2f} {'ok' if m.correct else 'WRONG':>6}")


HEADER = (f"{'size(B)':>12} {'count':>12} {'type':>8} {'time(us)':>11} {'algbw(GB/s)':>11} "
          f"{'busbw(GB/s)':>11} {'check':>6}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.collectives", description=__doc__.split("\n\n")[0])
    p.add_argument("--min-bytes", type=int, default=MIB)
    p.add_argument("--max-bytes", type=int, default=1024 * MIB)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--min-busbw-gbps", type=float,
                   default=float(os.environ.get("MLPLAT_MIN_BUSBW_GBPS", "0")),
                   help="fail below this peak bus bandwidth in GB/s (default: $MLPLAT_MIN_BUSBW_GBPS, else 0)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of the table")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.min_bytes < 4 or args.min_bytes > args.max_bytes:
        print(f"collectives: need 4 <= --min-bytes <= --max-bytes, got {args.min_bytes} and {args.max_bytes}",
              file=sys.stderr)
        return 2
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo", device_id=device if use_cuda else None)
    main_rank = dist.get_rank() == 0
    if main_rank and not args.json:
        print(f"# all-reduce, {dist.get_world_size()} ranks, backend {dist.get_backend()}, float32 sum")
        print(HEADER)
    results = []
    for size in message_sizes(args.min_bytes, args.max_bytes):
        m = measure(size, device, args.warmup, args.iters)
        results.append(m)
        if main_rank:
            print(json.dumps({"event": "allreduce", **asdict(m)}) if args.json else format_row(m), flush=True)
    verdict = judge(results, args.min_busbw_gbps)
    if main_rank:
        if args.json:
            print(json.dumps({"event": "verdict", **asdict(verdict), "exit_code": verdict.exit_code}))
        else:
            print(verdict.line)
    dist.barrier()  # leave together (workloads/train/train.py says why)
    dist.destroy_process_group()
    return verdict.exit_code
