"""Reports of an offline preview: the printed plan and verdict, JSON, Markdown and the
rendered Kubernetes manifests."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from infra.checks.images import references as image_references
from infra.preview.analyzer import Verdict
from infra.preview.charts import CHART_TYPE, ChartRender
from infra.preview.mocks import Registration
from infra.preview.pools import node_pool_lines
from infra.preview.markdown import md_code, md_text
from infra.preview.storage_report import storage_inventory, storage_markdown

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# The JSON report's format. Raise it when a field a reader relies on changes meaning or
# goes; adding a field keeps it. `mlplat preview --against` reads `stack`, `region`,
# `resources[].urn/type/name/parent/inputs/protect/retainOnDelete/region/provider/evidence`
# (a Kubernetes object's `inputs.apiVersion/kind/metadata.name/namespace`), `violations[]
# .policy/level/urn/message`, `policies[].policy/level/checked/passed/failed`,
# `engineErrors` and `summary.passed`: infra/preview/diff.py checks each (`_Report`).
REPORT_VERSION = 1
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


@dataclass
class PreviewResult:
    stack: str
    region: str
    registrations: list[Registration]
    verdict: Verdict
    engine_errors: list[str]
    seconds: float
    component_outputs: dict[str, list[str]] = field(default_factory=dict)  # urn -> output names
    charts: list[ChartRender] = field(default_factory=list)  # every helm.v4.Chart and what it rendered
    stack_outputs: dict[str, Any] = field(default_factory=dict)  # the stack's exports, secrets masked

    @cached_property
    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.registrations}

    @cached_property
    def report(self) -> dict[str, Any]:
        """The JSON report, built once for every writer."""
        return to_json(self)

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict.mandatory or self.engine_errors else 0


def resource_region(reg: Registration, by_urn: dict[str, Registration]) -> str | None:
    """Own `region` input, else the provider's; None for components and non-AWS types."""
    own = reg.inputs().get("region")
    if isinstance(own, str) and own:
        return own
    provider = by_urn.get(reg.provider_urn)
    if provider is not None:
        region = provider.inputs().get("region")
        return region if isinstance(region, str) else None
    return None


def policy_evidence(verdict: Verdict) -> list[dict[str, Any]]:
    rows = []
    for policy in verdict.policies:
        checked = verdict.checked.get(policy.name, set())
        failed = verdict.failed.get(policy.name, set())
        rows.append(
            {
                "policy": policy.name,
                "description": policy.description,
                "level": policy.level,
                "control": policy.framework,
                "scope": "stack" if policy.stack_policy else "resource",
                "checked": len(checked | failed),
                "passed": len(checked - failed),
                "failed": len(failed),
            }
        )
    return rows


def resource_evidence(verdict: Verdict) -> dict[str, dict[str, list[str]]]:
    """Per resource URN, the rules that judged it: passed and failed (a resource no rule
    judged has no entry)."""
    judged: dict[str, tuple[set[str], set[str]]] = {}
    for policy, urns in verdict.checked.items():
        for urn in urns:
            judged.setdefault(urn, (set(), set()))[0].add(policy)
    for policy, urns in verdict.failed.items():
        for urn in urns:
            if urn:
                judged.setdefault(urn, (set(), set()))[1].add(policy)
    return {urn: {"passed": sorted(checked - failed), "failed": sorted(failed)}
            for urn, (checked, failed) in judged.items()}


_NOT_JUDGED: dict[str, list[str]] = {"passed": [], "failed": []}


def to_json(result: PreviewResult) -> dict[str, Any]:
    by_urn = result.by_urn
    types = Counter(r.type for r in result.registrations)
    evidence = resource_evidence(result.verdict)
    return {
        "reportVersion": REPORT_VERSION,
        "stack": result.stack,
        "region": result.region,
        "resources": [
            {
                "urn": r.urn,
                "type": r.type,
                "name": r.name,
                "parent": r.parent or None,
                "region": resource_region(r, by_urn),
                "provider": r.provider_urn or None,
                "protect": r.protect,
                "retainOnDelete": r.retain_on_delete,
                "inputs": r.inputs(mask_secrets=True),
                "evidence": evidence.get(r.urn, _NOT_JUDGED),
            }
            for r in result.registrations
        ],
        "violations": [
            {"policy": v.policy, "level": v.level, "urn": v.urn or None, "message": v.message}
            for v in result.verdict.violations
        ],
        "engineErrors": result.engine_errors,
        # What the request paths of a diff resolve against (bucket and key names, tenants,
        # secrets), secrets masked.
        "outputs": result.stack_outputs,
        "charts": chart_summaries(result),
        "advisories": result.verdict.advisories,
        "policies": policy_evidence(result.verdict),
        "summary": {
            "resources": len(result.registrations),
            "byType": dict(sorted(types.items())),
            "mandatoryViolations": len(result.verdict.mandatory),
            "advisoryViolations": len(result.verdict.violations) - len(result.verdict.mandatory),
            "engineErrors": len(result.engine_errors),
            "passed": result.exit_code == 0,
            "seconds": round(result.seconds, 3),
        },
    }


def chart_summaries(result: PreviewResult) -> list[dict[str, Any]]:
    """One entry per helm.v4.Chart: what it renders, the images its objects run, the hooks
    Pulumi will not run, and the violations and refusals among its objects."""
    by_parent: dict[str, list[Registration]] = {}
    for reg in result.registrations:
        by_parent.setdefault(reg.parent, []).append(reg)
    failed = Counter(v.urn for v in result.verdict.violations)
    summaries = []
    for chart in result.charts:
        objects = by_parent.get(chart.urn, [])
        rendered = chart.rendered
        images = sorted({ref for reg in objects if reg.type != CRD_TYPE  # megabytes of schema, no image
                         for _where, ref in image_references(reg.inputs())})
        summaries.append({
            "release": chart.resource_name,
            "chart": rendered.release.chart if rendered else None,
            "version": rendered.release.version if rendered else None,
            "namespace": rendered.release.namespace if rendered else None,
            "objects": len(objects),
            "kinds": dict(sorted(Counter(str(reg.inputs().get("kind")) for reg in objects).items())),
            "images": images,
            "hooksNotRun": [f"{h.kind} {h.name} ({h.events})" for h in rendered.hooks] if rendered else [],
            "violations": sum(failed[reg.urn] for reg in objects),
            "refusals": sum(1 for e in result.engine_errors if e.startswith(f"the API server would refuse release "
                                                                            f"{chart.resource_name}:")),
            "rendered": rendered is not None,
        })
    return summaries


def awaiting_pin(result: PreviewResult) -> list[str]:
    """Image references of the stack's Kubernetes objects that name no digest: mirrors the
    plan has not pinned yet (which `mlplat mirror` and `pulumi up` refuse)."""
    found = set()
    for reg in result.registrations:
        if reg.custom and reg.type.startswith("kubernetes:") and not reg.is_provider:
            found |= {ref for _, ref in image_references(reg.inputs()) if "@sha256:" not in ref}
    return sorted(found)


def supply_line(result: PreviewResult) -> str:
    """One line on what the supply step must do before this stack can be applied."""
    tagged = awaiting_pin(result)
    if not tagged:
        return ""
    names = ", ".join(ref.rsplit("/", 1)[-1] for ref in tagged)
    return (f"Images awaiting a digest pin (named by tag here; `mlplat mirror` and `pulumi up` refuse them until "
            f"infra/versions.py pins them): {names}")


def chart_lines(result: PreviewResult) -> list[str]:
    """`release: chart@version, N objects, M images, V violations` per chart."""
    lines = []
    for c in result.report["charts"]:
        if not c["rendered"]:
            lines.append(f"{c['release']}: not rendered (an input is unknown until apply)")
            continue
        lines.append(f"{c['release']}: {c['chart']}@{c['version']} in {c['namespace']}, {c['objects']} objects, "
                     f"{len(c['images'])} images, {c['violations']} violations, {c['refusals']} refusals"
                     + (f", {len(c['hooksNotRun'])} hooks not run" if c["hooksNotRun"] else ""))
    return lines


def component_tree(result: PreviewResult) -> list[str]:
    """Indented lines: components and their children, custom resources counted by type."""
    children: dict[str, list[Registration]] = {}
    for reg in result.registrations:
        children.setdefault(reg.parent, []).append(reg)
    roots = [r for r in result.registrations if r.parent not in result.by_urn]
    lines: list[str] = []

    def walk(reg: Registration, depth: int) -> None:
        kids = children.get(reg.urn, [])
        lines.append(f"{'  ' * depth}{reg.type} {reg.name}")
        counts = Counter(k.type for k in kids if not kids_of(k))
        for kid in kids:
            if kids_of(kid):
                walk(kid, depth + 1)
        for typ, n in sorted(counts.items()):
            lines.append(f"{'  ' * (depth + 1)}{n} x {typ}")

    def kids_of(reg: Registration) -> bool:
        return bool(children.get(reg.urn)) or not reg.custom

    for root in roots:
        walk(root, 0)
    return lines


def plan_text(result: PreviewResult) -> str:
    data = result.report
    summary = data["summary"]
    lines = [f"Plan for stack {result.stack} in {result.region}: {summary['resources']} resources", ""]
    lines += component_tree(result)
    pools = node_pool_lines(result.registrations)
    lines += ["", *pools] if pools else []
    charts = chart_lines(result)
    lines += ["", "Helm charts (each object its own resource):", *[f"  {line}" for line in charts]] if charts else []
    supply = supply_line(result)
    lines += ["", supply] if supply else []
    lines += ["", "Resources by type:"]
    lines += [f"  {n:5d}  {t}" for t, n in summary["byType"].items()]
    lines += ["", verdict_text(result)]
    return "\n".join(lines)


def verdict_text(result: PreviewResult) -> str:
    verdict = result.verdict
    lines = []
    for error in result.engine_errors:
        lines.append(f"  engine error: {error}")
    by_policy: dict[str, list] = {}
    for v in verdict.violations:
        by_policy.setdefault(v.policy, []).append(v)
    for policy, items in sorted(by_policy.items()):
        lines.append(f"  {policy} ({items[0].level}): {len(items)} violation(s)")
        for v in items:
            lines.append(f"    - {v.message}" + (f"\n      {v.urn}" if v.urn else ""))
    mandatory = len(verdict.mandatory)
    advisory = len(verdict.violations) - mandatory
    head = "Policy verdict: PASSED" if result.exit_code == 0 else "Policy verdict: FAILED"
    head += f" ({mandatory} mandatory, {advisory} advisory violations, {len(verdict.policies)} policies)"
    return "\n".join([head, *lines])


def to_markdown(result: PreviewResult) -> str:
    data = result.report
    summary = data["summary"]
    status = "✅ passed" if summary["passed"] else "❌ blocked"
    out = [
        f"## Preview of {md_code(result.stack)} ({md_text(result.region)}): {status}",
        "",
        f"{summary['resources']} resources; {summary['mandatoryViolations']} mandatory and "
        f"{summary['advisoryViolations']} advisory violations; {summary['engineErrors']} engine errors.",
        "",
    ]
    if result.engine_errors:
        out += ["### Engine errors", ""] + [f"- {md_text(e)}" for e in result.engine_errors] + [""]
    supply = supply_line(result)
    out += [supply, ""] if supply else []
    if data["violations"]:
        out += ["### Violations", "", "| policy | level | resource | message |", "|---|---|---|---|"]
        for v in data["violations"]:
            out.append(f"| {md_code(v['policy'])} | {md_text(v['level'])} | {md_code(_short(v['urn']))} | "
                       f"{md_text(v['message'])} |")
        out.append("")
    out += ["### Evidence by policy", "", "| policy | control | level | checked | passed | failed |",
            "|---|---|---|---:|---:|---:|"]
    for row in data["policies"]:
        control = row["control"]
        ref = " ".join(x for x in (control.get("name"), control.get("reference")) if x) or "-"
        out.append(f"| {md_code(row['policy'])} | {md_text(ref)} | {md_text(row['level'])} | {row['checked']} | "
                   f"{row['passed']} | {row['failed']} |")
    if data["charts"]:
        out += ["", "### Helm charts", "",
                "Each chart is rendered as the Kubernetes provider applies it; every object is its own resource, "
                "judged by the pack and the API server's rules.", "",
                "| release | chart | objects | images | violations | refusals | hooks not run |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for c in data["charts"]:
            chart = md_code(f"{c['chart']}@{c['version']}") if c["rendered"] else "not rendered (unknown input)"
            out.append(f"| {md_code(c['release'])} | {chart} | {c['objects']} | {len(c['images'])} | "
                       f"{c['violations']} | {c['refusals']} | {len(c['hooksNotRun'])} |")
        out += ["", "<details><summary>Images by release</summary>", ""]
        for c in data["charts"]:
            out += [f"- {md_code(c['release'])}: " + ", ".join(md_code(i) for i in c["images"])]
        out += ["", "</details>"]
    by_urn = result.by_urn
    out += ["", *storage_markdown(storage_inventory(result.registrations, lambda r: resource_region(r, by_urn)))]
    out += ["", "<details><summary>Resources by type</summary>", "", "| type | count |", "|---|---:|"]
    out += [f"| {md_code(t)} | {n} |" for t, n in summary["byType"].items()]
    out += ["", "</details>", ""]
    return "\n".join(out)


def _short(urn: str | None) -> str:
    return urn.split("::")[-1] if urn else "(stack)"


def kubernetes_objects(result: PreviewResult) -> list[dict[str, Any]]:
    """Every Kubernetes object the stack applies, the charts' objects included."""
    return [body for _release, body in _objects_by_release(result)]


def _objects_by_release(result: PreviewResult) -> list[tuple[str | None, dict[str, Any]]]:
    charts = {r.urn: r.name for r in result.registrations if r.type == CHART_TYPE}
    objects = []
    for reg in result.registrations:
        if not reg.custom or not reg.type.startswith("kubernetes:") or reg.type == HELM_RELEASE:
            continue
        body = reg.inputs(mask_secrets=True)
        if "apiVersion" in body and "kind" in body:
            objects.append((charts.get(reg.parent), _masked_by_key(reg, body)))
    return objects


def _masked_by_key(reg: Registration, body: dict[str, Any]) -> dict[str, Any]:
    """A Secret whose whole `data` is secret keeps its keys, each value masked, so the
    written object still has the shape the API server expects."""
    masked = [key for key in ("data", "stringData") if body.get(key) == "[secret]"]
    if not masked:
        return body
    plain_body = reg.inputs(mask_secrets=False)
    return {**body, **{key: {name: "[secret]" for name in plain_body.get(key) or {}} for key in masked}}


def helm_releases(result: PreviewResult) -> list[dict[str, Any]]:
    return [r.inputs(mask_secrets=True) for r in result.registrations if r.type in (HELM_RELEASE, CHART_TYPE)]


# Left in every folder `write_manifests` fills: it replaces the whole folder, so it replaces
# only one it wrote before (or an empty one), never a folder of someone else's files.
MANIFESTS_MARKER = ".mlplat-manifests"


def manifests_problem(directory: Path) -> str | None:
    """Why `write_manifests` may not replace `directory`, as one line; None when it may."""
    from workloads.inputs import shown

    if not directory.is_dir() or (directory / MANIFESTS_MARKER).is_file() or not any(directory.iterdir()):
        return None
    return (f"{shown(directory)}: holds files that `mlplat preview` did not write (no {MANIFESTS_MARKER}); the "
            "preview replaces the whole manifests folder, so name a new or empty folder, or remove this one")


def write_manifests(result: PreviewResult, directory: Path) -> int:
    """One file per Kubernetes object, YAML (CRDs: JSON): the program's at the top, each
    chart's under charts/<release>/ beside `release.yaml` (the chart, version, namespace and
    values). The folder holds this preview's objects only: they are written to a new folder
    beside it, which then takes its place, so an object the program no longer makes leaves
    no file behind, and a failure halfway leaves the previous folder as it was."""
    problem = manifests_problem(directory)
    if problem:
        raise ValueError(problem)
    directory.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{directory.name}.new-", dir=directory.parent))
    try:
        count = _write_objects(result, fresh)
        (fresh / MANIFESTS_MARKER).write_text("written by `mlplat preview`; replaced whole by the next one\n")
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            directory.rename(old / directory.name)
            try:
                fresh.rename(directory)
            except OSError:
                (old / directory.name).rename(directory)
                raise
            shutil.rmtree(old)
        else:
            fresh.rename(directory)
    finally:
        if fresh.exists():
            shutil.rmtree(fresh)
    return count


def _write_objects(result: PreviewResult, directory: Path) -> int:
    count = 0
    for release, body in _objects_by_release(result):
        folder = directory / "charts" / _slug(release) if release else directory
        folder.mkdir(parents=True, exist_ok=True)
        meta = body.get("metadata") or {}
        parts = [body["kind"], meta.get("namespace") or "", meta.get("name") or "unnamed"]
        stem = _slug("-".join(p for p in parts if p))
        if body["kind"] == "CustomResourceDefinition":
            # Megabytes of schema: compact JSON (kubectl reads it as well; `jq .` pretty-prints
            # it) is what json's C encoder writes, a second faster for prod than indented
            # JSON and more so than YAML; nobody reads a CRD line by line.
            (folder / f"{stem}.json").write_text(json.dumps(body, separators=(",", ":")) + "\n")
        else:
            (folder / f"{stem}.yaml").write_text(_yaml(body))
        count += 1
    for release in helm_releases(result):
        name = release.get("name") or release.get("chart") or "release"
        folder = directory / "charts" / _slug(name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "release.yaml").write_text(_yaml(release))
    return count


# libyaml's emitter where PyYAML was built with it (the wheels are), else the Python one.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _yaml(body: dict[str, Any]) -> str:
    return yaml.dump(body, Dumper=_DUMPER, sort_keys=False)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-")


def write_json(result: PreviewResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Compact: json's C encoder only runs without `indent`, and the report is for tools
    # (`jq .` pretty-prints it); people read the Markdown.
    path.write_text(json.dumps(result.report, separators=(",", ":")) + "\n")


def write_markdown(result: PreviewResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_markdown(result))
