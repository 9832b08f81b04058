"""Policy pack throughput, through the real analyzer process.

    .venv/bin/python bench/policy.py [--repeat 5] [--synthetic 5000] [--no-checkov]
    .venv/bin/python bench/policy.py --smoke [--output FILE]   # 1 run per set, checkov on 3 objects

The pack is started as the Pulumi CLI starts it (`python -m pulumi.policy`), configured with
policies/config/prod.json, and sent every resource to `Analyze` (through the relay process, as
`mlplat preview` sends them) and all of them to `AnalyzeStack`. The time from the first
resource sent to the last answer is the check time; the pack's start-up and configuration,
and the relay's start-up (which a preview spends while the program runs), are printed apart.
Each check time is the median of `--repeat` runs against the same warm process. Three sets:

- prod, both layers: every resource of the cloud layer and of the cluster layer (its charts'
  objects included), the target's set;
- the prod cluster layer's Kubernetes objects alone (and its Kubernetes provider), beside
  checkov's Kubernetes scan of exactly those objects as the manifests `mlplat preview
  --manifests DIR` writes (`.venv-checkov/bin/checkov --framework kubernetes --skip-download`,
  all its checks): the same work for both tools;
- a synthetic stack of N resources (prod's resources copied under new URNs and names);
- prod's two layers with every rule disabled: the analyzer protocol's own cost, which also
  shows how fast the machine is at the hour of the run.

Target: prod, both layers, checked in under 1 s. The record states the CPU model and flags,
the load before and after, and that both tools ran for real (no emulation). Results go to
bench/results/policy.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
from infra.preview.analyzer import PolicyPackProcess, StreamingAnalysis, load_policy_config  # noqa: E402
from infra.preview.engine import policy_config_path, run_preview  # noqa: E402
from infra.preview.mocks import Registration  # noqa: E402
from infra.preview.report import PreviewResult, write_manifests  # noqa: E402

RESULTS = REPO / "bench" / "results" / "policy.json"
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
TARGET_SECONDS = 1.0
POD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob", "Pod"}


def synthetic(registrations: list[Registration], size: int) -> list[Registration]:
    """`size` resources: prod's own, then copies of its non-provider resources under
    renamed URNs (parents, dependencies and Kubernetes object names renamed alike), all
    on prod's providers."""
    out = list(registrations)
    copyable = [r for r in registrations if not r.is_provider]
    copy = 0
    while len(out) < size:
        copy += 1
        renamed = {r.urn: f"{r.urn}-c{copy}" for r in copyable}
        for reg in copyable:
            properties = type(reg.properties)()
            properties.CopyFrom(reg.properties)
            if reg.type.startswith("kubernetes:") and "metadata" in properties and "name" in properties["metadata"]:
                properties["metadata"]["name"] = f"{properties['metadata']['name']}-c{copy}"
            out.append(dataclasses.replace(
                reg,
                urn=renamed[reg.urn],
                name=f"{reg.name}-c{copy}",
                parent=renamed.get(reg.parent, reg.parent),
                properties=properties,
                dependencies=[renamed.get(d, d) for d in reg.dependencies],
                property_dependencies={k: [renamed.get(u, u) for u in v] for k, v in reg.property_dependencies.items()},
            ))
            if len(out) == size:
                break
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux), so a busy machine can be told apart
    from a slow pack: on an idle machine the check's wall time is about the pack's CPU."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_times(registrations: list[Registration], repeat: int, config: dict | None = None) -> dict:
    """Start and configure the pack once (prod's config, or `config`), then time `repeat`
    full checks."""
    started = time.perf_counter()
    pack = PolicyPackProcess()
    try:
        policies = pack.info()
        pack.configure(policies, config if config is not None else load_policy_config(policy_config_path("prod")),
                       "policies/config/prod.json")
        startup = time.perf_counter() - started
        providers = {r.urn: r for r in registrations if r.is_provider}
        seconds, cpu, relay, mandatory = [], [], [], 0
        pid = pack._proc.pid
        for _ in range(repeat):
            # The relay that makes the calls starts before the clock: a preview starts it with
            # the program, which runs for seconds before the first resource is sent.
            begun = time.perf_counter()
            analysis = StreamingAnalysis(pack, providers, lambda: policies)
            analysis.ready()
            relay.append(time.perf_counter() - begun)
            begun, cpu_begun = time.perf_counter(), _cpu_seconds(pid)
            for reg in registrations:
                analysis.submit(reg)
            verdict = analysis.finish(registrations)
            analysis.close()
            seconds.append(time.perf_counter() - begun)
            cpu.append(_cpu_seconds(pid) - cpu_begun)
            mandatory = len(verdict.mandatory)
    finally:
        pack.close()
    median = statistics.median(seconds)
    return {"resources": len(registrations), "policies": len(policies), "startup_seconds": round(startup, 3),
            "relay_startup_seconds": round(statistics.median(relay), 3),
            "check_seconds": round(median, 3), "runs": [round(s, 3) for s in seconds],
            "pack_cpu_seconds": round(statistics.median(cpu), 3),
            "resources_per_second": round(len(registrations) / median), "mandatory_violations": mandatory}


def checkov_time(result: PreviewResult, limit: int | None = None) -> dict:
    """checkov's scan of the manifests of `result`; with `limit`, of that many objects, the
    pod-bearing ones first (most of checkov's Kubernetes checks are about pods, so that a
    few objects still run them)."""
    if limit is not None:
        chosen = sorted(result.registrations, key=lambda r: r.type.rsplit(":", 1)[-1] not in POD_KINDS)[:limit]
        result = dataclasses.replace(result, registrations=chosen)
    with tempfile.TemporaryDirectory() as out:
        directory = Path(out) / "manifests"
        objects = write_manifests(result, directory)
        if not CHECKOV.exists():
            return {"objects": objects, "error": f"{CHECKOV.relative_to(REPO)} not found"}
        begun = time.perf_counter()
        done = subprocess.run([str(CHECKOV), "-d", str(directory), "--framework", "kubernetes", "--skip-download",
                               "--quiet", "--compact", "-o", "json"], capture_output=True, text=True)
        seconds = time.perf_counter() - begun
    summary = {}
    try:
        report = json.loads(done.stdout or "{}")
        reports = report if isinstance(report, list) else [report]
        summary = {k: sum(r.get("summary", {}).get(k, 0) for r in reports) for k in ("passed", "failed")}
    except json.JSONDecodeError:
        pass
    return {"objects": objects, "seconds": round(seconds, 3),
            "objects_per_second": round(objects / seconds, 1) if objects else 0, "exit_code": done.returncode,
            **({"checks_" + k: v for k, v in summary.items()})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--synthetic", type=int, default=5000,
                        help="resources in the synthetic set (0: prod's two layers and 10 copies more)")
    parser.add_argument("--no-checkov", action="store_true", help="skip the checkov comparison")
    parser.add_argument("--checkov-objects", type=int, help="checkov scans only the first N objects (default: all)")
    # Smoke: one run per set; a synthetic set a few resources larger than prod's, so that the
    # copying runs; checkov started on three objects (its start-up dominates any scan).
    args = options.parse(parser, {"repeat": 1, "synthetic": 0, "checkov_objects": 3})

    machine = record()
    cloud, cluster = run_preview("prod"), run_preview("prod-cluster")
    kubernetes = [r for r in cluster.registrations if r.type.startswith("kubernetes:") and r.custom]
    both = cloud.registrations + cluster.registrations
    size = args.synthetic or len(both) + 10
    sets = {
        "prod, both layers": both,
        "prod-cluster k8s": kubernetes,
        f"synthetic-{size}": synthetic(both, size),
    }
    rows = []
    # The analyzer protocol alone (every rule disabled): what a check costs before any rule runs,
    # and a measure of how fast the machine is at the hour of the run.
    floor = {"stack": "prod, both layers, rules off",
             **check_times(sets["prod, both layers"], args.repeat, config={"all": "disabled"})}
    for name, registrations in sets.items():
        row = {"stack": name, **check_times(registrations, args.repeat)}
        if name == "prod-cluster k8s" and not args.no_checkov:
            row["checkov"] = checkov_time(dataclasses.replace(cluster, registrations=registrations),
                                          args.checkov_objects)
            if row["checkov"].get("seconds"):
                row["checkov_over_pack"] = round(row["checkov"]["seconds"] / row["check_seconds"], 1)
        rows.append(row)
    rows.append(floor)
    machine = finish(machine)

    print(f"Policy pack throughput ({rows[0]['policies']} rules, median of {args.repeat}; {describe(machine)}; "
          "the real pack process and the real checkov, no emulation)")
    print(f"{'set':<20}{'resources':>10}{'pack start s':>14}{'relay start s':>15}{'check s':>10}{'pack CPU s':>12}{'resources/s':>13}"
          f"{'k8s objects':>13}{'checkov s':>11}")
    for row in rows:
        ck = row.get("checkov", {})
        print(f"{row['stack']:<20}{row['resources']:>10}{row['startup_seconds']:>14.2f}"
              f"{row['relay_startup_seconds']:>15.2f}{row['check_seconds']:>10.3f}"
              f"{row['pack_cpu_seconds']:>12.3f}{row['resources_per_second']:>13}{ck.get('objects', '-'):>13}"
              f"{_num(ck.get('seconds')):>11}")
    same = next(r for r in rows if r["stack"] == "prod-cluster k8s")
    if "checkov_over_pack" in same:
        print(f"same objects ({same['checkov']['objects']} Kubernetes objects): checkov {same['checkov']['seconds']:.2f} s"
              f", the pack {same['check_seconds']:.3f} s: checkov takes {same['checkov_over_pack']}x as long")
    print(f"the rules' own share of prod's check: {rows[0]['check_seconds'] - floor['check_seconds']:.3f} s over the "
          f"protocol's {floor['check_seconds']:.3f} s")
    verdict = "met" if rows[0]["check_seconds"] < TARGET_SECONDS else "MISSED"
    print(f"target: prod, both layers, checked in under {TARGET_SECONDS:.0f} s: {verdict} "
          f"({rows[0]['check_seconds']:.3f} s)")

    options.write(options.output(args, RESULTS), {
        "date": date.today().isoformat(), "machine": describe(machine), "cpu": machine, "cores": _cores(),
        "measured": "the pack process (python -m pulumi.policy) and checkov 3.3.30, both run for real on this machine",
        "rows": rows})
    return 0


def _num(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if __name__ == "__main__":
    sys.exit(main())
