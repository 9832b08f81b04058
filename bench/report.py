"""Collects the figures in bench/results/*.json into one table in the README and draws
the plots in docs/bench/, each labelled with the machine and date it ran on. `make bench`
runs it after the benchmarks; it measures nothing itself.

    .venv/bin/python bench/report.py
    .venv/bin/python bench/report.py --smoke [--output FILE]   # the table to FILE, the plots beside it

With --output or --smoke the README and docs/bench/ are left alone (bench/options.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on build machines
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402

RESULTS = REPO / "bench" / "results"
PLOTS = REPO / "docs" / "bench"
README = REPO / "README.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
CEILING_SLACK = 1.05  # the serving ceiling is itself measured: within 5% of it is agreement


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _machine(data: dict[str, Any]) -> str:
    machine = data.get("machine") or data.get("device") or "?"
    if "cores" in data and "cores" not in str(machine):
        machine = f"{machine}, {data['cores']} cores"
    return f"{machine}, {data.get('date', '?')}"


def _save(fig: Any, name: str, caption: str, plots: Path) -> str:
    """Saves the plot in `plots`; its link from the table (the README's, or one beside it)."""
    fig.text(0.01, 0.01, caption, fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    plots.mkdir(parents=True, exist_ok=True)
    fig.savefig(plots / name, dpi=110)
    plt.close(fig)
    return (plots / name).relative_to(REPO).as_posix() if plots == PLOTS else name


def preview_rows(data: dict[str, Any], plots: Path = PLOTS) -> tuple[list[list[str]], str]:
    rows = [[f"offline preview, {stack}, both layers (warm render cache)", f"{s:.2f} s",
             "prod < 6 s" if stack == "prod" else ""] for stack, s in data["stacks_s"].items()]
    if "prod_cold_s" in data:
        rows.append(["offline preview, prod, both layers (cold render cache)", f"{data['prod_cold_s']:.2f} s",
                     "< 15 s"])
    render = data.get("render")
    if render:
        rows.append([f"rendering alone, {render['releases']} releases of every cluster layer in both device-plugin "
                     "modes",
                     f"cold {render['cold_s']:.2f} s, warm {render['warm_s']:.2f} s", ""])
    worst = max(data["synthetic"], key=lambda r: r["ratio"])
    rows.append(["preview / bare mocks, both layers, worst N (≤ 100 GPU pools)",
                 f"{worst['ratio']:.2f} (N={worst['pools']}, {worst['resources']} resources)", "≤ 1.3"])
    fig, ax = plt.subplots(figsize=(6, 3.6))
    synthetic = data["synthetic"]
    ax.plot([r["resources"] for r in synthetic], [r["bare_s"] for r in synthetic], "o-", label="bare mocks")
    ax.plot([r["resources"] for r in synthetic], [r["full_s"] for r in synthetic], "s-",
            label="full preview (mocks + policy pack + reports)")
    ax.set_xlabel("resources (synthetic prod, both layers, N GPU pools)")
    ax.set_ylabel("seconds")
    ax.set_title("Offline preview time against resource count")
    ax.legend()
    return rows, _save(fig, "preview.png", _machine(data), plots)


def preview_diff_rows(data: dict[str, Any]) -> list[list[str]]:
    """`mlplat preview --against` on two prod previews: what the diff adds to a preview."""
    rows = []
    for key, what in (("realistic", data.get("change", "a change")), ("worst", "every string input changed"),
                      ("role_widened", "research's trainer widened to the datasets bucket, request paths decided "
                                       "by the real IAM evaluator")):
        result = data.get(key)
        if result is None:
            continue
        layers = ", ".join(f"{stack} {row['total_s']:.2f} s ({row['changes']} changes"
                           + (f", {row['paths_decided']} paths decided in {row['paths_s']:.2f} s, "
                              f"{row['paths_opened']} opened" if row.get("paths_decided") else "") + ")"
                           for stack, row in result["stacks"].items())
        rows.append([f"preview diff (--against), prod both layers, {what}; read, diff and render, in process",
                     f"{result['both_layers_s']:.2f} s ({layers})", f"< {data['target_s']:.0f} s"])
    return rows


def policy_rows(data: dict[str, Any], plots: Path = PLOTS) -> tuple[list[list[str]], str]:
    rows = []
    for row in data["rows"]:
        rows.append([f"policy pack, {row['stack']} ({row['resources']} resources, {row['policies']} rules)",
                     f"{row['check_seconds']:.2f} s, {row['resources_per_second']} resources/s",
                     "prod < 1 s" if row["stack"] in ("prod", "prod, both layers") else ""])
        checkov = row.get("checkov")
        if checkov and checkov.get("seconds") is not None:
            same = f" ({row['checkov_over_pack']}x the pack on the same objects)" if "checkov_over_pack" in row else ""
            rows.append([f"checkov, {row['stack']} manifests ({checkov['objects']} objects, all its checks)",
                         f"{checkov['seconds']:.2f} s{same}", ""])
    fig, ax = plt.subplots(figsize=(6, 3.6))
    labels = [r["stack"] for r in data["rows"]]
    pack = [r["check_seconds"] for r in data["rows"]]
    checkov_s = [(r.get("checkov") or {}).get("seconds", 0) for r in data["rows"]]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], pack, width=0.4, label="policy pack (every resource of the set, every rule)")
    ax.bar([x + 0.2 for x in xs], checkov_s, width=0.4, label="checkov (the same Kubernetes objects)")
    ax.set_xticks(list(xs), labels)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("seconds")
    ax.set_title("Policy checks: our pack against checkov")
    ax.legend(fontsize=7)
    return rows, _save(fig, "policy.png", _machine(data), plots)


def train_rows(datasets: list[dict[str, Any]], plots: Path = PLOTS) -> tuple[list[list[list[str]]], str]:
    """Each record's rows (each record has its own machine: a CPU run here, a GPU run on a
    lent machine) and one plot of them all."""
    per_record = []
    labels, values = [], []
    for data in datasets:
        # Records from before they said what each run was: DDP on two CPU processes.
        measured = data.get("measured", "the trainer, 2 processes (gloo)")
        rows = []
        for name, run in data["runs"].items():
            mfu = f", MFU {run['mfu']:.0%}" if run.get("mfu") else ""
            what = run.get("what", name)
            rows.append([f"training, {name} ({what}); {measured}", f"{run['tokens_per_s']:,.0f} tokens/s{mfu}",
                         "H100 MFU ≥ 40%" if run.get("mfu") and "124M" in name else ""])
            labels.append(f"{name}\n{data['device'][:18]}")
            values.append(run["tokens_per_s"])
        per_record.append(rows)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.bar(labels, values)
    ax.set_yscale("log")  # CPU and GPU records differ by orders of magnitude
    ax.set_ylabel("tokens/s")
    ax.set_title("Training throughput")
    ax.tick_params(axis="x", labelsize=6, labelrotation=15)
    fig.tight_layout()
    return per_record, _save(fig, "train.png", "; ".join(_machine(d) for d in datasets), plots)


def serve_rows(data: dict[str, Any], plots: Path = PLOTS) -> tuple[list[list[str]], str]:
    # What was measured, short; records from before they said so were the same emulation.
    measured = data.get("measured", "in-process emulation")
    how = "in-process emulation of Triton's batcher, no server" if "emulation" in measured else measured
    rows = []
    for c in data["comparisons"]:
        ceiling = f" (ceiling here {c['ceiling']:.1f}x)" if "ceiling" in c else ""
        if "ceiling" in c and c["throughput_speedup"] > c["ceiling"] * CEILING_SLACK:
            # A gain past its own bound says the run was disturbed: shown as such, never as a result.
            ceiling = f" (above the ceiling measured beside it, {c['ceiling']:.1f}x: a disturbed run, rerun)"
        rows.append([f"serving, {c['sequence']}-token requests, batched vs single ({how})",
                     f"{c['throughput_speedup']:.1f}x throughput, p99 ratio {c['p99_ratio']:.2f}{ceiling}",
                     "≥ 3x at p99 ≤ 2x"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.6))
    seqs = [str(c["sequence"]) for c in data["comparisons"]]
    xs = range(len(seqs))
    left.bar([x - 0.2 for x in xs], [c["single"]["throughput_rps"] for c in data["comparisons"]], 0.4, label="single")
    left.bar([x + 0.2 for x in xs], [c["batched"]["throughput_rps"] for c in data["comparisons"]], 0.4,
             label="dynamic batching")
    left.set_xticks(list(xs), seqs)
    left.set_xlabel("tokens per request")
    left.set_ylabel("requests/s")
    left.set_title("Throughput")
    left.legend()
    right.plot(seqs, [c["single"]["p99_ms"] for c in data["comparisons"]], "o-", label="single p99")
    right.plot(seqs, [c["batched"]["p99_ms"] for c in data["comparisons"]], "s-", label="batched p99")
    right.set_xlabel("tokens per request")
    right.set_ylabel("ms")
    right.set_title("p99 latency")
    right.legend()
    return rows, _save(fig, "serve.png", _machine(data) + f", load average {data.get('load_average', '?')}",
                       plots)


def table(plots: Path = PLOTS) -> str:
    """The README's benchmark section; the plots drawn into `plots`."""
    sections: list[tuple[list[list[str]], str, str]] = []
    if (data := load("preview")) is not None:
        sections.append((*preview_rows(data, plots), _machine(data)))
    if (data := load("preview-diff")) is not None:
        sections.append((preview_diff_rows(data), "", _machine(data)))
    if (data := load("test-time")) is not None:
        rows = [[f"test suite, this change against {data['base'][:8]} (pytest, warm render cache)",
                 f"{data['base_s']:.0f} s -> {data['head_s']:.0f} s ({data['added_s']:+.0f} s)", "render check <= +60 s"]]
        sections.append((rows, "", _machine(data)))
    for data in (load(p.stem) for p in sorted(RESULTS.glob("make-test-time-*.json"))):  # one per CPU model
        probe = " -> ".join(map(str, data["import_torch_cpu_s"]))
        # A run that did not pass says so, here and among the earlier ones: its time is real,
        # and so is what failed (the record keeps the reports).
        before = ", ".join(f"{run['total_s'] / 60:.1f}{'' if run.get('passed', True) else ' (did not pass)'}"
                           for run in data.get("earlier", []))
        earlier = f"; before it on this CPU: {before} min" if before else ""
        outcome = "" if data.get("passed", True) else f"; did not pass: {data['summary']}"
        rows = [[f"make test on a fresh clone of {data['commit']}: new virtualenvs, empty caches",
                 f"{data['total_s'] / 60:.1f} min ({data['setup_s']:.0f} s setup, {data['tests_s']:.0f} s tests; "
                 f"{data['tests_cpu_s']:,} CPU-s; import torch {probe} CPU-s before -> after{outcome}{earlier})",
                 "<= 12 min"]]
        sections.append((rows, "", _machine(data)))
    if (data := load("policy")) is not None:
        sections.append((*policy_rows(data, plots), _machine(data)))
    trains = [t for t in (load(p.stem) for p in sorted(RESULTS.glob("train-*.json"))) if t]
    if trains:
        per_record, plot = train_rows(trains, plots)
        for i, (rows, data) in enumerate(zip(per_record, trains)):
            sections.append((rows, plot if i == 0 else "", f"{_machine(data)}, torch {data.get('torch', '?')}"))
    if (data := load("serve")) is not None:
        sections.append((*serve_rows(data, plots), _machine(data)))
    if (data := load("serve-server")) is not None:
        server = data["server"]
        rows = [[f"serving through a real server ({server['name']} {server['version']}, KServe v2 gRPC, clients on the "
                 f"same 2 cores), {c['sequence']}-token requests, adaptive batching vs single",
                 f"{c['batched']['throughput_rps']:,.0f} vs {c['single']['throughput_rps']:,.0f} req/s "
                 f"({c['throughput_speedup']:.2f}x), p99 {c['batched']['p99_ms']:.0f} vs {c['single']['p99_ms']:.0f} ms",
                 "measured, no target (Triton's figures come from the GPU lane)"]
                for c in data["comparisons"]]
        sections.append((rows, "", data["machine"] + f", {data['date']}"))
    if (data := load("quantize")) is not None:
        accuracy = data["accuracy"]
        longest = max(data["speed"]["rows"], key=lambda r: (r["batch"], r["tokens"]))
        rows = [[f"int8 vs fp32 (ONNX Runtime dynamic quantization), GPT-2 124M batch {longest['batch']} x "
                 f"{longest['tokens']} tokens, in process, no server",
                 f"{longest['speedup']:.2f}x faster; top-1 agreement {accuracy['held_out_top1_agreement']:.1%}, "
                 f"{accuracy['bits_per_byte']['int8']} vs {accuracy['bits_per_byte']['fp32']} bits/byte held out",
                 "holds accuracy (≥ 95% top-1)"]]
        sections.append((rows, "", data["machine"] + f", {data['date']}"))
    if (data := load("mirror")) is not None:
        rows = [[f"mlplat mirror, {data['images']} two-platform images ({data['bytes'] / 1e6:,.0f} MB) and "
                 f"{data['charts']} charts, local registries: first run, then repeat with nothing changed",
                 f"{data['first_s']:.2f} s, then {data['repeat_s']:.3f} s ({data['ratio']:.1%})",
                 f"repeat ≤ {data['target_ratio']:.0%} of first"]]
        sections.append((rows, "", _machine(data)))
    if (data := load("tracking")) is not None:
        loop, lineage = data["loop"], data["lineage"]
        rows = [[f"MLflow logging every {data['trainer']['track_every']} steps, CPU trainer, real server",
                 f"{loop['overhead_pct']:+.2f}% per step (identical runs spread {data['untracked_spread_pct']}%), "
                 f"call {data['log_call']['median_ms']:.2f} ms", "< 2%"],
                ["lineage query (dataset → run → checkpoint → model → Triton → images), real server",
                 f"median {lineage['median_ms']:.0f} ms, p95 {lineage['p95_ms']:.0f} ms", "< 1 s"]]
        sections.append((rows, "", data["machine"] + f", {data['date']}"))
    if (data := load("features")) is not None:
        rows = [[f"online reader (in process) vs direct Redis read, {r['entities']} "
                 f"entit{'y' if r['entities'] == 1 else 'ies'} per request, real Redis "
                 "(TLS, ACL user)",
                 f"p99 {r['reader']['p99_ms']:.2f} vs {r['baseline']['p99_ms']:.2f} ms = {r['reader_p99_ratio']:.2f}x "
                 f"(p50 {r['reader']['p50_ms']:.2f} vs {r['baseline']['p50_ms']:.2f}); Feast SDK p99 "
                 f"{r['sdk']['p99_ms']:.2f}, server p99 {r['server_http_client']['p99_ms']:.2f} ms",
                 "reader p99 ≤ 2x the direct read's"] for r in data["rows"]]
        sections.append((rows, "", data["machine"] + f", {data['date']}"))
    if (data := load("drift")) is not None:
        rows = [[f"drift check (Evidently), {data['rows']:,} rows x {data['columns']} columns, real CLI",
                 f"{data['seconds']:.1f} s, peak {data['peak_mib']:,} MiB", f"< {data['target_s']:.0f} s"]]
        sections.append((rows, "", data["machine"] + f", {data['date']}"))
    if (data := load("drift-alarm")) is not None:
        rows = [[f"drift verdict, {row['name']}, {data['columns']} mixed columns, {row['trials']} seeded runs "
                 "(in process)",
                 f"drift in {row['rate']:.1%} of runs (95% {row['wilson95'][0]:.1%}-{row['wilson95'][1]:.1%})",
                 row["goal"]] for row in data["settings"]]
        sections.append((rows, "", data["machine"] + f", {data['date']}"))
    lines = [START, "", "| figure | measured | target | machine, date |", "|---|---|---|---|"]
    for rows, _, machine in sections:
        lines += [f"| {name} | {value} | {target} | {machine} |" for name, value, target in rows]
    lines.append("")
    lines += [f"![{Path(plot).stem}]({plot})" for _, plot, _ in sections if plot]
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Smoke: the same table and plots from the same records, written apart (it has no sizes).
    args = options.parse(parser, {})
    if args.smoke or args.output is not None:
        path = options.output(args, README.with_name("bench-table.md"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(table(path.parent) + "\n")
        print(f"wrote {options.shown(path)} and its plots beside it")
        return
    text = README.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} ... {END} section")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(head + table() + tail)
    print(f"updated {README.relative_to(REPO)} and {PLOTS.relative_to(REPO)}/")


if __name__ == "__main__":
    main()
