"""Offline preview speed.

Prints, for every stack, the wall time of `mlplat preview` (a fresh process, as a user
runs it), and for a synthetic prod-like stack with N GPU node pools the ratio of the full
preview (mocks + policy pack + reports) to the bare cost of registering the same
resources under plain Pulumi mocks. Each figure is the median of several fresh processes.

    .venv/bin/python bench/preview.py [--repeat 3] [--pools 1,10,25,50,100]

Targets: ratio <= 1.3 at every N, growing linearly; prod preview under 6 s (2 cores).
Results are also written to bench/results/preview.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "preview.json"
STACKS = ("dev", "staging", "prod", "smb")


def synthetic_config(pools: int):
    """prod's config with its training pool repeated `pools` times."""
    from infra.config import PlatformConfig, load_stack

    prod = load_stack("prod")
    gpu = next(p for p in prod.node_pools if p.role == "gpu")
    others = [p for p in prod.node_pools if p.role != "gpu"]
    copies = [gpu.model_copy(update={"name": f"gpu-{i}"}) for i in range(pools)]
    data = prod.model_dump(by_alias=True)
    data["nodePools"] = [p.model_dump(by_alias=True) for p in others + copies]
    return PlatformConfig.model_validate(data)


def worker(mode: str, pools: int) -> dict:
    """Runs in a fresh process; times only the work, after the common imports."""
    from infra.platform import build_platform
    from infra.preview.fixtures import RegionFixture
    from infra.preview.mocks import PreviewMocks, run_program

    config = synthetic_config(pools)
    if mode == "bare":
        from pulumi.runtime.mocks import MockMonitor

        mocks = PreviewMocks(RegionFixture(config.region))
        monitor = MockMonitor(mocks)
        started = time.perf_counter()
        run_program(lambda: build_platform(config), mocks, monitor, project="mlplat", stack="prod")
        return {"seconds": time.perf_counter() - started, "resources": len(monitor.resources)}

    from infra.preview.engine import run_preview
    from infra.preview.report import write_json, write_manifests, write_markdown

    started = time.perf_counter()
    result = run_preview("prod", config=config)
    with tempfile.TemporaryDirectory() as out:
        write_json(result, Path(out) / "r.json")
        write_markdown(result, Path(out) / "r.md")
        write_manifests(result, Path(out) / "m")
    return {"seconds": time.perf_counter() - started, "resources": len(result.registrations),
            "mandatory": len(result.verdict.mandatory)}


def _fresh(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def stack_wall_time(stack: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "infra.cli", "preview", "--stack", stack, "--quiet",
             "--json", f"{out}/r.json", "--markdown", f"{out}/r.md", "--manifests", f"{out}/m"],
            cwd=REPO, capture_output=True, check=True,
        )
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pools", default="1,10,25,50,100")
    parser.add_argument("--worker", choices=["bare", "full"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.n)))
        return

    machine = f"{platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}"
    print(f"Offline preview benchmark on {machine}, {date.today()}")
    stacks = {}
    print("\nmlplat preview per stack (fresh process, median of %d):" % args.repeat)
    for stack in STACKS:
        seconds = statistics.median(stack_wall_time(stack) for _ in range(args.repeat))
        stacks[stack] = round(seconds, 2)
        print(f"  {stack:8s} {seconds:6.2f} s")

    print("\nSynthetic stack: N GPU node pools (median of %d fresh processes each)" % args.repeat)
    print(f"  {'N':>4} {'resources':>9} {'bare s':>8} {'full s':>8} {'ratio':>6} {'full ms/res':>11}")
    rows = []
    for n in [int(x) for x in args.pools.split(",")]:
        bare = [_fresh(["--worker", "bare", "--n", str(n)]) for _ in range(args.repeat)]
        full = [_fresh(["--worker", "full", "--n", str(n)]) for _ in range(args.repeat)]
        bare_s = statistics.median(b["seconds"] for b in bare)
        full_s = statistics.median(f["seconds"] for f in full)
        resources = full[0]["resources"]
        row = {"pools": n, "resources": resources, "bare_s": round(bare_s, 3), "full_s": round(full_s, 3),
               "ratio": round(full_s / bare_s, 3), "full_ms_per_resource": round(1000 * full_s / resources, 2)}
        rows.append(row)
        print(f"  {n:>4} {resources:>9} {bare_s:>8.2f} {full_s:>8.2f} {row['ratio']:>6.2f} "
              f"{row['full_ms_per_resource']:>11.2f}")
    worst = max(r["ratio"] for r in rows)
    print(f"\nworst ratio {worst:.2f} (target <= 1.3); prod {stacks['prod']:.2f} s (target < 6 s)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": machine, "date": str(date.today()), "stacks_s": stacks,
                                   "synthetic": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
