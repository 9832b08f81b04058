"""The architecture pictures: the offline preview's component tree as a Mermaid flowchart
(GitHub renders it), one per layer of prod, kept in docs/architecture.md (the cloud layer)
and docs/architecture-cluster.md (the cluster layer) and regenerated with
`mlplat diagram --stack prod --output docs/architecture.md` and
`mlplat diagram --stack prod-cluster --output docs/architecture-cluster.md`."""

from __future__ import annotations

from collections import Counter

from infra.preview.mocks import Registration
from infra.preview.report import PreviewResult

HEADER = """# Architecture

Generated from the offline preview's component tree of the `{stack}` stack by
`mlplat diagram --stack {stack} --output docs/{file}`; do not edit by hand.
Boxes are components (`ComponentResource`s); each leaf line counts the cloud or Kubernetes
resources a component declares. {total} resources in all, in {region}.

"""


def _label(text: str) -> str:
    return text.replace('"', "'")


def _short_type(resource_type: str) -> str:
    """`aws:ec2/launchTemplate:LaunchTemplate` -> `aws:LaunchTemplate`."""
    package = resource_type.split(":", 1)[0]
    return f"{package}:{resource_type.rsplit(':', 1)[-1]}"


def mermaid(result: PreviewResult) -> str:
    by_urn = result.by_urn
    children: dict[str, list[Registration]] = {}
    # Sorted, not in registration order: that order depends on the event loop.
    for reg in sorted(result.registrations, key=lambda r: (r.type, r.name)):
        children.setdefault(reg.parent if reg.parent in by_urn else "", []).append(reg)

    ids: dict[str, str] = {}

    def stable_id(urn: str) -> str:
        return ids.setdefault(urn, f"c{len(ids)}")

    lines = ["flowchart LR"]

    def walk(reg: Registration, depth: int) -> None:
        pad = "  " * depth
        kids = children.get(reg.urn, [])
        components = [k for k in kids if not k.custom]
        counts = Counter(_short_type(k.type) for k in kids if k.custom)
        lines.append(f'{pad}subgraph {stable_id(reg.urn)}["{_label(reg.type.rsplit(":", 1)[-1])}: {_label(reg.name)}"]')
        if counts:
            summary = "<br/>".join(f"{n} × {t}" for t, n in sorted(counts.items()))
            lines.append(f'{pad}  {stable_id(reg.urn)}_r["{summary}"]')
        for component in components:
            walk(component, depth + 1)
        lines.append(f"{pad}end")

    roots = children.get("", [])
    providers = [r for r in roots if r.is_provider]
    for provider in providers:
        region = provider.inputs().get("region")
        suffix = f" ({region})" if isinstance(region, str) else ""
        lines.append(f'  {stable_id(provider.urn)}(["provider {_label(provider.name)}{suffix}"])')
    for root in roots:
        if not root.custom:
            walk(root, 1)
    loose = Counter(_short_type(r.type) for r in roots if r.custom and not r.is_provider)
    if loose:
        lines.append('  stack_r["' + "<br/>".join(f"{n} × {t}" for t, n in sorted(loose.items())) + '"]')
    return "\n".join(lines)


def picture_file(stack: str) -> str:
    """Where a stack's picture is kept: each layer its own file, so regenerating one never
    overwrites the other."""
    return "architecture-cluster.md" if stack.endswith("-cluster") else "architecture.md"


def architecture_markdown(result: PreviewResult) -> str:
    head = HEADER.format(stack=result.stack, file=picture_file(result.stack), total=len(result.registrations),
                         region=result.region)
    return head + "```mermaid\n" + mermaid(result) + "\n```\n"
