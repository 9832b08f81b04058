"""What the first `pulumi up` of a brand-new environment would wait on and never get.

The Kubernetes provider waits for what it creates to become ready: a Deployment,
StatefulSet or ReplicaSet until its replicas are available, a Job until it completes, a
bare Pod until it runs, a DaemonSet until a pod is ready on every node it selects, and a
Service with a selector until it targets a ready pod (pulumi-kubernetes' await logic). A
DaemonSet with no node to run on is ready at once, but one for GPU nodes waits on every
GPU node that joins meanwhile, and a Service in front of it then targets nothing. A new environment has no model published and no dataset yet, and
no GPU node until capacity is granted, so an object whose readiness needs one of them
stalls the update until the provider's timeout (ten minutes for a Deployment) and fails
it. `pulumi.com/skipAwait` turns the wait off; it is allowed only with a written reason.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from components.addons.defaults import GPU_NODE_DAEMONSETS, SKIP_AWAIT
from infra.checks.apiserver import containers
from infra.checks.images import object_id

# Kinds the provider waits on, and whether a replica count says how many pods it waits for.
AWAITED = {"Deployment": True, "StatefulSet": True, "ReplicaSet": True, "Job": False, "Pod": False}
# Extended resources only GPU nodes offer (the device plugins'): a pod asking for one waits for such a node.
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "vpc.amazonaws.com/efa")
# Objects allowed to skip the provider's wait (object id -> why).
SKIP_AWAIT_REASONS: dict[str, str] = {
    **{f"Service inference/triton-{variant}": "the Rollout behind it starts at zero replicas and is scaled up once "
                                               "a model is published (README: a new environment, and its first model)"
       for variant in ("stable", "canary")},
    # Charts' DaemonSets of GPU nodes (components/addons/defaults.py adds the annotation).
    **{f"{kind} {namespace}/{name}": f"{why}; runs only on GPU nodes, which join when capacity comes"
       for (kind, namespace, name), why in GPU_NODE_DAEMONSETS.items()},
    # The pool's GPU check is Ready only while its node passes (components/training_spec.py):
    # its readiness is what it measures, never a condition of the deploy.
    "DaemonSet */gpu-check-*": "Ready only while its node passes the GPU check; GPU nodes join when capacity comes "
                               "(a pool without a reservation starts empty), and a failing node must not hold up "
                               "the update",
    "Service monitoring/dcgm-exporter": "the exporter runs only on GPU instance types; a new environment may have "
                                        "no GPU node for weeks, and Prometheus finds the pods when they come",
    "Deployment mlflow/mlflow": "a customer's cluster: the server's database DSN and users are the customer's "
                                "Secrets in the mlflow namespace, which can be made only once this layer has made "
                                "the namespace (docs/onprem.md); the server starts when they exist",
    # A customer's cluster, in each tenant's namespace (`*`: any namespace).
    **{f"{kind} */feature-server": "a customer's cluster: the feature server's Redis password and object-store "
                                   "credentials are the customer's Secrets in the tenant's namespace, which can be "
                                   "made only once this layer has made the namespace (docs/onprem.md); the server "
                                   "starts when they exist" for kind in ("Deployment", "Service")},
    # ...and each pipeline tenant's engine (components/pipelines_spec.py).
    **{ident: "a customer's cluster: the pipeline engine's database DSN is the customer's Secret in the tenant's "
              "namespace, which can be made only once this layer has made the namespace (docs/onprem.md); the "
              "engine migrates and starts when it exists"
       for ident in ("Job */airflow-migrate-*", "Deployment */airflow-*", "Service */airflow-api-server")},
}
# Objects whose containers name a data location only as where they write (object id ->
# why): they start without anything there.
WRITES_ONLY: dict[str, str] = {
    "Deployment mlflow/mlflow": "the tracking server's artifact destination: it stores what clients send and reads "
                                "back only what it stored",
}
# Pods that Services may select.
WORKLOADS = ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "Pod")


def waits(objects: Iterable[tuple[str, Mapping[str, Any]]], *, data_locations: Sequence[str],
          gpu_node_labels: Mapping[str, frozenset[str]],
          skip_reasons: Mapping[str, str] = SKIP_AWAIT_REASONS) -> list[str]:
    """One line per object the first deploy would wait on: `<owner>: <object>: <why>`.

    `data_locations`: where data arrives only after the deploy (s3://<models bucket>, ...);
    a pod whose containers name one reads it at start. `gpu_node_labels`: node labels only
    GPU nodes carry (label -> values); a pod that requires one waits for a GPU node.
    `skip_reasons`: object id -> why it may skip the provider's wait."""
    lines = []
    objects = list(objects)
    for owner, obj in objects:
        kind = str(obj.get("kind"))
        ident = object_id(obj)
        if _skips_await(obj):
            if not _reason_listed(ident, skip_reasons):
                lines.append(f"{owner}: {ident}: sets {SKIP_AWAIT} with no reason listed beside it")
            continue
        if kind == "DaemonSet":
            gpu = _needs_gpu_node(_pod_spec(obj), gpu_node_labels)
            if gpu:
                lines.append(f"{owner}: {ident}: waits for a ready pod on each {gpu[0]} that joins during the update")
            continue
        if kind not in AWAITED or (AWAITED[kind] and _replicas(obj) == 0):
            continue
        needs = _needs(obj, data_locations, gpu_node_labels)
        if needs:
            lines.append(f"{owner}: {ident}: waits for {' and '.join(needs)}, which a new environment does not have")
    lines += _services_without_pods(objects, data_locations, gpu_node_labels)
    return lines


def _reason_listed(ident: str, reasons: Mapping[str, str]) -> bool:
    """A reason listed for this object, in any namespace (`*`), or for a name pattern."""
    return any(fnmatch.fnmatchcase(ident, key) or fnmatch.fnmatchcase(_in_any_namespace(ident), key)
               for key in reasons)


def _in_any_namespace(ident: str) -> str:
    """`Kind namespace/name` -> `Kind */name`: a reason that holds in every namespace."""
    kind, _, path = ident.partition(" ")
    return f"{kind} */{path.split('/', 1)[-1]}"


def _skips_await(obj: Mapping[str, Any]) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(SKIP_AWAIT, "")).lower() == "true"


def _services_without_pods(objects: Sequence[tuple[str, Mapping[str, Any]]], data_locations: Sequence[str],
                           gpu_node_labels: Mapping[str, frozenset[str]]) -> list[str]:
    """Services the provider would wait on while every workload they select has no pod that
    can become ready in a new environment. A Service whose pods come from elsewhere (an
    operator's StatefulSet) selects nothing here and is not judged."""
    lines = []
    for owner, service in objects:
        spec = service.get("spec") or {}
        selector = spec.get("selector") or {}
        if service.get("kind") != "Service" or spec.get("type") == "ExternalName" or not selector:
            continue
        if _skips_await(service):
            continue  # judged with the other skipAwait objects (a reason must be listed)
        namespace = (service.get("metadata") or {}).get("namespace")
        blocked = []
        for _owner, obj in objects:
            if obj.get("kind") not in WORKLOADS or (obj.get("metadata") or {}).get("namespace") != namespace:
                continue
            labels = _pod_labels(obj)
            if not all(labels.get(k) == v for k, v in selector.items()):
                continue
            why = _no_ready_pod(obj, data_locations, gpu_node_labels)
            if why is None:
                blocked = []
                break
            blocked.append(f"{object_id(obj)} {why}")
        if blocked:
            lines.append(f"{owner}: {object_id(service)}: waits for a ready pod, but {'; '.join(blocked)} in a "
                         "new environment")
    return lines


def _pod_labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    if obj.get("kind") == "Pod":
        return (obj.get("metadata") or {}).get("labels") or {}
    return (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def _no_ready_pod(obj: Mapping[str, Any], data_locations: Sequence[str],
                  gpu_node_labels: Mapping[str, frozenset[str]]) -> str | None:
    """Why a workload has no ready pod in a new environment, or None if it can have one."""
    if AWAITED.get(str(obj.get("kind"))) and _replicas(obj) == 0:
        return "has zero replicas"
    needs = _needs(obj, data_locations, gpu_node_labels)
    return f"waits for {' and '.join(needs)}" if needs else None


def _needs(obj: Mapping[str, Any], data_locations: Sequence[str],
           gpu_node_labels: Mapping[str, frozenset[str]]) -> list[str]:
    """What a workload's pods need that a new environment does not have: data, a GPU node."""
    spec = _pod_spec(obj)
    reads = [] if object_id(obj) in WRITES_ONLY else _reads_data(spec, data_locations)
    return [*reads, *_needs_gpu_node(spec, gpu_node_labels)]


def _replicas(obj: Mapping[str, Any]) -> int:
    replicas = (obj.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)  # the API server's default


def _pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    if obj.get("kind") == "Pod":
        return obj.get("spec") or {}
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def _reads_data(spec: Mapping[str, Any], locations: Sequence[str]) -> list[str]:
    found = []
    for _where, container in containers(spec):
        words = [*(container.get("command") or []), *(container.get("args") or []),
                 *(str(e.get("value", "")) for e in container.get("env") or [])]
        for location in locations:
            if any(location in str(word) for word in words) and location not in found:
                found.append(location)
    return [f"data in {location} (container reads it at start)" for location in found]


def _needs_gpu_node(spec: Mapping[str, Any], labels: Mapping[str, frozenset[str]]) -> list[str]:
    for _where, container in containers(spec):
        amounts = {**((container.get("resources") or {}).get("requests") or {}),
                   **((container.get("resources") or {}).get("limits") or {})}
        asked = sorted(k for k in amounts if k.startswith(GPU_RESOURCE_PREFIXES))
        if asked:
            return [f"a GPU node ({container.get('name')} asks for {', '.join(asked)})"]
    for key, value in (spec.get("nodeSelector") or {}).items():
        if value in labels.get(key, frozenset()):
            return [f"a GPU node (nodeSelector {key}={value})"]
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    # Every term must be one only GPU nodes satisfy (terms are ORed).
    if terms and all(_gpu_only(term, labels) for term in terms):
        return ["a GPU node (required node affinity)"]
    return []


def _gpu_only(term: Mapping[str, Any], labels: Mapping[str, frozenset[str]]) -> bool:
    for expression in term.get("matchExpressions") or []:
        values = set(expression.get("values") or [])
        if expression.get("operator") == "In" and values and values <= labels.get(expression.get("key"), frozenset()):
            return True
    return False
