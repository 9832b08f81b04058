"""What a change adds to the test suite's time: `pytest` (the suite `make test` runs, less
the acceptance tests that need a cluster) on this checkout and on a base commit, run
alternately in fresh processes on the same machine, with the same virtualenv and warm
caches.

    .venv/bin/python bench/test_time.py --base <commit> [--repeat 1] [--paths tests/rendered ...]
    .venv/bin/python bench/test_time.py --smoke [--output FILE]   # HEAD against this checkout, one small file
    .venv/bin/python bench/test_time.py --make-test [--commit HEAD]

The base commit is checked out in a temporary git worktree. Results go to
bench/results/test-time.json with the machine and the load.

`--make-test` times what CI runs: `make test` on a fresh clone of a commit, beside this
checkout (where the chart cache is found), with new virtualenvs and empty caches (pip's
downloads, uv's and the rendered charts, XDG_CACHE_HOME in a scratch folder), in two parts: the
setup (`make setup services`, what `make test` runs first) and the tests. The system's
services (skopeo, PostgreSQL, Redis...) are taken as installed. Results go to
bench/results/make-test-time-<cpu>.json, one record per CPU model (`make-test-time-amd-epyc.json`):
the same suite costs one model of 2-core host 1.6 to 1.8 times the CPU seconds of another,
so the newest run on one does not stand for the other. Each record keeps the runs before
it on its model (`earlier`): on a shared host one run's time is not the next one's.

Each part's CPU seconds (user and system, of every process `make` waited for) are recorded
beside its wall time: the suite keeps both cores busy, so its time is its CPU seconds over
two. The same work costs this machine up to a third more CPU seconds at one time than at
another, so the record also holds a probe of its speed, before and after: the CPU seconds
of `import torch` in a fresh process (best of 3), a cost the suite pays in each of its
hundred-odd training processes. The record names the test files that took longest (summed
over their tests, from pytest's JUnit report: each worker's share, so the sum is about
twice the wall time on two workers).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import children_cpu, describe, finish, record  # noqa: E402

RESULTS = REPO / "bench" / "results" / "test-time.json"
MAKE_TEST_RESULTS = "make-test-time-{cpu}.json"  # beside RESULTS, one per CPU model
# A reader's shell has none of these; a run started from `make` or pytest would pass them on.
DROPPED_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "VIRTUAL_ENV", "ENV")
SMOKE_PATH = "tests/unit/test_catalog.py"
SLOWEST_FILES = 10
EARLIER_RUNS = 9
# A failed run's reports kept in its record: so many tests, the last so many characters of each.
FAILURE_REPORTS, FAILURE_CHARS = 5, 4000


def cpu_slug(model: str) -> str:
    """A CPU model as a file name: `Intel(R) Xeon(R) Processor` is `intel-xeon-processor`."""
    plain = re.sub(r"\((?:r|tm)\)", "", model.lower())
    return "-".join(re.findall(r"[a-z0-9]+", plain)) or "unknown"


def earlier_runs(path: Path) -> list[dict]:
    """The runs before this one on the same CPU model, newest first (EARLIER_RUNS at most): on a
    shared host one run can take a third longer than another on nearly the same code, and
    one run alone would hide that."""
    try:
        last = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    summary = {key: last[key] for key in ("commit", "date", "total_s", "tests_cpu_s", "import_torch_cpu_s", "passed")
               if key in last}
    return [summary, *last.get("earlier", [])][:EARLIER_RUNS]


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


def speed_probe() -> float:
    """CPU seconds of `import torch` in a fresh process of this checkout's interpreter, the
    best of 3: the machine's speed at the time, in the suite's commonest cost."""
    spent = []
    for _ in range(3):
        before = children_cpu()
        subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", "import torch"], check=True)
        spent.append(children_cpu() - before)
    return round(min(spent), 2)


def junit_cases(junit: Path) -> list[ET.Element]:
    """The test cases of pytest's JUnit report; none where the suite never started, or died
    writing it (the run's times still count)."""
    try:
        return list(ET.parse(junit).iter("testcase"))
    except (OSError, ET.ParseError):
        return []


def slowest_files(junit: Path) -> dict[str, float]:
    """The test files that took longest, summed over their tests (setup and teardown in)."""
    spent: Counter[str] = Counter()
    for case in junit_cases(junit):
        # classname is the file's module path, with the class after it for a test in a class;
        # a file that failed to collect has none
        parts = [p for p in (case.get("classname") or "").split(".") if p]
        while len(parts) > 1 and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            spent["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return {name: round(seconds, 1) for name, seconds in spent.most_common(SLOWEST_FILES)}


def failure_reports(junit: Path) -> dict[str, str]:
    """Each failed or errored test's report from pytest's JUnit file (its message, then the end
    of its traceback and captured output), FAILURE_REPORTS of them at most: the clone and its
    logs are gone when the run ends, and a failure that does not come back in a rerun would
    leave nothing to read."""
    reports = {}
    for case in junit_cases(junit):
        for outcome in ("failure", "error"):
            for found in case.iter(outcome):
                name = f"{case.get('classname')}::{case.get('name')} ({outcome})"
                text = f"{found.get('message') or ''}\n{found.text or ''}".strip()
                reports[name] = text if len(text) <= FAILURE_CHARS else "...\n" + text[-FAILURE_CHARS:]
    return dict(list(reports.items())[:FAILURE_REPORTS])


def make_test(commit: str) -> dict:
    """`make test` on a fresh clone of `commit`: the setup's and the tests' seconds, and
    pytest's summary line."""
    clone = Path(tempfile.mkdtemp(prefix=".test-time-", dir=REPO.parent))  # ../shared is the chart cache
    caches = Path(tempfile.mkdtemp(prefix="mlplat-test-time-caches-"))
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV} | {"XDG_CACHE_HOME": str(caches)}
    try:
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", "--detach", commit], check=True)
        seconds: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for part, command in (("setup", ["make", "--no-print-directory", "-j3", "setup", "services"]),
                              ("tests", ["make", "--no-print-directory", "test",
                                         f"PYTEST_ARGS=--junitxml={caches / 'junit.xml'}"])):
            started, used = time.perf_counter(), children_cpu()
            done = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True)
            seconds[part] = time.perf_counter() - started
            cpu[part] = children_cpu() - used
            print(f"  {part}: {seconds[part]:.1f} s, {cpu[part]:.0f} CPU-s")
            if done.returncode != 0 and part == "setup":
                tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
                raise SystemExit(f"{' '.join(command)} failed in the clone of {commit}:\n" + "\n".join(tail))
        # A failed suite's time is still recorded, with what failed (pytest's short summary).
        lines = done.stdout.strip().splitlines()
        summary = next((line.strip("= ") for line in reversed(lines) if " in " in line and line.startswith("=")),
                       "(no summary)")
        failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        slowest = slowest_files(caches / "junit.xml")
        reports = failure_reports(caches / "junit.xml")
    finally:
        shutil.rmtree(clone, ignore_errors=True)
        shutil.rmtree(caches, ignore_errors=True)
    return {"setup_s": round(seconds["setup"], 1), "tests_s": round(seconds["tests"], 1),
            "total_s": round(seconds["setup"] + seconds["tests"], 1),
            "setup_cpu_s": round(cpu["setup"]), "tests_cpu_s": round(cpu["tests"]),
            "tests_cores_busy": round(cpu["tests"] / seconds["tests"], 2),
            "summary": summary, "passed": done.returncode == 0, "failed": failed, "slowest_files_s": slowest,
            **({"failure_reports": reports} if reports else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="the commit to compare with (required, but for --smoke: HEAD)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--paths", nargs="*", default=[], help="test paths (default: the whole suite)")
    parser.add_argument("--make-test", action="store_true", help="time `make test` on a fresh clone instead")
    parser.add_argument("--commit", default="HEAD", help="with --make-test: the commit to clone (default HEAD)")
    # Smoke: one small test file, never the whole suite (twenty minutes).
    args = options.parse(parser, {"base": "HEAD", "paths": [SMOKE_PATH]})
    if args.make_test:
        if args.smoke:
            parser.error("--make-test has no smoke size: it is a fresh setup and the whole suite")
        commit = subprocess.run(["git", "rev-parse", "--short", args.commit], cwd=REPO, check=True,
                                capture_output=True, text=True).stdout.strip()
        machine = record()
        print(f"make test on a fresh clone of {commit}, on {describe(machine)}, {date.today()}")
        probe = [speed_probe()]
        print(f"  import torch: {probe[0]:.2f} CPU-s")
        times = make_test(commit)
        probe.append(speed_probe())
        machine = finish(machine)
        print(f"make test: {times['total_s']:.0f} s ({times['setup_s']:.0f} s setup, {times['tests_s']:.0f} s "
              f"tests, {times['tests_cpu_s']} CPU-s, {times['tests_cores_busy']} cores busy): {times['summary']}")
        print(f"  import torch: {probe[1]:.2f} CPU-s (the machine's speed, before and after: {probe})")
        default = RESULTS.parent / MAKE_TEST_RESULTS.format(cpu=cpu_slug(machine["cpu"]))
        path = options.output(args, default)
        options.write(path, {
            "machine": describe(machine), "cpu": machine, "date": str(date.today()),
            "measured": "make test on a fresh git clone: new virtualenvs, empty pip, uv and render caches, system "
                        "services installed",
            "commit": commit, **times, "import_torch_cpu_s": probe, "earlier": earlier_runs(path)})
        if not times["passed"]:
            raise SystemExit("make test failed (the reports are in the record):\n" + "\n".join(times["failed"]))
        return
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
