"""Render a Helm release offline the way `kubernetes.helm.v4.Chart` applies it.

The Kubernetes provider's Chart runs `helm template` with the cluster's version and API
groups, drops every hook (`helm.sh/hook`: Pulumi applies no hook), adds the CRDs of the
chart and of its enabled subcharts, gives namespaced objects the release namespace, and
registers what is left, one resource per object. `render` does the same with the real
Helm engine (helm-python-sdk) on the chart from the cache (infra/chart_cache.py), so the
preview and the checks see what will be applied.

Renders are cached by chart, version and a digest of everything else that goes in
(release name, namespace, values, Kubernetes version, API versions): in memory for the
process and on disk (`~/.cache/mlplat/renders`), so a warm preview re-renders only the
releases whose inputs changed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from infra.chart_cache import ChartCacheError, locate
from infra.config import ConfigError
from infra.versions import CHARTS, KUBERNETES_VERSION, built_in_api_versions

HOOK_ANNOTATION = "helm.sh/hook"
# Bump when what a cached render holds changes shape.
RENDER_FORMAT = 1


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader, reading a lone `=` as the string Go's YAML reads (PyYAML
    alone resolves it to the YAML 1.1 `value` tag and cannot construct it)."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))
_LOADER = _Loader


def load_documents(text: str) -> list[Any]:
    """Every document of a YAML stream, read as Go's YAML (and the API server) reads it."""
    return list(yaml.load_all(text, Loader=_LOADER))

# Built-in kinds that live outside namespaces (`kubectl api-resources --namespaced=false`
# on a 1.34 cluster, less the kinds no chart creates).
CLUSTER_SCOPED = frozenset({
    "APIService", "CertificateSigningRequest", "ClusterRole", "ClusterRoleBinding", "ClusterTrustBundle",
    "ComponentStatus", "CSIDriver", "CSINode", "CustomResourceDefinition", "DeviceClass", "FlowSchema",
    "IngressClass", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "MutatingWebhookConfiguration",
    "Namespace", "Node", "PersistentVolume", "PriorityClass", "PriorityLevelConfiguration", "RuntimeClass",
    "StorageClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration", "VolumeAttachment", "VolumeAttributesClass",
})


class RenderError(ConfigError):
    """A release that Helm refuses to render: its values or its templates."""


@dataclass(frozen=True)
class ReleaseSpec:
    """One release as the program declares it."""

    name: str
    chart: str  # the chart's name in infra.versions.CHARTS
    version: str
    namespace: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def key(self, kube_version: str, api_versions: Sequence[str]) -> str:
        text = json.dumps({
            "format": RENDER_FORMAT, "chart": self.chart, "version": self.version, "name": self.name,
            "namespace": self.namespace, "values": self.values, "kube": kube_version,
            "apis": sorted(api_versions),
        }, sort_keys=True, separators=(",", ":"), default=list)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Hook:
    """A hook the chart would have Helm run; Pulumi does not run it."""

    kind: str
    name: str
    events: str  # the annotation's value, e.g. "pre-install,pre-upgrade"


@dataclass(frozen=True)
class Rendered:
    release: ReleaseSpec
    objects: tuple[dict[str, Any], ...]  # what will be applied: CRDs first, then the templates
    hooks: tuple[Hook, ...]  # what is dropped
    source: str  # where the chart came from (the cache path)


def kube_version_string(minor: str = KUBERNETES_VERSION) -> str:
    """`1.34` -> `v1.34.0`, the form Helm's .Capabilities.KubeVersion takes."""
    return f"v{minor}.0" if minor.count(".") == 1 else f"v{minor.lstrip('v')}"


def crd_api_versions(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """The `group/version` and `group/version/Kind` entries a cluster serves once these
    CRDs exist: what `.Capabilities.APIVersions.Has` looks for."""
    found: set[str] = set()
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = obj.get("spec") or {}
        group, kind = spec.get("group"), (spec.get("names") or {}).get("kind")
        for version in spec.get("versions") or []:
            if version.get("served", True):
                found |= {f"{group}/{version['name']}", f"{group}/{version['name']}/{kind}"}
    return sorted(found)


# --- The engine ---------------------------------------------------------------------------

_memory: dict[str, Rendered] = {}
_charts: dict[Path, Any] = {}
_lock = threading.Lock()


def render_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlplat" / "renders"


def release_spec(name: str, chart: str, namespace: str, values: Mapping[str, Any]) -> ReleaseSpec:
    pinned = CHARTS.get(chart)
    if pinned is None:
        raise RenderError(f"release {name}: chart {chart!r} is not pinned in infra/versions.py CHARTS")
    return ReleaseSpec(name=name, chart=chart, version=pinned.version, namespace=namespace, values=dict(values))


def render(
    spec: ReleaseSpec,
    kube_version: str = KUBERNETES_VERSION,
    api_versions: Sequence[str] = (),
    use_disk_cache: bool = True,
) -> Rendered:
    key = spec.key(kube_version, api_versions)
    hit = _memory.get(key)
    if hit is not None:
        return hit
    disk = render_cache_dir() / f"{key}.json"
    source = locate(spec.chart, spec.version)
    result = _read_cached(disk, spec, str(source)) if use_disk_cache else None
    if result is None:
        result = _render(spec, source, kube_version, api_versions)
        if use_disk_cache:
            _write_cached(disk, result)
    _memory[key] = result
    return result


def _load_chart(source: Path) -> Any:
    """The chart, loaded once per process, for what only reads it (metadata, values, CRDs).
    Never render with it: Helm drops a subchart that a render's values turn off from the
    loaded chart itself, so a later render of the same handle would lack it."""
    with _lock:
        chart = _charts.get(source)
        if chart is None:
            chart = _charts[source] = _fresh_chart(source)
        return chart


def _fresh_chart(source: Path) -> Any:
    """A chart handle of its own, for one render (tens of milliseconds for the largest)."""
    from helm_python import Chart
    from helm_python.errors import HelmError

    try:
        return Chart.load(source)
    except HelmError as err:
        raise ChartCacheError(f"{source}: not a loadable chart: {_one_line(str(err))}") from None


def templates(spec: ReleaseSpec, kube_version: str = KUBERNETES_VERSION,
              api_versions: Sequence[str] = ()) -> tuple[dict[str, str], frozenset[str]]:
    """The chart's rendered templates (path -> text) and the subcharts its values turn
    off: Helm's raw output, uncached, for checks that render many variants of a release."""
    source = locate(spec.chart, spec.version)
    manifests, merged = _templates(spec, source, kube_version, api_versions)
    return manifests, disabled_subcharts(_load_chart(source).metadata, merged)


def _templates(spec: ReleaseSpec, source: Path, kube_version: str,
               api_versions: Sequence[str]) -> tuple[dict[str, str], dict[str, Any]]:
    from helm_python import _native
    from helm_python.errors import HelmError

    values = _wire(spec.values)
    options = {"name": spec.name, "namespace": spec.namespace, "kube_version": kube_version_string(kube_version),
               "api_versions": list(api_versions), "is_install": True}
    with _fresh_chart(source) as chart:
        try:
            chart.validate_schema(values)
            merged = chart.merge_values(values)
            # The packaged Chart.render() does not pass the Kubernetes or API versions; the
            # library's own render call does.
            manifests = json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values),
                                                       json.dumps(options)))
        except HelmError as err:
            raise RenderError(f"{_where(spec)}: helm: {_one_line(str(err))}") from None
    return manifests, merged


def _where(spec: ReleaseSpec) -> str:
    return f"release {spec.name} (chart {spec.chart} {spec.version})"


def _render(spec: ReleaseSpec, source: Path, kube_version: str, api_versions: Sequence[str]) -> Rendered:
    manifests, merged = _templates(spec, source, kube_version, api_versions)
    chart = _load_chart(source)
    where = _where(spec)
    objects: list[dict[str, Any]] = []
    hooks: list[Hook] = []
    for path in sorted(manifests):
        if path.endswith("NOTES.txt"):
            continue
        try:
            documents = load_documents(manifests[path])
        except yaml.YAMLError as err:
            raise RenderError(f"{where}: {path} renders invalid YAML: {_one_line(str(err))}") from None
        for doc in documents:
            if not isinstance(doc, dict) or not doc:
                continue
            hook = ((doc.get("metadata") or {}).get("annotations") or {}).get(HOOK_ANNOTATION)
            if hook:
                hooks.append(Hook(str(doc.get("kind")), str((doc.get("metadata") or {}).get("name")), str(hook)))
                continue
            objects.extend(_expand_lists(doc))
    crds = _enabled_crds(chart, source, merged, where)
    scopes = {(c["spec"]["group"], c["spec"]["names"]["kind"]): c["spec"].get("scope") == "Namespaced"
              for c in crds if c.get("kind") == "CustomResourceDefinition"}
    for obj in objects:
        _default_namespace(obj, spec.namespace, scopes)
    return Rendered(spec, tuple(crds + objects), tuple(hooks), str(source))


def _expand_lists(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """`kind: List` documents hold objects; the provider registers each item."""
    if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        return [item for item in doc["items"] if isinstance(item, dict)]
    return [doc]


def _default_namespace(obj: dict[str, Any], namespace: str, crd_scopes: Mapping[tuple[str, str], bool]) -> None:
    """Namespaced objects without a namespace get the release's, as the provider does.
    Kinds of other charts' CRDs are left alone: the provider cannot tell their scope
    before the cluster serves them either."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or meta.get("namespace"):
        return
    kind = str(obj.get("kind"))
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    if (group, kind) in crd_scopes:
        namespaced = crd_scopes[(group, kind)]
    elif "." not in group or group.endswith(".k8s.io"):
        namespaced = kind not in CLUSTER_SCOPED
    else:
        return
    if namespaced:
        meta["namespace"] = namespace


_crd_cache: dict[tuple[Path, frozenset[str]], list[dict[str, Any]]] = {}


def disabled_subcharts(metadata: Mapping[str, Any], merged: Mapping[str, Any]) -> frozenset[str]:
    """Names (and aliases) of the subcharts the values turn off: Helm's dependency
    conditions, where the first condition path that holds a bool decides."""
    disabled: set[str] = set()
    for dep in metadata.get("dependencies") or []:
        for condition in str(dep.get("condition") or "").split(","):
            value = _lookup(merged, condition.strip())
            if isinstance(value, bool):
                if not value:
                    disabled |= {str(dep.get("name")), str(dep.get("alias") or dep.get("name"))}
                break
    return frozenset(disabled)


def _enabled_crds(chart: Any, source: Path, merged: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """The CRDs under crds/ of the chart and of each subchart its values enable (Helm's
    dependency conditions: the first condition path that is a bool decides). Parsed once
    per chart and set of disabled subcharts: they are the bulk of some charts' bytes."""
    disabled = disabled_subcharts(chart.metadata, merged)
    key = (source, disabled)
    if key in _crd_cache:
        return list(_crd_cache[key])  # shared, read-only: nothing downstream edits a CRD
    crds = []
    for entry in chart.crds:
        parts = Path(entry["filename"]).parts
        # <chart>/crds/x.yaml, or <chart>/charts/<subchart>/crds/x.yaml
        if len(parts) > 3 and parts[1] == "charts" and parts[2] in disabled:
            continue
        try:
            docs = load_documents(entry["data"])
        except yaml.YAMLError as err:
            raise RenderError(f"{where}: {entry['filename']} is invalid YAML: {_one_line(str(err))}") from None
        crds += [d for d in docs if isinstance(d, dict) and d]
    _crd_cache[key] = crds
    return list(crds)


_HAS = re.compile(r"APIVersions\.Has\s+(\"[^\"]+\"|\S+)")


def asked_api_versions(spec: ReleaseSpec) -> frozenset[str] | None:
    """The API versions a chart's templates (its subcharts' included) test with
    `.Capabilities.APIVersions.Has "<literal>"`; None when one tests something computed,
    so that any served API may matter. A render depends on the served APIs only through
    these."""
    asked = chart_facts(spec.chart, spec.version)["asked"]
    return None if asked is None else frozenset(asked)


@cache
def chart_facts(name: str, version: str) -> dict[str, Any]:
    """What the renderer needs to know of a chart before rendering it, read once per chart
    version (versions are immutable) and kept on disk beside the renders: the API versions
    its templates test (`asked`, None when one is computed) and the API groups of the CRDs
    it can install (`groups`, from crds/ and from templates)."""
    path = render_cache_dir() / f"facts-{RENDER_FORMAT}-{name}-{version}.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    source = locate(name, version)
    asked: set[str] | None = set()
    groups: set[str] = set()
    for text in [*_template_texts(source), *(entry["data"] for entry in _load_chart(source).crds)]:
        groups |= set(_GROUP.findall(text))
        for match in _HAS.findall(text):
            if not match.startswith('"'):
                asked = None
            elif asked is not None:
                asked.add(match.strip('"'))
    facts = {"asked": None if asked is None else sorted(asked), "groups": sorted(groups)}
    _write_atomically(path, json.dumps(facts))
    return facts


def _template_texts(source: Path) -> Iterator[str]:
    """The text of every template of a chart folder or archive, nested archives included."""
    if source.is_dir():
        for path in sorted(source.rglob("*")):
            if path.is_file() and "templates" in path.relative_to(source).parts:
                yield path.read_text(encoding="utf-8", errors="replace")
            elif path.suffix == ".tgz" and path.parent.name == "charts":
                yield from _archive_texts(path.read_bytes())
    else:
        yield from _archive_texts(source.read_bytes())


def _archive_texts(data: bytes) -> Iterator[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            if member.name.endswith(".tgz") and "/charts/" in member.name:
                yield from _archive_texts(handle.read())
            elif "/templates/" in member.name:
                yield handle.read().decode("utf-8", errors="replace")


_GROUP = re.compile(r"^  group:\s*([A-Za-z0-9.-]+)\s*$", re.MULTILINE)


def platform_crd_groups() -> frozenset[str] | None:
    """The API groups of every CRD any pinned chart can install (subcharts included);
    None when a pinned chart is not in the cache, so nothing can be ruled out."""
    groups: set[str] = set()
    for name, chart in CHARTS.items():
        try:
            groups |= set(chart_facts(name, chart.version)["groups"])
        except ChartCacheError:
            return None
    return frozenset(groups)


def stack_independent(spec: ReleaseSpec) -> bool:
    """Whether the release renders the same whatever CRDs the stack's other charts bring:
    none of the API versions its templates test belongs to a group a pinned chart serves."""
    asked = asked_api_versions(spec)
    groups = platform_crd_groups()
    if asked is None or groups is None:
        return False
    return not any(api.split("/")[0] in groups for api in asked if api.count("/") >= 1)


def first_deploy_api_versions(spec: ReleaseSpec) -> tuple[str, ...]:
    """What a release's render sees on a new cluster, before any CRD exists."""
    return relevant_api_versions(spec, ())


def relevant_api_versions(spec: ReleaseSpec, served: Iterable[str]) -> tuple[str, ...]:
    """The API versions this chart's render can see, of the built-in ones and `served`
    (the CRDs' ones): those its templates test. Helm's own default list lacks some
    built-in groups (apiregistration.k8s.io), so the built-in ones are always passed."""
    everything = set(built_in_api_versions()) | set(served)
    asked = asked_api_versions(spec)
    return tuple(sorted(everything if asked is None else everything & asked))


def served_api_versions(specs: Iterable[ReleaseSpec]) -> list[str]:
    """What the cluster serves once these releases are in: the CRD groups they install.
    (Helm adds the built-in APIs of the Kubernetes version itself.)"""
    from helm_python.errors import HelmError

    served: set[str] = set()
    for spec in specs:
        source = locate(spec.chart, spec.version)
        chart = _load_chart(source)
        where = _where(spec)
        try:
            with _fresh_chart(source) as fresh:
                merged = fresh.merge_values(_wire(spec.values))
        except HelmError as err:
            raise RenderError(f"{where}: helm: {_one_line(str(err))}") from None
        disabled = disabled_subcharts(chart.metadata, merged)
        # Reading a chart's CRDs is most of the cost of some renders: the API list per
        # chart version and set of enabled subcharts is kept on disk beside the renders.
        key = hashlib.sha256(json.dumps([RENDER_FORMAT, spec.chart, spec.version, sorted(disabled)]).encode())
        cached = render_cache_dir() / f"apis-{key.hexdigest()}.json"
        try:
            apis = json.loads(cached.read_text())
        except (OSError, ValueError):
            apis = crd_api_versions(_enabled_crds(chart, source, merged, where))
            _write_atomically(cached, json.dumps(apis))
        served.update(apis)
    return sorted(served)


def _wire(values: Mapping[str, Any]) -> dict[str, Any]:
    """Values as the provider hands them to Helm: JSON types (tuples become lists)."""
    return json.loads(json.dumps(values, default=list))


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split(".") if dotted else []:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node if dotted else None


def _read_cached(path: Path, spec: ReleaseSpec, source: str) -> Rendered | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return Rendered(spec, tuple(data["objects"]), tuple(Hook(**h) for h in data["hooks"]), source)


def _write_cached(path: Path, result: Rendered) -> None:
    _write_atomically(path, json.dumps({"objects": result.objects, "hooks": [h.__dict__ for h in result.hooks]},
                                       separators=(",", ":")))


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)  # readers never see half a file
    except OSError:
        pass  # a read-only home only costs the next run a render


def _one_line(text: str) -> str:
    return " ".join(text.split())
