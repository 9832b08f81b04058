"""Policy pack throughput, through the real analyzer process.

    .venv/bin/python bench/policy.py [--repeat 5] [--synthetic 5000] [--no-checkov]

For the prod stack and a synthetic stack of N resources (prod's resources copied under new
URNs and names until there are N), the pack is started as the Pulumi CLI starts it
(`python -m pulumi.policy`), configured with policies/config/prod.json, and sent every
resource to `Analyze` (as futures, as `mlplat preview` sends them) and all of them to
`AnalyzeStack`. The time from the first resource sent to the last answer is the check
time; start-up and configuration are printed apart. Each check time is the median of
`--repeat` runs against the same warm process.

Beside it: checkov's Kubernetes scan (`.venv-checkov/bin/checkov --framework kubernetes
--skip-download`) of the same stack's rendered Kubernetes manifests, the files
`mlplat preview --manifests DIR` writes. checkov sees only the Kubernetes objects; the pack
sees every resource.

Target: the whole prod stack checked in under 1 s. Results go to bench/results/policy.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from infra.preview.analyzer import PolicyPackProcess, StreamingAnalysis, load_policy_config  # noqa: E402
from infra.preview.engine import policy_config_path, run_preview  # noqa: E402
from infra.preview.mocks import Registration  # noqa: E402
from infra.preview.report import PreviewResult, write_manifests  # noqa: E402

RESULTS = REPO / "bench" / "results" / "policy.json"
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
TARGET_SECONDS = 1.0


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


def check_times(registrations: list[Registration], repeat: int) -> dict:
    """Start and configure the pack once, then time `repeat` full checks."""
    started = time.perf_counter()
    pack = PolicyPackProcess()
    try:
        policies = pack.info()
        pack.configure(policies, load_policy_config(policy_config_path("prod")), "policies/config/prod.json")
        startup = time.perf_counter() - started
        providers = {r.urn: r for r in registrations if r.is_provider}
        seconds, cpu, mandatory = [], [], 0
        pid = pack._proc.pid
        for _ in range(repeat):
            begun, cpu_begun = time.perf_counter(), _cpu_seconds(pid)
            analysis = StreamingAnalysis(pack, providers, lambda: policies)
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
            "check_seconds": round(median, 3), "runs": [round(s, 3) for s in seconds],
            "pack_cpu_seconds": round(statistics.median(cpu), 3),
            "resources_per_second": round(len(registrations) / median), "mandatory_violations": mandatory}


def checkov_time(result: PreviewResult) -> dict:
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
    parser.add_argument("--synthetic", type=int, default=5000)
    parser.add_argument("--no-checkov", action="store_true", help="skip the checkov comparison")
    args = parser.parse_args()

    prod = run_preview("prod")
    stacks = {"prod": prod.registrations, f"synthetic-{args.synthetic}": synthetic(prod.registrations,
                                                                                   args.synthetic)}
    rows = []
    for name, registrations in stacks.items():
        row = {"stack": name, **check_times(registrations, args.repeat)}
        if not args.no_checkov:
            as_result = dataclasses.replace(prod, stack=name, registrations=registrations)
            row["checkov"] = checkov_time(as_result)
        rows.append(row)

    print(f"Policy pack throughput ({rows[0]['policies']} rules, median of {args.repeat}; "
          f"{platform.machine()}, {_cores()} cores)")
    print(f"{'stack':<16}{'resources':>10}{'pack start s':>14}{'check s':>10}{'pack CPU s':>12}{'resources/s':>13}"
          f"{'k8s objects':>13}{'checkov s':>11}{'objects/s':>11}")
    for row in rows:
        ck = row.get("checkov", {})
        print(f"{row['stack']:<16}{row['resources']:>10}{row['startup_seconds']:>14.2f}{row['check_seconds']:>10.3f}"
              f"{row['pack_cpu_seconds']:>12.3f}"
              f"{row['resources_per_second']:>13}{ck.get('objects', '-'):>13}{_num(ck.get('seconds')):>11}"
              f"{_num(ck.get('objects_per_second')):>11}")
    verdict = "met" if rows[0]["check_seconds"] < TARGET_SECONDS else "MISSED"
    print(f"target: prod checked in under {TARGET_SECONDS:.0f} s: {verdict} ({rows[0]['check_seconds']:.3f} s)")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"date": date.today().isoformat(), "machine": platform.machine(),
                                   "cores": _cores(), "rows": rows}, indent=2) + "\n")
    return 0


def _num(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if __name__ == "__main__":
    sys.exit(main())
