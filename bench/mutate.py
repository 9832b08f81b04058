"""Mutation testing (`make mutate`): is a planted bug caught? mutmut plants one small change
at a time (a flipped comparison, a changed constant, a dropped argument) in the modules
below, and runs the tests that reach the changed function; a mutant those tests still pass
on "survived". A module's score is (killed + timed out) / (mutants checked - equivalent
ones); a mutant no test reaches counts as surviving.

Why mutmut 3.8.1 rather than cosmic-ray 8.7.0 (both installed here; mutmut run on every
module, cosmic-ray ruled out on its design before a run):
- mutmut records, in one pass, which tests reach which function, and runs only those
  against a mutant; cosmic-ray runs one test command per session for every mutant, so each
  would run a module's whole test selection (minutes for the export and the trainer).
- mutmut forks each mutant's run from a server process that has already imported pytest,
  torch and the collected tests (`import torch` alone costs 2 to 3 s); cosmic-ray starts a
  fresh interpreter per mutant.
- mutmut writes its mutated copies to `mutants/` under the directory it runs in; cosmic-ray
  writes each mutant into the source file itself, which a checkout others run tests in must
  never see. Here mutmut runs in a copy of the checkout under the temporary directory, so
  no mutant ever lands in the checkout.
- mutmut's fork server (process_isolation=forkserver) is made for test suites that are not
  safe to fork after use (torch, gRPC), which these are.

What mutmut cannot see: code that only runs in a subprocess (torchrun workers, the policy
pack's process). Its mutants are still run with the mutant switched on in the subprocess,
but no test is recorded as reaching them, so they count as "no tests" (not killed).

Scope (see MODULES): each module the project names, with the tests that cover it and run
in-process. Not every file of each is mutated by `make mutate`: the pack alone makes about
7,450 mutants, and this machine manages a few a minute. Each file left out is listed in the
results with its reason; `--all-files` takes those left out for time as well.

Each module's run has a wall-clock budget (--budget-s); mutmut keeps its results in the
work directory (--workdir, default <tmp>/mlplat-mutate), so a second `make mutate` goes on
where the first stopped and reruns only mutants of functions that changed. Mutants still
unchecked when the budget ends are reported as such.

Survivors that are not bugs the tests should catch are explained, one by one, in
bench/mutation_notes.yaml ("equivalent: <why>"); so is each survivor of the first run that
a new test now kills (with that test).

    .venv/bin/python bench/mutate.py                       # every module
    .venv/bin/python bench/mutate.py --module store --module export
    .venv/bin/python bench/mutate.py --budget-s 600 --children 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from importlib import metadata
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import describe, finish, record  # noqa: E402

RESULTS = REPO / "bench" / "results" / "mutation.json"
NOTES = REPO / "bench" / "mutation_notes.yaml"
GOAL = 0.85
TOOL = "mutmut"


@dataclass(frozen=True)
class Module:
    name: str
    source_root: str  # the directory mutmut copies into mutants/ (the import root's first part)
    mutate: tuple[str, ...]  # the files `make mutate` mutates, relative to the work directory
    tests: tuple[str, ...]  # pytest arguments: the tests that may be run against a mutant
    pytest_args: tuple[str, ...] = ()
    # The module's other files -> why `make mutate` leaves them out; `--all-files` takes
    # those marked "time" too.
    not_mutated: dict[str, str] = field(default_factory=dict)
    # Copy this directory of the checkout to source_root in the work directory, so the
    # mutated copy imports under the name the tests use (the pack's rules import as
    # `platform_policies`, from policies/ on sys.path).
    copy_from: str | None = None
    also_copy: tuple[str, ...] = ()
    more_tests: tuple[str, ...] = ()  # the tests of the files left out for time (--all-files)


# Measured on the machine of bench/results/mutation.json (2 shared cores, load 12 to 16 from
# other work): 3 to 10 mutants a minute, depending on the tests a mutant runs. The pack alone
# has about 7,450 mutants, workloads/monitor about 2,000: at that pace a whole run takes many
# hours. `make mutate` therefore mutates, per module, the files whose bugs the project's
# claims rest on (residency and encryption; the drift alarm and the request log; the
# trainer's data order, shapes and metrics), and lists each other file as not mutated with
# its reason. `bench/mutate.py --all-files` runs everything, resuming where a run stopped.
TIME = "time: left out of `make mutate` for its run time on 2 cores; `bench/mutate.py --all-files` mutates it"
TRAIN_TESTS = ("tests/workloads/test_data.py", "tests/workloads/test_metrics.py", "tests/workloads/test_checkpoint.py",
               "tests/workloads/test_dataset_version.py", "tests/workloads/test_model.py",
               "tests/unit/test_training_plan.py", "tests/workloads/test_mutants_train.py")
# The tests listed run in-process: each mutant's run forks from a process that has them
# collected. Tests that start torchrun are left out (-m "not slow"): mutmut cannot see what
# runs in their workers, and each costs 10 to 60 s per mutant.
MODULES = {
    "workloads/train": Module(
        "workloads/train", "workloads",
        ("workloads/train/data.py", "workloads/train/metrics.py", "workloads/train/shapes.py"),
        TRAIN_TESTS,
        # torch.compile of the model: about 50 s a run on 2 cores; the eager test of the
        # same recomputation stays.
        ("-m", "not slow", "--deselect",
         "tests/workloads/test_model.py::test_activation_checkpointing_compiles_to_the_eager_gradients"),
        not_mutated={
            "workloads/train/checkpoint.py": TIME,
            "workloads/train/dataset_version.py": TIME,
            "workloads/train/model.py": TIME,
            "workloads/train/train.py": "the trainer's loop: its tests train a model for 10 to 50 s each, in "
                                        "process or under torchrun; about 700 mutants would take days here",
            "workloads/train/parallel.py": "DDP/FSDP/tensor-parallel layouts: exercised only by torchrun workers "
                                           "(tests/workloads/test_parallel.py), which mutmut cannot attribute "
                                           "coverage to, at 10 to 60 s a run",
            "workloads/train/options.py": "the trainer's flags, moved out of train.py so a refusal needs no "
                                          "torch; their bounds are tested through the command line "
                                          "(tests/workloads/test_verb_inputs.py), in subprocesses",
            "workloads/train/__main__.py": "parses the flags, then calls train.run_checked; nothing to mutate",
            "workloads/train/__init__.py": "nothing to mutate",
        }),
    "workloads/tracking/store.py": Module(
        "workloads/tracking/store.py", "workloads", ("workloads/tracking/store.py",),
        ("tests/services/test_checkpoint_store.py", "tests/services/test_mutants_store.py")),
    "workloads/serve/export.py": Module(
        "workloads/serve/export.py", "workloads", ("workloads/serve/export.py",),
        ("tests/workloads/serve/test_export.py", "tests/workloads/serve/test_mutants_export.py")),
    "workloads/monitor": Module(
        "workloads/monitor", "workloads", ("workloads/monitor/request_log.py",),
        ("tests/workloads/test_request_log.py", "tests/workloads/test_mutants_monitor.py"),
        more_tests=("tests/workloads/test_drift.py", "tests/workloads/test_drift_inputs.py",
                    "tests/workloads/test_ext_proc.py"),
        not_mutated={
            "workloads/monitor/alarm.py": "its tests (tests/workloads/test_drift.py) run seeded Evidently "
                                          "simulations: one pass took over 20 minutes here; " + TIME,
            "workloads/monitor/drift.py": TIME, "workloads/monitor/ext_proc.py": TIME,
            "workloads/monitor/cli.py": TIME,
            "workloads/monitor/drift_job.py": "its tests (tests/services/test_drift_job.py) start a Pushgateway and "
                                              "S3 per module: that start-up on every mutant; " + TIME,
            "workloads/monitor/logger.py": "its tests (tests/services/test_request_logger.py) start servers; " + TIME,
            "workloads/monitor/__main__.py": "nothing to mutate", "workloads/monitor/__init__.py": "nothing to mutate",
        }),
    "policies/platform_policies": Module(
        "policies/platform_policies", "platform_policies",
        ("platform_policies/residency.py", "platform_policies/egress.py"),
        ("tests/policy",),
        # test_pack_grpc and test_relay judge the pack through its own process, which
        # imports the rules from policies/, not the mutated copy; so do the other tests
        # that use the `pack` fixture (left out by the plugin below).
        ("--ignore=tests/policy/test_pack_grpc.py", "--ignore=tests/policy/test_relay.py", "-p", "mlplat_mutate"),
        not_mutated={f"platform_policies/{name}.py": TIME for name in (
            "access", "cis_kubernetes", "common", "controls", "customer_cluster", "data_paths", "databases",
            "decoding", "edge", "encryption", "exposure", "kubernetes", "pod_security", "replication", "s3",
            "tagging", "transit", "workloads")},
        copy_from="policies/platform_policies", also_copy=("policies/config", "policies/PulumiPolicy.yaml")),
}
# Loaded with `-p mlplat_mutate` where a module's tests talk to the pack's own process: those
# tests cannot see a mutant, and starting the process costs each mutant's run a second.
PLUGIN = '''import pytest


def pytest_collection_modifyitems(config, items):
    kept = [item for item in items if "pack" not in getattr(item, "fixturenames", ())]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
'''
SHORT = {"train": "workloads/train", "store": "workloads/tracking/store.py", "export": "workloads/serve/export.py",
         "monitor": "workloads/monitor", "policies": "policies/platform_policies"}

# mutmut's exit codes per mutant (mutmut.stats.status_by_exit_code), grouped as reported.
STATUS = {1: "killed", 3: "killed", 37: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
          36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", -11: "crashed",
          -9: "crashed", None: "not checked"}
# The ignored paths of the checkout the tests need (tests/services starts moto from the
# tracking virtualenv; tests/policy runs the IAM evaluator from npm): linked into mutants/,
# where the tests run, not copied.
LINKED = (".venv-tracking", ".venv-features", "tests/iam/node_modules")


def tool_version() -> str:
    return metadata.version(TOOL)


def checkout_files() -> list[str]:
    """Tracked files and untracked ones git does not ignore: the tree as it is now."""
    out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, check=True,
                         capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and not p.startswith("tests/iam/node_modules/")
            and (REPO / p).is_file()]


def prepare(module: Module, workdir: Path, files: tuple[str, ...], tests: tuple[str, ...]) -> None:
    """The checkout copied into workdir (mtimes kept, so mutmut sees what changed), with
    mutmut's configuration; mutants/ is mutmut's and is kept between runs."""
    workdir.mkdir(parents=True, exist_ok=True)
    for rel in checkout_files():
        source, target = REPO / rel, workdir / rel
        if target.exists() and target.stat().st_mtime == source.stat().st_mtime and \
                target.stat().st_size == source.stat().st_size:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    (workdir / "mlplat_mutate.py").write_text(PLUGIN)
    (workdir / "mutants").mkdir(exist_ok=True)
    (workdir / "mutants" / "mlplat_mutate.py").write_text(PLUGIN)
    if module.copy_from:
        shutil.copytree(REPO / module.copy_from, workdir / module.source_root, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for rel in LINKED:
        link = workdir / "mutants" / rel
        if (REPO / rel).exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(REPO / rel)

    def lines(values) -> str:
        return "\n    ".join(values)

    (workdir / "setup.cfg").write_text(
        "[mutmut]\n"
        f"source_paths={module.source_root}\n"
        f"only_mutate={lines(files)}\n"
        f"pytest_add_cli_args_test_selection={lines(t for t in tests if (workdir / t).exists() or t.startswith('-'))}\n"
        f"pytest_add_cli_args={lines(('-p', 'no:cacheprovider', *module.pytest_args))}\n"
        # torch, gRPC and moto's clients are not safe to fork from a process that used them:
        # each mutant forks from a server that has only collected the tests.
        "process_isolation=forkserver\n"
        # A mutant counts as timed out (an endless loop) when its run takes 5 times its tests'
        # measured time plus 60 s on the wall clock (twice that in CPU time). mutmut's own
        # allowance, 15 times plus 1 s, counts neither fixture set-up (a moto server, an
        # ONNX export) nor a machine others load: here it called mutants that pass "timed out".
        "timeout_multiplier=5\n"
        "timeout_constant=60\n"
        f"also_copy={lines(module.also_copy + ('bench', 'stacks', 'Pulumi.yaml'))}\n")


def run_mutmut(workdir: Path, budget_s: float, children: int, log, names: list[str] = ()) -> tuple[float, bool]:
    """mutmut run (of `names` only, where given: mutmut then retests them even if it has a
    result), stopped with its whole process group when the budget is spent."""
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "mutmut", "run", "--max-children", str(children), *names],
                               cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        process.wait(timeout=budget_s)
        stopped = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        stopped = True
    return time.monotonic() - start, stopped


def results(workdir: Path, files: tuple[str, ...]) -> dict[str, int | None]:
    """Each mutant's exit code, of the files in this run's scope."""
    codes: dict[str, int | None] = {}
    for file in files:
        meta = workdir / "mutants" / (file + ".meta")
        if meta.exists():
            codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


def diffs(workdir: Path, names: list[str]) -> dict[str, str]:
    """Each mutant's change, as `mutmut show` prints it."""
    if not names:
        return {}
    script = ("import json, sys\n"
              "from mutmut.mutation.diff_apply import find_mutant, get_diff_for_mutant\n"
              "out = {}\n"
              "for name in json.load(sys.stdin):\n"
              "    try:\n"
              "        out[name] = get_diff_for_mutant(name, path=find_mutant(name).path)\n"
              "    except Exception as err:\n"
              "        out[name] = f'(no diff: {err})'\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=workdir, input=json.dumps(names), text=True,
                          capture_output=True, timeout=600)
    if done.returncode != 0:
        return {name: f"(no diff: {done.stderr.strip().splitlines()[-1:]})" for name in names}
    return {name: "\n".join(line for line in text.splitlines() if line.startswith(("+", "-"))
                            and not line.startswith(("+++", "---")))
            for name, text in json.loads(done.stdout).items()}


def summarise(module: Module, files: tuple[str, ...], codes: dict[str, int | None], notes: dict, wall_s: float, stopped: bool,
              workdir: Path) -> dict:
    status = {name: STATUS.get(code, "suspicious") for name, code in codes.items()}
    count = {s: sum(1 for v in status.values() if v == s) for s in
             ("killed", "survived", "timeout", "no tests", "not checked", "suspicious", "crashed", "skipped")}
    explained = notes.get("mutants", {})
    survivors = sorted(n for n, s in status.items() if s in ("survived", "no tests", "suspicious"))
    changes = diffs(workdir, survivors)
    listed = []
    for name in survivors:
        note = explained.get(name, {})
        if "equivalent" in note:
            why = {"equivalent": note["equivalent"]}
        elif "killed_by" in note:  # the tool's verdict is older than the test added for it
            why = {"killed_by": note["killed_by"], "note": "mutmut's verdict predates this test; the next run "
                                                           "retests it"}
        else:
            why = {"note": "unexplained"}
        listed.append({"mutant": name, "status": status[name], "change": changes.get(name, ""), **why})
    equivalent = sum(1 for s in listed if "equivalent" in s)
    killed_by_new = [{"mutant": name, "killed_by": note["killed_by"], "now": status.get(name, "gone")}
                     for name, note in sorted(explained.items())
                     if "killed_by" in note and name in status]
    # A time-out is the tests noticing the mutant (an endless loop): counted as killed.
    detected = count["killed"] + count["timeout"] + count["crashed"]
    judged = len(codes) - count["not checked"] - count["skipped"] - equivalent
    score = round(detected / judged, 4) if judged else None
    # The same run as the tests stood before tests/**/test_mutants_*.py: what those kill
    # counted as surviving.
    new_kills = sum(1 for k in killed_by_new if k["now"] in ("killed", "timeout"))
    before = round((detected - new_kills) / judged, 4) if judged else None
    return {
        "mutated": list(files), "tests": list(module.tests), "pytest_args": list(module.pytest_args),
        "not_mutated": {f: why for f, why in module.not_mutated.items() if f not in files},
        "mutants": len(codes), **count, "equivalent": equivalent,
        "score": score, "meets_goal": bool(score is not None and score >= GOAL and not count["not checked"]),
        "wall_s": round(wall_s, 1), "stopped_by_budget": stopped,
        "score_without_new_tests": before, "killed_only_by_new_tests": new_kills,
        "first_run": notes.get("baseline", {}).get(module.name),
        "survivors": listed, "killed_by_new_tests": killed_by_new,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=sorted(SHORT) + sorted(MODULES),
                        help="one module (repeatable); default: all")
    parser.add_argument("--budget-s", type=float, default=1800.0, help="wall-clock limit of each module's run")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "mlplat-mutate")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--all-files", action="store_true", help="also the files left out for their run time")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the results the work directory holds (of earlier runs)")
    opts = parser.parse_args()
    chosen = [MODULES[SHORT.get(m, m)] for m in (opts.module or SHORT)]
    if REPO in opts.workdir.resolve().parents or opts.workdir.resolve() == REPO:
        parser.error("--workdir must be outside the checkout: mutated copies never go into it")
    notes = yaml.safe_load(NOTES.read_text()) if NOTES.exists() else {}
    notes = {"baseline": {}, "mutants": {}, **(notes or {})}

    previous = json.loads(opts.output.read_text()) if opts.output.exists() else {}
    machine = record()
    report = {name: data for name, data in previous.get("modules", {}).items()}
    for module in chosen:
        workdir = opts.workdir / module.name.replace("/", "_")
        files = module.mutate + (tuple(f for f, why in module.not_mutated.items() if why.startswith("time"))
                                 if opts.all_files else ())
        started = record()
        earlier = report.get(module.name, {})
        if opts.report_only:
            wall_s, stopped = earlier.get("wall_s", 0.0), earlier.get("stopped_by_budget", False)
            codes = results(workdir, files)
        else:
            prepare(module, workdir, files, module.tests + (module.more_tests if opts.all_files else ()))
            log_path = workdir / "mutmut.log"
            print(f"{module.name}: mutmut in {workdir} (log {log_path}), budget {opts.budget_s:.0f} s", flush=True)
            # A quarter of the budget is kept for running the survivors again (below).
            with log_path.open("w") as log:
                wall_s, stopped = run_mutmut(workdir, opts.budget_s * 0.75, opts.children, log)
            codes = results(workdir, files)
            if not codes:
                print(log_path.read_text(errors="replace")[-3000:])
                print(f"{module.name}: mutmut made no mutants; its log is above")
            # mutmut keeps a survivor's verdict until its function changes; a test added
            # since (tests/**/test_mutants_*.py) may kill it now: survivors are run again,
            # in the budget that is left, also when the first pass ran out of its share.
            again = sorted(n for n, c in codes.items() if STATUS.get(c) in ("survived", "no tests"))
            if again and wall_s < opts.budget_s - 30:
                with log_path.open("a") as log:
                    more_s, stopped = run_mutmut(workdir, opts.budget_s - wall_s, opts.children, log, again)
                wall_s += more_s
                codes = results(workdir, files)
        entry = report[module.name] = summarise(module, files, codes, notes, wall_s, stopped, workdir)
        if not opts.report_only:  # the machine as this module's run found it (others share it)
            entry["machine"] = describe(finish(started))
            entry["cpu"] = finish(started)
        elif "machine" in earlier:
            entry["machine"], entry["cpu"] = earlier["machine"], earlier["cpu"]
        print(f"  {entry['mutants']} mutants: {entry['killed']} killed, {entry['survived']} survived, "
              f"{entry['timeout']} timed out, {entry['no tests']} reached by no test, {entry['not checked']} not "
              f"checked, {entry['equivalent']} equivalent; score {entry['score']}; {wall_s:.0f} s"
              + ("; stopped by the budget" if stopped else ""), flush=True)
    machine = finish(machine)
    out = {
        "tool": TOOL, "version": tool_version(), "goal": GOAL,
        "score": "(killed + timed out) / (mutants - not checked - equivalent); a survivor reached by no test "
                 "counts as not killed",
        "machine": describe(machine), "cpu": machine, "date": str(date.today()),
        "modules": report,
    }
    opts.output.parent.mkdir(parents=True, exist_ok=True)
    opts.output.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {opts.output.relative_to(REPO) if REPO in opts.output.resolve().parents else opts.output}")
    missed = [name for name, data in report.items() if not data.get("meets_goal")]
    if missed:
        print(f"below the {GOAL:.0%} goal or unfinished: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
