"""What the platform sets on chart objects that no chart value reaches.

Some charts render containers whose resources no value controls (the NVIDIA device plugin
chart's config-manager init and sidecar containers, for one). A container without limits
can starve its node's daemons, so every chart object passes through
`with_default_resources` (a Pulumi transform on each Chart, applied by the engine to the
objects the provider registers, and by the offline preview to the objects it renders):
a container that sets no limits gets `DEFAULT_RESOURCES`. Containers that set any limit
keep theirs untouched. Pure data in, pure data out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from components.addons.values import SMALL

DEFAULT_RESOURCES = SMALL
CONTAINER_LISTS = ("initContainers", "containers")


def _pod_specs(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            return [value]
        for child in value.values():
            found += _pod_specs(child)
    elif isinstance(value, list):
        for child in value:
            found += _pod_specs(child)
    return found


def _missing_limits(spec: Any) -> bool:
    return any(isinstance(c, dict) and not (c.get("resources") or {}).get("limits")
               for pod in _pod_specs(spec) for group in CONTAINER_LISTS for c in pod.get(group) or [])


def with_default_resources(obj: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The object with limits on every container, and the containers that got the
    defaults (empty: nothing changed). CRDs describe pods but hold none: left alone."""
    if obj.get("kind") == "CustomResourceDefinition" or not _missing_limits(obj.get("spec")):
        return dict(obj), []
    out = copy.deepcopy(dict(obj))
    filled = []
    for spec in _pod_specs(out.get("spec")):
        for group in CONTAINER_LISTS:
            for container in spec.get(group) or []:
                if isinstance(container, dict) and not (container.get("resources") or {}).get("limits"):
                    container["resources"] = copy.deepcopy(DEFAULT_RESOURCES)
                    filled.append(str(container.get("name")))
    return out, filled


# Chart pods that call the API server (they watch their custom resources, label nodes, read
# their config from node labels) but leave automountServiceAccountToken unset, so the
# default mounts a token in them. The platform states it for each, with why: the pack
# (k8s-service-account-tokens-where-needed) refuses a pod that does not say whether it
# needs a token, so a chart pod that appears in an upgrade is decided, not defaulted.
_CONFIG_MANAGER = "its config-manager containers watch the node's labels through the API server to pick the " \
                  "plugin's configuration"
_NFD = "NFD's {} reads and writes NodeFeature objects and node labels through the API server"
API_CLIENTS: dict[tuple[str, str, str], str] = {
    ("Deployment", "argo-rollouts", "argo-rollouts"): "the rollout controller watches Rollouts, ReplicaSets, "
    "Services and HTTPRoutes and changes them",
    ("Deployment", "jobset-system", "jobset-controller"): "the JobSet controller watches JobSets and creates Jobs",
    ("Deployment", "kueue-system", "kueue-controller-manager"): "Kueue watches workloads and queues and admits "
    "Jobs and JobSets",
    ("DaemonSet", "kube-system", "fsx-csi-node"): "the FSx CSI node plugin reads its Node object (topology and "
    "volume limits) through the API server",
    ("Deployment", "kube-system", "fsx-csi-controller"): "the FSx CSI controller's provisioner, resizer and "
    "attacher sidecars watch PersistentVolumeClaims and write PersistentVolumes",
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin"): f"the device plugin: {_CONFIG_MANAGER}",
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin-gpu-feature-discovery"):
        f"GPU feature discovery: {_CONFIG_MANAGER}",
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon"):
        f"the MPS control daemon: {_CONFIG_MANAGER}",
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin-node-feature-discovery-worker"): _NFD.format("worker"),
    ("Deployment", "nvidia-device-plugin", "nvidia-device-plugin-node-feature-discovery-master"):
        _NFD.format("master"),
    ("Deployment", "nvidia-device-plugin", "nvidia-device-plugin-node-feature-discovery-gc"):
        _NFD.format("garbage collector"),
    ("Deployment", "gpu-operator", "gpu-operator"): "the GPU Operator reconciles its ClusterPolicy into DaemonSets",
    ("DaemonSet", "gpu-operator", "gpu-operator-node-feature-discovery-worker"): _NFD.format("worker"),
    ("Deployment", "gpu-operator", "gpu-operator-node-feature-discovery-master"): _NFD.format("master"),
    ("Deployment", "gpu-operator", "gpu-operator-node-feature-discovery-gc"): _NFD.format("garbage collector"),
    ("Deployment", "nvidia-network-operator", "network-operator"): "the Network Operator reconciles its "
    "NicClusterPolicy into DaemonSets",
}


def with_stated_token_use(obj: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The object with automountServiceAccountToken: true on the pod templates of an
    API_CLIENTS entry that leave it unset, and whether anything changed."""
    meta = obj.get("metadata") or {}
    key = (str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name")))
    if key not in API_CLIENTS:
        return dict(obj), False
    pods = [p for p in _pod_specs(obj.get("spec")) if "automountServiceAccountToken" not in p]
    if not pods:
        return dict(obj), False
    out = copy.deepcopy(dict(obj))
    for spec in _pod_specs(out.get("spec")):
        spec.setdefault("automountServiceAccountToken", True)
    return out, True


# DaemonSets of charts that run only on GPU nodes. The provider waits for a DaemonSet until
# its pod is ready on every node it selects, so each GPU node that joins during an update
# (a pool starting empty, scaled up; capacity granted late) would hold the update up, and
# a node whose driver or fabric is broken would fail it. They are not awaited; what they
# serve is judged where it is used (jobs wait for their GPUs, Prometheus for its targets).
GPU_NODE_DAEMONSETS: dict[tuple[str, str, str], str] = {
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin"): "advertises the GPUs of each GPU node",
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin-gpu-feature-discovery"): "labels each GPU node",
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon"): "shares GPUs under MPS",
    ("DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin-node-feature-discovery-worker"):
        "feeds node features of each GPU node to the GPU labels",
    ("DaemonSet", "kube-system", "aws-efa-k8s-device-plugin"): "advertises the EFA interfaces of each EFA node",
    ("DaemonSet", "monitoring", "dcgm-exporter"): "exports each GPU node's DCGM metrics",
}
SKIP_AWAIT = "pulumi.com/skipAwait"


def with_unawaited_gpu_daemonsets(obj: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The object with `pulumi.com/skipAwait: "true"` where it is one of GPU_NODE_DAEMONSETS."""
    meta = obj.get("metadata") or {}
    key = (str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name")))
    if key not in GPU_NODE_DAEMONSETS or (meta.get("annotations") or {}).get(SKIP_AWAIT) == "true":
        return dict(obj), False
    out = copy.deepcopy(dict(obj))
    out["metadata"] = {**out.get("metadata", {}), "annotations": {**(meta.get("annotations") or {}),
                                                                   SKIP_AWAIT: "true"}}
    return out, True
