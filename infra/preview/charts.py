"""The offline stand-in for the Kubernetes provider's `helm.v4.Chart` construct.

A Chart is a remote component: in a real `pulumi up` the provider renders the chart and
registers every object as a child resource, which the policy pack then judges one by one.
Under mocks nothing renders it, so the preview does what the provider does, with the same
Helm engine (infra/render.py): each rendered object becomes a child registration named
`<chart resource>:<namespace>/<name>`, typed `kubernetes:<group>/<version>:<Kind>`,
parented to the Chart, depending on its namespace and its CRD when the chart brings them.

Each chart is rendered with the API versions the stack's charts serve (their CRDs), as on
a running cluster; `ChartExpander` says when that can happen.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, struct_pb2

from infra.config import ConfigError
from infra.preview.mocks import SECRET_SIG, SIG_KEY, UNKNOWN, Registration
from infra.render import (
    Rendered,
    ReleaseSpec,
    crd_api_versions,
    release_spec,
    relevant_api_versions,
    render,
    served_api_versions,
    stack_independent,
)
from infra.versions import KUBERNETES_VERSION

CHART_TYPE = "kubernetes:helm.sh/v4:Chart"


@dataclass(frozen=True)
class ChartRender:
    """One Chart resource of the preview and what it renders to."""

    urn: str
    resource_name: str
    rendered: Rendered | None  # None: an input is unknown until apply, so nothing renders yet


def chart_spec(inputs: Mapping[str, Any], resource_name: str) -> ReleaseSpec | None:
    """The release a Chart registration asks for; None while an input is unknown."""
    if _has_unknown(inputs):
        return None
    chart = str(inputs.get("chart", "")).rsplit("/", 1)[-1]  # a name, or oci://host/path/<name>
    spec = release_spec(str(inputs.get("name") or resource_name), chart, str(inputs.get("namespace") or "default"),
                        inputs.get("values") or {})
    asked = str(inputs.get("version") or spec.version)
    if asked != spec.version:  # the program pins through infra/versions.py; anything else is a bug
        raise ValueError(f"Chart {resource_name} asks for {chart} {asked}, but {spec.version} is pinned")
    return spec


def _has_unknown(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_unknown(v) for v in value)
    return value == "[unknown]" or value == UNKNOWN


def type_token(obj: Mapping[str, Any]) -> str:
    api_version = str(obj.get("apiVersion", ""))
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{obj.get('kind')}"


def child_name(prefix: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name"))
    if meta.get("namespace"):
        name = f"{meta['namespace']}/{name}"
    return f"{prefix}:{name}"


def _is_secret(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == "v1" and obj.get("kind") == "Secret"


def _properties(obj: Mapping[str, Any]) -> struct_pb2.Struct:
    body = dict(obj)
    if _is_secret(body):
        for key in ("data", "stringData"):  # the provider marks a Secret's contents secret
            if key in body:
                body[key] = {SIG_KEY: SECRET_SIG, "value": body[key]}
    struct = struct_pb2.Struct()
    json_format.ParseDict(body, struct)
    return struct


def transformed(obj: dict[str, Any], typ: str, name: str, transforms: Sequence[Callable[..., Any]]) -> dict[str, Any]:
    """The object after the transforms the engine applies to a provider's child."""
    import pulumi

    for transform in transforms:
        result = transform(pulumi.ResourceTransformArgs(True, typ, name, obj, pulumi.ResourceOptions()))
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        if result is not None:
            obj = dict(result.props)
    return obj


async def _awaited(result: Any) -> Any:
    return await result


def inherited_transforms(reg: Registration, registrations: Mapping[str, Registration]) -> list[Callable[..., Any]]:
    """The resource's own transforms, then its parent's, up to the stack: the order the
    engine applies them in."""
    found: list[Callable[..., Any]] = []
    seen: Registration | None = reg
    while seen is not None:
        found += seen.transforms
        seen = registrations.get(seen.parent)
    return found


def children(chart: Registration, rendered: Rendered, make_urn: Callable[[str, str, str], str],
             transforms: Sequence[Callable[..., Any]] = ()) -> list[Registration]:
    """The child registrations the provider would make for one rendered chart."""
    namespaces: dict[str, str] = {}
    crds: dict[tuple[str, str], str] = {}
    regs = []
    for rendered_obj in rendered.objects:
        typ = type_token(rendered_obj)
        name = child_name(chart.name, rendered_obj)
        obj = transformed(rendered_obj, typ, name, transforms) if transforms else rendered_obj
        urn = make_urn(chart.urn, typ, name)
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Namespace":
            namespaces[str(meta.get("name"))] = urn
        elif obj.get("kind") == "CustomResourceDefinition":
            spec = obj.get("spec") or {}
            crds[(str(spec.get("group")), str((spec.get("names") or {}).get("kind")))] = urn
        regs.append((obj, Registration(
            urn=urn, type=typ, name=name, parent=chart.urn, custom=True, provider_ref=chart.provider_ref,
            properties=_properties(obj), dependencies=[], property_dependencies={}, protect=False,
            retain_on_delete=_keep(meta), known_inputs=obj,
            # Only a Secret's inputs differ once masked; the others are the object itself.
            _masked=None if _is_secret(obj) else obj,
        )))
    for obj, reg in regs:  # what the provider's dependency graph orders first
        meta = obj.get("metadata") or {}
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        needs = [namespaces.get(str(meta.get("namespace"))), crds.get((group, str(obj.get("kind"))))]
        reg.dependencies = [urn for urn in needs if urn and urn != reg.urn]
    return [reg for _obj, reg in regs]


def _keep(meta: Mapping[str, Any]) -> bool:
    """`helm.sh/resource-policy: keep` becomes retainOnDelete, as the provider maps it."""
    return (meta.get("annotations") or {}).get("helm.sh/resource-policy") == "keep"


class ChartExpander:
    """Fills in each Chart's children the way the provider does, as soon as it can.

    A chart whose templates test no API that a pinned chart's CRDs serve renders the same
    in every stack: it is expanded when it registers, so the pack judges its objects while
    the program still runs. The others wait until every chart has registered and are
    rendered with the API versions the stack's charts serve (their CRDs), repeated until
    that set stops growing."""

    def __init__(self, registrations: Mapping[str, Registration], make_urn: Callable[[str, str, str], str],
                 add: Callable[[Registration], None], kube_version: str = KUBERNETES_VERSION) -> None:
        self.registrations = registrations
        self.make_urn = make_urn
        self.add = add
        self.kube_version = kube_version
        self.renders: dict[str, ChartRender] = {}
        self.order: list[str] = []
        self._pending: list[tuple[Registration, ReleaseSpec]] = []
        self.error: ConfigError | None = None

    def on_register(self, reg: Registration) -> None:
        if reg.type != CHART_TYPE or self.error is not None:
            return
        self.order.append(reg.urn)
        try:
            spec = chart_spec(reg.inputs(mask_secrets=False), reg.name)
            if spec is None:
                self.renders[reg.urn] = ChartRender(reg.urn, reg.name, None)
            elif stack_independent(spec):
                self._expand(reg, spec, relevant_api_versions(spec, ()))
            else:
                self._pending.append((reg, spec))
        except ConfigError as err:
            # Raised once the program has run, from `finish`: raised here, on the thread
            # that registers the resource, it would surface once per chart.
            self.error = err

    def finish(self) -> list[ChartRender]:
        """Expand the charts that waited; every chart's render, in registration order.
        Raises the first chart error (a chart the cache lacks, one Helm refuses)."""
        if self.error is not None:
            raise self.error
        served: set[str] = set()
        for _ in range(3):
            rendered = [r.rendered for r in self.renders.values() if r.rendered is not None]
            grown = set(crd_api_versions(o for r in rendered for o in r.objects))
            grown |= set(served_api_versions(spec for _reg, spec in self._pending))
            if grown <= served:
                break
            served |= grown
            for reg, spec in self._pending:
                self.renders[reg.urn] = ChartRender(
                    reg.urn, reg.name, render(spec, self.kube_version, relevant_api_versions(spec, served)))
        for reg, _spec in self._pending:
            self._add_children(reg, self.renders[reg.urn].rendered)
        self._pending = []
        return [self.renders[urn] for urn in self.order]

    def _expand(self, reg: Registration, spec: ReleaseSpec, apis: Sequence[str]) -> None:
        rendered = render(spec, self.kube_version, apis)
        self.renders[reg.urn] = ChartRender(reg.urn, reg.name, rendered)
        self._add_children(reg, rendered)

    def _add_children(self, reg: Registration, rendered: Rendered | None) -> None:
        if rendered is None:
            return
        for child in children(reg, rendered, self.make_urn, inherited_transforms(reg, self.registrations)):
            self.add(child)
