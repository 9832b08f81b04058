"""Image references in Kubernetes objects and Helm values, wherever they hide, and how they
compare with the registry plan and with what a chart runs upstream.

Charts name images in several shapes: a container's `image`, split maps
({registry, repository, tag} or the GPU Operator's {repository, image, version}),
custom resources (`Prometheus.spec.image`), environment values and flags
(`--prometheus-config-reloader=<ref>`). `references` finds them all, with their path.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.versions import DIGEST, IMAGES, UNBUILT, Image, image_ref, registry_host

# `image`, `initImage`, `configReloaderImage`, ...
IMAGE_KEY = re.compile(r"(^i|I)mage$")
# host.with.dots[:port]/path[:tag][@sha256:digest], with a tag or a digest: how an image
# reference looks wherever it hides (env values, args, annotations).
_REF = r"[a-z0-9-]+(\.[a-z0-9-]+)+(:\d+)?/[a-z0-9._/-]+(:[\w.-]+(@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})"
IMAGE_REF = re.compile(rf"^{_REF}$")
FLAG_REF = re.compile(rf"^--?[\w.-]+=({_REF})$")
# The keys of a split image reference; `distroless` (the node exporter chart) changes the tag.
SPLIT_KEYS = ("repository", "image", "registry", "tag", "version", "digest", "sha", "distroless")


def compose(parts: Mapping[str, Any]) -> str:
    """One reference from a split map: {registry?, repository, image?, tag|version|digest}."""
    ref = str(parts["repository"])
    if isinstance(parts.get("image"), str):
        ref = f"{ref}/{parts['image']}"
    if parts.get("registry"):
        ref = f"{parts['registry']}/{ref}"
    tag = parts.get("tag") or parts.get("version")
    ref = f"{ref}:{tag}" if tag else ref
    if str(tag or "").startswith("sha256:"):  # an operator's version that is a digest (the DOCA driver's)
        return f"{ref.rsplit(':', 1)[0]}@{tag}"
    digest = parts.get("digest") or parts.get("sha")
    if digest:  # kube-prometheus-stack's `sha` may leave out `sha256:`
        return f"{ref}@{digest if str(digest).startswith('sha256:') else f'sha256:{digest}'}"
    return ref


def _is_split(value: Mapping[str, Any], key: str) -> bool:
    return isinstance(value.get("repository"), str) and bool(IMAGE_KEY.search(key) or isinstance(value.get("image"), str))


def references(value: Any, path: str = "", key: str = "") -> Iterator[tuple[str, str]]:
    """(path, reference) for every image reference inside `value`."""
    if isinstance(value, Mapping):
        split = _is_split(value, key)
        if split:
            yield path, compose(value)
        for child_key, child in value.items():
            if split and child_key in SPLIT_KEYS:
                continue
            yield from references(child, f"{path}.{child_key}" if path else str(child_key), str(child_key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from references(child, f"{path}[{index}]", key)
    elif isinstance(value, str) and value:
        flag = FLAG_REF.match(value)
        if flag:
            yield path, flag.group(1)
        elif IMAGE_KEY.search(key) or IMAGE_REF.match(value):
            yield path, value


def without_images(values: Any, key: str = "") -> Any:
    """`values` with every image override removed, so the chart falls back to its own
    images: what it runs upstream."""
    if isinstance(values, Mapping):
        if _is_split(values, key):
            return {k: without_images(v, k) for k, v in values.items() if k not in SPLIT_KEYS}
        return {k: without_images(v, k) for k, v in values.items()
                if not (isinstance(v, str) and (IMAGE_KEY.search(k) or IMAGE_REF.match(v)))}
    if isinstance(values, list):
        return [without_images(v, key) for v in values]
    return copy.deepcopy(values)


# GPU Operator operands deployed only on nodes running sandbox (VM pass-through) workloads.
SANDBOX_OPERANDS = frozenset({"sandboxDevicePlugin", "kataSandboxDevicePlugin", "kataManager", "vfioManager",
                              "vgpuManager", "vgpuDeviceManager"})


def inert(obj: Mapping[str, Any], path: str) -> str | None:
    """Why an image reference in an object is never pulled, or None if it may be.

    The GPU Operator's ClusterPolicy names an image for every operand, and the operator
    deploys an operand only when its `enabled` is true; the operator's own Deployment
    passes the driver manager's image, which only the driver and the vGPU/VFIO managers
    run. Images of operands that are off are never pulled."""
    if obj.get("kind") == "ClusterPolicy" and path.startswith("spec."):
        spec = obj.get("spec") or {}
        component = path.split(".")[1].split("[")[0]
        if (spec.get(component) or {}).get("enabled") is False:
            return f"ClusterPolicy operand {component} is off"
        if component in SANDBOX_OPERANDS and (spec.get("sandboxWorkloads") or {}).get("enabled") is False:
            return f"ClusterPolicy operand {component} runs only for sandbox (VM) workloads, which are off"
    if path.endswith(".value") and (_at(obj, path.removesuffix(".value")) or {}).get("name") == "DRIVER_MANAGER_IMAGE":
        return "the GPU Operator runs the driver manager only with its driver or vGPU/VFIO managers, all off"
    return None


def _at(value: Any, path: str) -> Any:
    """The value at a path as `references` writes it (`a.b[2].c`)."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else None
        else:
            value = value.get(part) if isinstance(value, Mapping) else None
    return value


def pulled_references(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The references in an object that a node may pull: all of them but the inert."""
    return [(where, ref) for where, ref in references(obj) if inert(obj, where) is None]


def plan_references(account: str, region: str, environment: str,
                    built: Mapping[str, str] | None = None, registry: str | None = None) -> dict[str, Image]:
    """Every reference the registry plan allows in the environment:
    `<host>/mlplat/<environment>/.../<name>:<tag>@<digest>`, by digest and nothing else
    (platform images: at the digests in `built`, by default the preview's stand-in). The
    host is the account's in-region ECR, or `registry` (a customer's in-country registry).
    A pinned mirror may also be named by its digest alone (`<repository>@<digest>`: how
    an operator is given a driver whose tags name an OS)."""
    built = built or {name: UNBUILT for name, image in IMAGES.items() if image.built_here}
    host = registry or registry_host(account, region)
    refs = {image_ref(name, host, environment, built): image for name, image in IMAGES.items()}
    refs.update({f"{host}/{image.repository(environment)}@{image.digest}": image for image in IMAGES.values()
                 if not image.built_here and DIGEST.match(image.digest)})
    return refs


def out_of_plan(found: Sequence[tuple[str, str]], account: str, region: str, environment: str,
                registry: str | None = None) -> list[str]:
    """Every reference that is not an in-region mirror of the plan, by digest."""
    allowed = plan_references(account, region, environment, registry=registry)
    return [f"{where}: {ref} (image is an in-region mirror of the plan, by digest)" for where, ref in found
            if ref not in allowed]


def object_id(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {namespace}{meta.get('name')}"


@dataclass(frozen=True)
class Drift:
    """A mirror whose plan entry is not the image the chart runs at that place upstream."""

    where: str  # object and field
    mirror: str  # the reference our values put there
    plan_upstream: str  # what the plan says the mirror copies
    chart_upstream: str  # what the pinned chart runs there without our override

    def __str__(self) -> str:
        return (f"{self.where}: mirror {self.mirror} copies {self.plan_upstream or '(nothing: not in the plan)'}, "
                f"but the chart runs {self.chart_upstream} there (mirror is the chart's own image)")


def drift(ours: Sequence[Mapping[str, Any]], upstream: Sequence[Mapping[str, Any]], account: str,
          region: str, environment: str, registry: str | None = None) -> list[Drift]:
    """Compare, field by field, the images of a release rendered with our values and
    rendered with our values less the image overrides."""
    plan = plan_references(account, region, environment, registry=registry)
    theirs = {object_id(o): dict(references(o)) for o in upstream}
    found = []
    for obj in ours:
        default = theirs.get(object_id(obj), {})
        for where, ref in references(obj):
            upstream_ref = default.get(where)
            if upstream_ref is None or upstream_ref == ref:
                continue  # no image there upstream, or we did not override it
            image = plan.get(ref)
            if image is not None and (image.upstream(region) == upstream_ref or image.differs_from_chart):
                continue
            found.append(Drift(f"{object_id(obj)} {where}", ref, image.upstream(region) if image else "",
                               upstream_ref))
    return found
