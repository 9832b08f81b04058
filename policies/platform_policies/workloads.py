"""Reading Kubernetes objects and Helm values: pod specs, containers, image references.

Pulumi sends a Kubernetes object's inputs as the object itself (apiVersion, kind,
metadata, spec); custom resources (JobSet, LeaderWorkerSet, ...) embed pod templates at
different depths, so pod specs are found by shape: a mapping with a `containers` list.
A Helm release sends its chart values, where images appear in a few common shapes.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .common import UNKNOWN, get, items
from .decoding import KnownProperties, _IdentityCache, known, serialized

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# A helm.v4.Chart is a component: the provider registers each object it renders as its
# own resource, and those objects are judged one by one.
HELM_CHART = "kubernetes:helm.sh/v4:Chart"
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str

    def matches(self, entry: Mapping[str, Any]) -> bool:
        """An allow-list entry {kind, namespace, name}; name may be a glob."""
        return (
            entry.get("kind") == self.kind
            and entry.get("namespace", "default") == self.namespace
            and fnmatch.fnmatchcase(self.name, str(entry.get("name", "")))
        )

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def workload(resource_type: str, props: Any, resource_name: str) -> Workload:
    if resource_type in (HELM_RELEASE, HELM_CHART):
        name = get(props, "name")
        namespace = get(props, "namespace")
        return Workload("Release" if resource_type == HELM_RELEASE else "Chart", namespace if isinstance(namespace, str) and namespace else "default",
                        name if isinstance(name, str) and name else resource_name)
    kind = get(props, "kind")
    name = get(props, "metadata", "name")
    namespace = get(props, "metadata", "namespace")
    return Workload(
        kind if isinstance(kind, str) else resource_type.rsplit(":", 1)[-1],
        namespace if isinstance(namespace, str) and namespace else "default",
        name if isinstance(name, str) and name else resource_name,
    )


@dataclass(frozen=True)
class PodTemplate:
    path: str  # where the pod spec sits in the object, e.g. spec.template.spec
    spec: Any
    annotations: Any  # the template's (or Pod's) metadata.annotations


# The pack hands every rule the same copy of a resource's properties (decoding.known): its pod
# templates are found once per resource, not once per rule. Anything else (a dict a caller
# may change) is walked every time.
_TEMPLATES = _IdentityCache()


def pod_templates(props: Any) -> list[PodTemplate]:
    """Every pod spec in an object, however deep (a mapping with a `containers` list), with its
    template's annotations (a Pod's own, or the `metadata` beside the spec)."""
    data = serialized(props)
    if data is not None and b"containers" not in data:
        return []  # keys are verbatim in the bytes: no `containers` key, no pod spec (and no decoding)
    props = known(props) if isinstance(props, Mapping) and not isinstance(props, dict) else props
    if isinstance(props, KnownProperties):
        return _TEMPLATES.get(props, None, lambda: _pod_templates(props))
    return _pod_templates(props)


def _pod_templates(props: Any) -> list[PodTemplate]:
    found: list[PodTemplate] = []

    def walk(value: Any, path: str, annotations: Any) -> None:
        if isinstance(value, Mapping):
            if _is_list(get(value, "containers")):
                found.append(PodTemplate(path, value, annotations))
                return
            own = get(value, "metadata", "annotations") if isinstance(get(value, "spec"), Mapping) else None
            for key in value:
                if key != "metadata":
                    walk(get(value, key), f"{path}.{key}" if path else str(key), own if key == "spec" else None)
        elif _is_list(value):
            for i, element in enumerate(items(value)):
                walk(element, f"{path}[{i}]", None)

    if isinstance(props, Mapping):
        top = get(props, "metadata", "annotations")
        for root in ("spec", "template"):
            walk(get(props, root), root, top if root == "spec" else None)
    return found


def pod_specs(props: Any) -> list[tuple[str, Any]]:
    """(path, pod spec) for every pod spec in an object, however deep its template."""
    return [(t.path, t.spec) for t in pod_templates(props)]


def _is_list(value: Any) -> bool:
    return value is not None and value is not UNKNOWN and not isinstance(value, (str, bytes, Mapping)) \
        and hasattr(value, "__len__")


def containers(spec: Any) -> Iterator[tuple[str, Any]]:
    for group in CONTAINER_LISTS:
        for i, container in enumerate(items(get(spec, group))):
            if isinstance(container, Mapping):
                yield f"{group}[{i}]", container


@dataclass(frozen=True)
class ImageRef:
    """An image reference split the way a container runtime reads it."""

    raw: str
    host: str  # docker.io where the reference names none
    path: str
    tag: str | None
    digest: str | None
    # False where a Helm value leaves the tag to the chart (its appVersion, pinned by the
    # chart version), so a missing tag is not `latest`.
    tag_required: bool = True


def parse_image(ref: str, *, tag_required: bool = True) -> ImageRef:
    rest, _, digest = ref.partition("@")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        host, path = first.lower(), remainder
    else:
        host, path = "docker.io", rest
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
    return ImageRef(ref, host, path, tag or None, digest or None, tag_required)


def pod_images(spec: Any) -> Iterator[tuple[str, Any]]:
    for path, container in containers(spec):
        yield f"{path}.image", get(container, "image")


def helm_images(values: Any, path: str = "values") -> list[tuple[str, ImageRef]]:
    """Images named in Helm values: {registry?, repository, tag?|version?|digest?|sha?,
    image?} mappings (the GPU Operator puts the name in `image` beside `repository`), and
    plain `image: host/repo:tag` strings."""
    found: list[tuple[str, ImageRef]] = []
    if isinstance(values, Mapping):
        repository = get(values, "repository")
        if isinstance(repository, str) and repository and "://" not in repository:
            ref = repository
            registry = get(values, "registry")
            if isinstance(registry, str) and registry:
                ref = f"{registry.rstrip('/')}/{ref}"
            image = get(values, "image")
            if isinstance(image, str) and image:
                ref = f"{ref.rstrip('/')}/{image}"
            tag = get(values, "tag")
            if not isinstance(tag, str) or not tag:
                version = get(values, "version")
                tag = version if isinstance(version, str) else None
            digest = get(values, "digest") or get(values, "sha")  # kube-prometheus-stack's `sha`
            if isinstance(digest, str) and digest and not digest.startswith("sha256:"):
                digest = f"sha256:{digest}"
            if isinstance(tag, str) and tag.startswith("sha256:"):
                # The NVIDIA operators take a digest in `version` (repository/image@sha256:...).
                digest, tag = (digest or tag), None
            full = ref + (f":{tag}" if tag else "") + (f"@{digest}" if isinstance(digest, str) and digest else "")
            found.append((path, parse_image(full, tag_required=False)))
        for key in values:
            child = get(values, key)
            if key == "image" and isinstance(child, str) and child and not isinstance(repository, str):
                found.append((f"{path}.image", parse_image(child)))
            elif isinstance(child, Mapping) or _is_list(child):
                found.extend(helm_images(child, f"{path}.{key}"))
    elif _is_list(values):
        for i, element in enumerate(items(values)):
            found.extend(helm_images(element, f"{path}[{i}]"))
    return found


# --- Custom resources that operators turn into pods -------------------------------------

CLUSTER_POLICY = "kubernetes:nvidia.com/v1:ClusterPolicy"
# GPU Operator components deployed only for sandboxed (KubeVirt/Kata) or vGPU workloads: the
# operator reconciles them only when spec.sandboxWorkloads.enabled is true, whatever their
# own `enabled` says (ClusterPolicyController.isStateEnabled, controllers/state_manager.go);
# the chart lists them with nvcr.io images that are then never pulled. A component whose
# `enabled` is unset is on, as the operator's IsEnabled() has it.
SANDBOX_COMPONENTS = frozenset({"sandboxDevicePlugin", "kataSandboxDevicePlugin", "kataManager", "vfioManager",
                                "vgpuManager", "vgpuDeviceManager", "ccManager"})


def _off(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.lower() == "false")


# API groups of Kubernetes' own kinds: none is an operator's custom resource.
BUILT_IN_GROUPS = frozenset({"core", "apps", "batch", "policy", "autoscaling"})


def built_in(resource_type: str) -> bool:
    """`kubernetes:apps/v1:Deployment`, `kubernetes:rbac.authorization.k8s.io/v1:Role`: a kind
    the API server itself serves, not a custom resource."""
    group = resource_type.removeprefix("kubernetes:").split("/", 1)[0]
    return group in BUILT_IN_GROUPS or group.endswith(".k8s.io") and not group.endswith(".x-k8s.io")


def operator_parts(resource_type: str, props: Any) -> list[tuple[str, Any]]:
    """(path, mapping) of the parts of a pod-less object that become pods: for an operator's
    custom resource (the GPU Operator's ClusterPolicy, the Network Operator's
    NicClusterPolicy, Envoy Gateway's EnvoyProxy, a Prometheus), what its operator deploys.

    A ClusterPolicy lists every component with the chart's default image, deployed or not:
    only components not switched off (`enabled: false`, or a sandbox component while
    sandboxWorkloads is off) count. Elsewhere a component present in `spec` is deployed."""
    if built_in(resource_type):
        return []  # Kubernetes' own kinds make pods only from a pod template
    spec = get(known(props) if isinstance(props, Mapping) and not isinstance(props, dict) else props, "spec")
    if not isinstance(spec, Mapping):
        return []
    if resource_type != CLUSTER_POLICY:
        return [("spec", spec)]
    sandbox = get(spec, "sandboxWorkloads", "enabled") is True
    parts = []
    for key in spec:
        part = get(spec, key)
        if not isinstance(part, Mapping) or _off(get(part, "enabled")):
            continue
        if key in SANDBOX_COMPONENTS and not sandbox:
            continue
        parts.append((f"spec.{key}", part))
    return parts


def operator_images(resource_type: str, props: Any) -> list[tuple[str, ImageRef]]:
    """Images an operator's custom resource makes its operator pull, in Helm values' shapes
    ({repository, image, version} or `image: host/repo:tag`)."""
    found: list[tuple[str, ImageRef]] = []
    for path, part in operator_parts(resource_type, props):
        found.extend(helm_images(part, path))
    return found


def helm_flags(values: Any, keys: frozenset[str], path: str = "values") -> list[str]:
    """Paths of `keys` set to true anywhere in Helm values (e.g. hostNetwork: true)."""
    found: list[str] = []
    if isinstance(values, Mapping):
        for key in values:
            child = get(values, key)
            if key in keys and (child is True or (isinstance(child, str) and child.lower() == "true")):
                found.append(f"{path}.{key}")
            elif isinstance(child, Mapping) or _is_list(child):
                found.extend(helm_flags(child, keys, f"{path}.{key}"))
    elif _is_list(values):
        for i, element in enumerate(items(values)):
            found.extend(helm_flags(element, keys, f"{path}[{i}]"))
    return found


def helm_root_requests(values: Any, path: str = "values") -> list[str]:
    """Paths in Helm values that ask for root: runAsNonRoot false or runAsUser 0."""
    found: list[str] = []
    if isinstance(values, Mapping):
        for key in values:
            child = get(values, key)
            if key == "runAsNonRoot" and (child is False or (isinstance(child, str) and child.lower() == "false")):
                found.append(f"{path}.runAsNonRoot")
            elif key == "runAsUser" and str(child).split(".")[0] == "0":
                found.append(f"{path}.runAsUser")
            elif isinstance(child, Mapping) or _is_list(child):
                found.extend(helm_root_requests(child, f"{path}.{key}"))
    elif _is_list(values):
        for i, element in enumerate(items(values)):
            found.extend(helm_root_requests(element, f"{path}[{i}]"))
    return found


def registry_allowed(image: ImageRef, patterns: list[str]) -> bool:
    """`pattern` is a registry host, optionally with a repository prefix: an ECR registry is
    named by its account (`111122223333.dkr.ecr.me-central-1.amazonaws.com`). A pattern with a
    wildcard allows nothing: `*.dkr.ecr...` would let any account's registry in."""
    for pattern in patterns:
        host, _, prefix = pattern.partition("/")
        if wildcard(pattern) or host.lower() != image.host:
            continue
        prefix = prefix.strip("/")
        if not prefix or image.path == prefix or image.path.startswith(prefix + "/"):
            return True
    return False


def wildcard(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


VERSION_TAG = re.compile(r".*[0-9].*")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def pin_problem(image: ImageRef) -> str | None:
    """Why a reference does not pin what runs, or None. Only a digest does: a tag, even a
    version tag, can be pushed again upstream, and the kubelet pulls what it names then."""
    if image.digest:
        if not DIGEST.fullmatch(image.digest):
            return f"names a malformed digest {image.digest!r} (a digest is sha256: and 64 lower-case hex characters)"
        return None
    if image.tag is None:
        return "has no tag, so it means :latest" if image.tag_required else \
            "leaves the image to the chart's tag, which names no digest"
    if image.tag.lower() == "latest":
        return "uses the moving tag :latest"
    if not VERSION_TAG.fullmatch(image.tag):
        return f"uses the tag :{image.tag}, which names no version"
    return f"is referenced by the tag :{image.tag} alone, which can be pushed again"
