"""The preview diff's speed: `mlplat preview --against` on two previews of prod.

Previews prod's two layers twice, for real (the program under mocks, the policy pack, the
charts rendered): as the stack file is (the base), and with the inference pool moved from
g6e.2xlarge to g6e.4xlarge (the head: launch template, node group, Kueue flavors and
queue, the GPU charts' DaemonSets and the Triton Deployment change). Each report is
written as `mlplat preview --json` writes it. Then, per run and for both layers together,
what `--against` adds to a preview:
- reading and checking the base's report file (`read_base_report`), and the head's
  report as the CLI sees it (a JSON round trip of the in-memory report);
- the diff (`diff_reports`, the security section included: every grant of both reports read
  and judged, infra/preview/security.py);
- the three renderings (terminal text, Markdown comment, JSON).
Also a worst case: the head with every string input of every resource changed; and a
change to a policy: the realistic head with research's trainer role widened to the whole
datasets bucket, so the security section decides the changed request paths on both sides
with the real IAM evaluator (Node, infra/preview/request_paths.py) and lists those opened.

Median of --repeat runs, in this process (the CLI runs the diff inside the preview's
process). Target: under 1 s for both layers. Results go to bench/results/preview-diff.json.

    .venv/bin/python bench/preview_diff.py [--repeat 7]
    .venv/bin/python bench/preview_diff.py --smoke [--output FILE]   # the four previews, one run of each
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import cpu_flags, describe, finish, record  # noqa: E402

RESULTS = REPO / "bench" / "results" / "preview-diff.json"
TARGET_S = 1.0
OLD, NEW = "g6e.2xlarge", "g6e.4xlarge"
MEASURED = ("in process, median of runs: read and check the base's JSON report, the head's report as the CLI "
            "sees it, diff_reports, and the text, Markdown and JSON renderings; both layers of prod previewed "
            "for real (mocks, policy pack, Helm) to make the two reports")


def previews(folder: Path) -> dict[str, dict[str, Path]]:
    """base/<stack>.json and head/<stack>.json for prod and prod-cluster."""
    from infra.config import load_stack
    from infra.preview.engine import run_environment
    from infra.preview.report import write_json

    stacks = folder / "stacks"
    stacks.mkdir()
    text = (REPO / "stacks" / "Pulumi.prod.yaml").read_text()
    if OLD not in text:
        raise SystemExit(f"bench/preview_diff.py: stacks/Pulumi.prod.yaml no longer runs {OLD}; pick another change")
    (stacks / "Pulumi.prod.yaml").write_text(text.replace(OLD, NEW))
    paths: dict[str, dict[str, Path]] = {"base": {}, "head": {}}
    for side, config in (("base", None), ("head", load_stack("prod", stacks))):
        for result in run_environment("prod", config=config):
            path = folder / side / f"{result.stack}.json"
            write_json(result, path)
            paths[side][result.stack] = path
    return paths


def changed_everywhere(report: dict[str, Any]) -> dict[str, Any]:
    """The report with every string input of every resource changed."""

    def touch(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: touch(v) for k, v in value.items()}
        if isinstance(value, list):
            return [touch(v) for v in value]
        return value + "-x" if isinstance(value, str) else value

    return {**report, "resources": [{**r, "inputs": touch(r["inputs"])} for r in report["resources"]]}


def widened_role(report: dict[str, Any]) -> dict[str, Any]:
    """The report with research's trainer also reading every object of the datasets bucket."""
    widened = copy.deepcopy(report)
    bucket = (widened.get("outputs") or {}).get("buckets", {}).get("datasets")
    for resource in widened["resources"]:
        inputs = resource["inputs"]
        if bucket and resource["type"] == "aws:iam/rolePolicy:RolePolicy" and \
                inputs.get("role") == "mlplat-prod-research-jobs_trainer":
            policy = json.loads(inputs["policy"])
            policy["Statement"].append({"Effect": "Allow", "Action": "s3:GetObject",
                                        "Resource": f"arn:aws:s3:::{bucket}/*"})
            inputs["policy"] = json.dumps(policy)
    return widened


def one_run(base_path: Path, head_report: dict[str, Any], stack: str) -> dict[str, float]:
    from infra.preview.diff import as_read, diff_json, diff_markdown, diff_reports, diff_text, read_base_report

    started = time.perf_counter()
    base = read_base_report(base_path, stack)
    head = as_read(head_report)
    loaded = time.perf_counter()
    diff = diff_reports(base, head)
    diffed = time.perf_counter()
    diff_text(diff)
    diff_markdown(diff)
    json.dumps(diff_json(diff), separators=(",", ":"))
    rendered = time.perf_counter()
    return {"read_s": loaded - started, "diff_s": diffed - loaded, "render_s": rendered - diffed,
            "total_s": rendered - started, "changes": len(diff.resources) + len(diff.objects),
            "paths_s": diff.security.paths.seconds, "paths_decided": diff.security.paths.compared,
            "paths_opened": len(diff.security.paths.opened)}


def measure(paths: dict[str, dict[str, Path]], heads: dict[str, dict[str, Any]], repeat: int) -> dict[str, Any]:
    per_stack: dict[str, Any] = {}
    totals = []
    for _ in range(repeat):
        total = 0.0
        for stack, base_path in paths["base"].items():
            run = one_run(base_path, heads[stack], stack)
            per_stack.setdefault(stack, []).append(run)
            total += run["total_s"]
        totals.append(total)
    rows = {}
    for stack, runs in per_stack.items():
        rows[stack] = {key: round(statistics.median(r[key] for r in runs), 4)
                       for key in ("read_s", "diff_s", "render_s", "total_s", "paths_s")}
        for key in ("changes", "paths_decided", "paths_opened"):
            rows[stack][key] = runs[0][key]
        rows[stack]["resources"] = len(heads[stack]["resources"])
        rows[stack]["report_bytes"] = paths["base"][stack].stat().st_size
    return {"both_layers_s": round(statistics.median(totals), 4), "runs_s": [round(t, 4) for t in totals],
            "stacks": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = options.parse(parser, {"repeat": 1})
    machine = record()
    print(f"Preview diff benchmark on {describe(machine)}, {date.today()}")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        paths = previews(Path(tmp))
        print(f"  four real previews (prod and prod-cluster, base and head) in {time.perf_counter() - started:.1f} s")
        heads = {stack: json.loads(path.read_text()) for stack, path in paths["head"].items()}
        realistic = measure(paths, heads, args.repeat)
        worst = measure(paths, {stack: changed_everywhere(h) for stack, h in heads.items()}, args.repeat)
        policy = measure(paths, {stack: widened_role(h) for stack, h in heads.items()}, args.repeat)
    machine = finish(machine)
    if not policy["stacks"]["prod"]["paths_opened"]:
        raise SystemExit("bench/preview_diff.py: widening research's trainer opened no request path; "
                         "the policy change no longer applies to prod")
    for name, result in (("realistic", realistic), ("every input changed", worst), ("a role widened", policy)):
        print(f"  {name}: both layers {result['both_layers_s']:.3f} s (target < {TARGET_S:.0f} s)")
        for stack, row in result["stacks"].items():
            print(f"    {stack}: {row['resources']} resources, {row['report_bytes'] / 1e6:.1f} MB report, "
                  f"{row['changes']} changes: read {row['read_s']:.3f} s, diff {row['diff_s']:.3f} s, "
                  f"render {row['render_s']:.3f} s; request paths {row['paths_s']:.3f} s "
                  f"({row['paths_decided']} decided on both sides, {row['paths_opened']} opened)")
    print(f"  {describe(machine)}; measured: {MEASURED}")
    options.write(options.output(args, RESULTS), {
        "machine": describe(machine), "cpu": machine, "cpu_flags": sorted(cpu_flags()), "date": str(date.today()),
        "measured": MEASURED, "change": f"prod's inference pool {OLD} -> {NEW}", "repeat": args.repeat,
        "target_s": TARGET_S, "realistic": realistic, "worst": worst, "role_widened": policy,
        "target_met": all(r["both_layers_s"] < TARGET_S for r in (realistic, worst, policy)),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
