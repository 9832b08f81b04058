"""What a change adds to the test suite's time: `pytest` (the suite `make test` runs, less
the acceptance tests that need a cluster) on this checkout and on a base commit, run
alternately in fresh processes on the same machine, with the same virtualenv and warm
caches.

    .venv/bin/python bench/test_time.py --base <commit> [--repeat 1] [--paths tests/rendered ...]
    .venv/bin/python bench/test_time.py --smoke [--output FILE]   # HEAD against this checkout, one small file

The base commit is checked out in a temporary git worktree. Results go to
bench/results/test-time.json with the machine and the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import describe, finish, record  # noqa: E402

RESULTS = REPO / "bench" / "results" / "test-time.json"
SMOKE_PATH = "tests/unit/test_catalog.py"


def suite(tree: Path, paths: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the tree's own code, not the editable install's
    started = time.perf_counter()
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--ignore=tests/acceptance", *paths], cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode != 0:
        raise SystemExit(f"pytest failed in {tree}: {summary}")
    return seconds, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the commit to compare with (required, but for --smoke: HEAD)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--paths", nargs="*", default=[], help="test paths (default: the whole suite)")
    # Smoke: one small test file, never the whole suite (twenty minutes).
    args = options.parse(parser, {"base": "HEAD", "paths": [SMOKE_PATH]})
    if args.base is None:
        parser.error("--base is required")
    machine = record()
    print(f"Test suite time on {describe(machine)}, {date.today()}")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(base), args.base], cwd=REPO, check=True)
        try:
            for venv in (".venv", ".venv-checkov"):
                (base / venv).symlink_to(REPO / venv)
            times: dict[str, list[float]] = {"base": [], "head": []}
            summaries = {}
            for _ in range(args.repeat):
                for name, tree in (("base", base), ("head", REPO)):
                    seconds, summaries[name] = suite(tree, args.paths)
                    times[name].append(seconds)
                    print(f"  {name}: {seconds:.1f} s ({summaries[name]})")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False)
    machine = finish(machine)
    base_s, head_s = statistics.median(times["base"]), statistics.median(times["head"])
    print(f"base {base_s:.1f} s, head {head_s:.1f} s: the change adds {head_s - base_s:+.1f} s")
    options.write(options.output(args, RESULTS), {
        "machine": describe(machine), "cpu": machine, "date": str(date.today()),
        "measured": "pytest in fresh processes, warm render cache, same virtualenv",
        "base": args.base, "paths": args.paths or ["(whole suite)"], "base_s": round(base_s, 1),
        "head_s": round(head_s, 1), "added_s": round(head_s - base_s, 1), "summaries": summaries,
    })


if __name__ == "__main__":
    main()
