"""Every benchmark runs. Each bench/*.py that is a script (it has a `__main__` block) runs
in its smoke mode (`--smoke`, bench/options.py: its own code paths at the smallest size)
in a fresh process of the suite's interpreter, and writes its record to this test's
folder; the record must hold what a real run's holds. A benchmark that nothing runs rots:
bench/preview.py once exited 1 on a clean clone, and was found so only when someone next
measured. No figure is judged here, only that each benchmark ran its course: a smoke run's
times mean nothing.

Services a benchmark needs it starts itself, with the service tests' helpers
(tests/services); what is missing fails with one line saying what to install, as there."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import children_cpu  # noqa: E402

# What a benchmark must never write in a smoke run: the records and plots the README shows.
REAL_FIGURES = (BENCH / "results", REPO / "docs" / "bench")
MLSERVER = REPO / ".venv-mlserver" / "bin" / "mlserver"
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
# Every record says where and when it ran.
MACHINE = {"machine", "cpu", "date"}


def need_registries() -> None:
    from tests.services.oci import require_tools

    require_tools()


def need_tracking() -> None:
    from tests.services.tracking import require_tracking

    require_tracking()


def need_features() -> None:
    from tests.services.features import require_features
    from tests.services.tracking import TRACKING_VENV

    require_features()
    if not (TRACKING_VENV / "bin" / "moto_server").exists():  # the benchmark's S3
        pytest.fail(f"{TRACKING_VENV.relative_to(REPO)} lacks moto: run `make setup`", pytrace=False)


def need_checkov() -> None:
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV.relative_to(REPO)} not found: run `make setup`", pytrace=False)


def need_mlserver() -> None:
    if not MLSERVER.exists():
        pytest.fail(f"{MLSERVER.relative_to(REPO)} not found: bench/serve_server.py needs MLServer; run "
                    "`make setup`", pytrace=False)


@dataclass
class Case:
    script: str
    check: Callable[[dict, Path], None]
    args: list[str] = field(default_factory=list)
    needs: Callable[[], None] = lambda: None
    suffix: str = ".json"


def positive(value) -> bool:
    return isinstance(value, (int, float)) and value > 0


def check_preview(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert set(record["stacks_s"]) == {"dev"} and positive(record["stacks_s"]["dev"])
    assert record["render"]["releases"] > 0 and record["render"]["objects"] > record["render"]["releases"]
    (row,) = record["synthetic"]
    assert row["pools"] == 1 and row["resources"] > 0 and row["bare_resources"] > 0
    assert positive(row["bare_s"]) and positive(row["full_s"]) and len(row["pair_ratios"]) == 1


def check_mirror(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["images"] == 1 and record["charts"] == 2 and record["bytes"] > 1 << 20  # two 1 MB platforms
    assert len(record["repeat_runs"]) == 1 and positive(record["first_s"]) and positive(record["repeat_s"])
    assert record["first"] and record["repeat"]  # each run's summary line


def check_policy(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    rows = {row["stack"]: row for row in record["rows"]}
    both, k8s = rows.pop("prod, both layers"), rows.pop("prod-cluster k8s")
    rules_off = rows.pop("prod, both layers, rules off")
    (synthetic,) = rows.values()
    assert synthetic["resources"] == both["resources"] + 10  # the copying ran
    for row in (both, k8s, rules_off, synthetic):
        assert row["resources"] > 0 and row["policies"] > 0 and len(row["runs"]) == 1, row["stack"]
    assert both["mandatory_violations"] == 0  # prod complies; the pack judged every resource
    checkov = k8s["checkov"]
    assert "error" not in checkov, checkov
    assert checkov["objects"] == 3 and positive(checkov["seconds"])
    assert checkov["checks_passed"] + checkov["checks_failed"] > 0  # checkov's JSON was read


def check_train(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["steps"] == 2 and record["warmup_steps"] == 1 and record["gpu_checks"] is None
    (run,) = record["runs"].values()
    assert run["world_size"] == 2 and run["measured_steps"] == 1  # two processes, the step after warm-up
    assert positive(run["tokens_per_s"]) and run["params"] > 0 and run["mfu"] is None


def check_serve(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    (comparison,) = record["comparisons"]
    assert comparison["sequence"] == 1 and positive(comparison["ceiling"])
    for mode in ("single", "batched"):
        assert comparison[mode]["requests"] > 0 and len(comparison["runs"][mode]) == 1, mode
    assert comparison["single"]["mean_batch"] == 1.0  # the single server never batches


def check_quantize(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    accuracy = record["accuracy"]
    assert accuracy["held_out_windows"] == 64 and set(accuracy["bits_per_byte"]) == {"fp32", "int8"}
    assert 0 <= accuracy["held_out_top1_agreement"] <= 1 and accuracy["train"]["steps"] > 0
    assert accuracy["file_bytes"]["int8"] < accuracy["file_bytes"]["fp32"]  # the graph was quantized
    speed = record["speed"]
    assert speed["model"].startswith("small") and speed["runs"] == 1
    assert [(r["batch"], r["tokens"]) for r in speed["rows"]] == [(1, 32), (1, 128), (8, 32), (8, 128)]
    assert all(positive(r["fp32_ms"]) and positive(r["int8_ms"]) for r in speed["rows"])


def check_serve_server(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["server"]["name"] == "MLServer" and record["load"]["repeat"] == 1
    (comparison,) = record["comparisons"]
    for mode in ("single", "batched"):
        assert comparison[mode]["requests"] > 0 and len(comparison["runs"][mode]) == 1, mode


def check_tracking(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert len(record["runs"]["untracked"]) == 2 and len(record["runs"]["tracked"]) == 1  # U T U
    assert len(record["loop"]["pair_overheads_pct"]) == 1
    lineage = record["lineage"]
    assert lineage["model"].startswith("models:/") and lineage["calls"] == 2 and lineage["requests_per_call"] > 0
    assert record["log_call"]["calls"] == 2


def check_features(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["entities_online"] == 200 and record["requests_per_size"] == 20
    assert [row["entities"] for row in record["rows"]] == [1, 10, 100]
    for row in record["rows"]:
        for path, samples in (("baseline", 20), ("reader", 20), ("sdk", 10), ("server_requests", 10),
                              ("server_http_client", 10)):
            assert row[path]["requests"] == samples and 0 < row[path]["p50_ms"] <= row[path]["p99_ms"], (row, path)
        assert row["reader"]["requests_per_s"] > 0 and row["reader"]["open_loop"]["requests"] == 10
        assert row["reader_p99_ratio"] == round(row["reader"]["p99_ms"] / row["baseline"]["p99_ms"], 2)
    assert record["spikes"]["during_token_renewal"]["requests"] == 20


def check_drift(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["rows"] == 1000 and record["columns"] == 8 and positive(record["peak_mib"])
    assert "f07" in record["drifted"]  # the shifted column went through the check and was found


def check_drift_alarm(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["settings"]
    for row in record["settings"]:
        assert row["trials"] == 1 and row["drift_runs"] in (0, 1) and len(row["wilson95"]) == 2, row["name"]


def check_preview_diff(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["repeat"] == 1
    for kind in ("realistic", "worst"):
        result = record[kind]
        assert set(result["stacks"]) == {"prod", "prod-cluster"} and len(result["runs_s"]) == 1, kind
        assert all(row["changes"] > 0 and row["resources"] > 0 for row in result["stacks"].values()), kind
    # Every string input changed is more change than one instance type.
    assert sum(r["changes"] for r in record["worst"]["stacks"].values()) > \
        sum(r["changes"] for r in record["realistic"]["stacks"].values())


def check_test_time(record: dict, _: Path) -> None:
    assert MACHINE <= set(record)
    assert record["base"] == "HEAD" and record["paths"] == ["tests/unit/test_catalog.py"]
    assert all("passed" in record["summaries"][tree] for tree in ("base", "head"))


def check_report(_: dict, output: Path) -> None:
    from bench.report import END, START

    table = output.read_text()
    assert table.startswith(START) and table.rstrip().endswith(END)
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| figure")]
    assert rows, "no figures in the table"
    plots = [line.split("(", 1)[1].rstrip(")") for line in table.splitlines() if line.startswith("![")]
    assert plots and all((output.parent / plot).is_file() for plot in plots)  # drawn beside the table


CASES = {
    "preview": Case("preview.py", check_preview),
    "mirror": Case("mirror.py", check_mirror, needs=need_registries),
    "policy": Case("policy.py", check_policy, needs=need_checkov),
    "train": Case("train.py", check_train),
    "serve": Case("serve.py", check_serve),
    "quantize": Case("quantize.py", check_quantize),
    "serve_server": Case("serve_server.py", check_serve_server, needs=need_mlserver),
    "tracking": Case("tracking.py", check_tracking, needs=need_tracking),
    "features": Case("features.py", check_features, needs=need_features),
    "drift": Case("drift.py", check_drift),
    "drift_alarm": Case("drift_alarm.py", check_drift_alarm),
    "preview_diff": Case("preview_diff.py", check_preview_diff),
    "test_time": Case("test_time.py", check_test_time, args=["--paths", "tests/unit/test_catalog.py"]),
    "report": Case("report.py", check_report, suffix=".md"),
}


def fingerprint() -> dict[str, str]:
    return {str(p.relative_to(REPO)): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in REAL_FIGURES if folder.exists() for p in sorted(folder.iterdir()) if p.is_file()}


def test_every_benchmark_has_a_smoke_run():
    """A new benchmark gets a case here, or this fails: the libraries (no `__main__`) are
    the only files of bench/ left out."""
    scripts = {p.name for p in BENCH.glob("*.py") if 'if __name__ == "__main__":' in p.read_text()}
    # `make mutate` (bench/mutate.py) measures the tests, not the platform: its smallest run
    # is mutmut's own setup over a module's tests, minutes, with mutmut installed apart.
    scripts -= {"mutate.py"}
    cased = {case.script for case in CASES.values()}
    assert not scripts - cased, f"no smoke run for bench/{', bench/'.join(sorted(scripts - cased))}: give it " \
                                "--smoke (bench/options.py) and a case in tests/bench/test_smoke.py"
    assert not cased - scripts, f"cases for scripts that are not in bench/: {sorted(cased - scripts)}"


# Each benchmark its own xdist group: together they are minutes of CPU, which the workers share.
@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(f"bench-{n}")) for n in CASES])
def test_benchmark_runs(name, tmp_path):
    case = CASES[name]
    case.needs()
    output = tmp_path / f"{name}{case.suffix}"
    before = fingerprint()
    started, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run([sys.executable, str(BENCH / case.script), "--smoke", "--output", str(output), *case.args],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    # Shown with -s or -rA, never judged: the CPU time says what a run costs on a busy machine.
    print(f"bench/{case.script} --smoke: {time.perf_counter() - started:.1f} s, CPU {children_cpu() - cpu:.1f} s")
    assert done.returncode == 0, f"bench/{case.script} --smoke exited {done.returncode}:\n" \
                                 f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert fingerprint() == before, f"bench/{case.script} --smoke wrote into bench/results or docs/bench"
    assert output.is_file(), f"bench/{case.script} --smoke wrote nothing to --output"
    case.check(json.loads(output.read_text()) if case.suffix == ".json" else {}, output)


def test_a_smoke_run_without_output_writes_to_a_new_temporary_folder():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = options.parse(parser, {"repeat": 1}, ["--smoke"])
    path = options.output(args, BENCH / "results" / "x.json")
    assert path.name == "x.json" and path.parent.is_dir() and not path.is_relative_to(REPO)
    assert list(path.parent.iterdir()) == []  # its own folder, not a shared one
    path.parent.rmdir()
    assert options.output(options.parse(argparse.ArgumentParser(), {}, []), BENCH / "results" / "x.json") == \
        BENCH / "results" / "x.json"


def test_smoke_sizes_are_defaults_that_the_command_line_overrides():
    def parsed(argv):
        parser = argparse.ArgumentParser()
        parser.add_argument("--repeat", type=int, default=5)
        parser.add_argument("--rows", type=int, default=1_000_000)
        return options.parse(parser, {"repeat": 1, "rows": 100}, argv)

    assert (parsed([]).repeat, parsed([]).rows) == (5, 1_000_000)  # the real sizes stay the defaults
    assert (parsed(["--smoke"]).repeat, parsed(["--smoke"]).rows) == (1, 100)
    assert (parsed(["--smoke", "--repeat", "3"]).repeat, parsed(["--smoke", "--repeat", "3"]).rows) == (3, 100)
    assert parsed(["--output", "x.json"]).output == Path("x.json")
