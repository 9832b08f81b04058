"""Cluster checks: what the Kubernetes API must show after a deploy.

The checks read plain Kubernetes objects, exactly as the API serves them in JSON (what
`kubectl get -o json` prints), gathered once into a `ClusterState`. `LiveCluster.read_state`
(live.py) fills it from a real cluster; the fixtures in tests/fixtures/acceptance are the
same shape, recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.acceptance.expect import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    HUGEPAGES_RESOURCE,
    INSTANCE_TYPE_LABEL,
    PoolExpectation,
    StackExpectation,
)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class ClusterState:
    nodes: tuple[Obj, ...]
    daemon_sets: tuple[Obj, ...] = ()
    pods: tuple[Obj, ...] = ()
    jobs: tuple[Obj, ...] = ()
    services: tuple[Obj, ...] = ()
    # Logs of the pods the checks read results from, keyed "namespace/pod".
    logs: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> ClusterState:
        """From {"nodes": <List>, "daemonSets": <List>, "pods": <List>, "jobs": <List>,
        "services": <List>, "logs": {"ns/pod": text}}, each List as `kubectl get -o json`
        prints it."""

        def items(key: str) -> tuple[Obj, ...]:
            value = doc.get(key) or {}
            return tuple(value.get("items", []) if isinstance(value, Mapping) else value)

        return cls(items("nodes"), items("daemonSets"), items("pods"), items("jobs"), items("services"),
                   dict(doc.get("logs") or {}))

    def pods_on(self, node: str) -> list[Obj]:
        return [p for p in self.pods if p.get("spec", {}).get("nodeName") == node]


def name(obj: Obj) -> str:
    return obj.get("metadata", {}).get("name", "?")


def namespaced(obj: Obj) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def condition(obj: Obj, kind: str) -> Obj | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def is_ready(obj: Obj) -> bool:
    cond = condition(obj, "Ready")
    return bool(cond) and cond.get("status") == "True"


def pod_trouble(pod: Obj) -> str:
    """Why a pod is not Ready, in kubectl's words: a waiting reason, else its phase."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            restarts = status.get("restartCount", 0)
            return f"{waiting['reason']}, {restarts} restarts" if restarts else waiting["reason"]
    return pod.get("status", {}).get("phase", "Unknown")


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("8", "10Gi", "500m") as a number; 0 when absent."""
    if value is None:
        return 0.0
    match = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|m)?", str(value).strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, unit = float(match.group(1)), match.group(2)
    if unit == "m":
        return number / 1000
    return number * _BINARY.get(unit or "", _DECIMAL.get(unit or "", 1))


def _node_subject(node: Obj, pool: PoolExpectation | None = None) -> str:
    itype = node.get("metadata", {}).get("labels", {}).get(INSTANCE_TYPE_LABEL, "unknown type")
    return f"node {name(node)} ({itype}, pool {pool.name})" if pool else f"node {name(node)} ({itype})"


def _gpu_allocatable(allocatable: Obj, pool: PoolExpectation) -> list[str]:
    """Whole GPUs: exactly the catalog's count times the time-slicing replicas. With MIG the
    partition layout is the operator's, so only: no fewer devices than physical GPUs."""
    found = quantity(allocatable.get(GPU_RESOURCE))
    if pool.mig_strategy != "none":
        found += sum(quantity(v) for k, v in allocatable.items() if k.startswith("nvidia.com/mig-"))
        if found < pool.gpus:
            return [f"allocatable GPUs and MIG devices total {found:g}, fewer than the {pool.gpus} GPUs "
                    "the catalog says"]
        return []
    advertised = pool.gpus * pool.time_slicing_replicas
    if found == advertised:
        return []
    if pool.time_slicing_replicas == 1:
        return [f"allocatable {GPU_RESOURCE} is {found:g}, the catalog says {pool.gpus}"]
    return [f"allocatable {GPU_RESOURCE} is {found:g}, expected {advertised} "
            f"({pool.gpus} GPUs x {pool.time_slicing_replicas} time-slicing replicas)"]


# --- checks ----------------------------------------------------------------------------

ClusterCheck = Callable[[ClusterState, StackExpectation], list[str]]


def check_nodes_ready(state: ClusterState, expect: StackExpectation) -> list[str]:
    problems = []
    for node in state.nodes:
        if is_ready(node):
            continue
        cond = condition(node, "Ready") or {}
        why = cond.get("reason") or "no Ready condition"
        detail = f": {cond['message']}" if cond.get("message") else ""
        problems.append(f"{_node_subject(node)} is not Ready ({why}{detail})")
    return problems


def check_node_pools(state: ClusterState, expect: StackExpectation) -> list[str]:
    """Every pool of the stack has its nodes, and every node belongs to a pool."""
    problems = []
    counts = {p.name: 0 for p in expect.pools}
    for node in state.nodes:
        pool = expect.pool_of(node)
        if pool is None:
            problems.append(f"{_node_subject(node)} belongs to no node pool of stack {expect.stack}")
        else:
            counts[pool.name] += 1
    for pool in expect.pools:
        if counts[pool.name] < pool.nodes:
            problems.append(
                f"pool {pool.name} ({pool.instance_type}) has {counts[pool.name]} nodes, "
                f"the stack asks for {pool.nodes}"
            )
    return problems


def check_allocatable(state: ClusterState, expect: StackExpectation) -> list[str]:
    """GPU and EFA devices (and huge pages on EFA nodes) as the catalog says, per node; on a
    customer's RDMA nodes, the RDMA shared device plugin's resource."""
    problems = []
    for node in state.nodes:
        pool = expect.pool_of(node)
        if pool is None or not pool.gpus:
            continue
        allocatable = node.get("status", {}).get("allocatable") or {}
        subject = _node_subject(node, pool)
        problems.extend(f"{subject}: {p}" for p in _gpu_allocatable(allocatable, pool))
        found = quantity(allocatable.get(EFA_RESOURCE))
        if found != pool.efa_interfaces:
            problems.append(f"{subject}: allocatable {EFA_RESOURCE} is {found:g}, the catalog says {pool.efa_interfaces}")
        if pool.fabric is not None:
            rdma = quantity(allocatable.get(pool.fabric.rdma_resource))
            if rdma < 1:
                problems.append(f"{subject}: allocatable {pool.fabric.rdma_resource} is {rdma:g}; every training pod "
                                "takes one (the Network Operator's RDMA shared device plugin advertises them)")
        if pool.hugepages_2m:
            pages = quantity(allocatable.get(HUGEPAGES_RESOURCE)) / 2**21
            if pages < pool.hugepages_2m:
                problems.append(
                    f"{subject}: allocatable {HUGEPAGES_RESOURCE} is {pages:g} pages, "
                    f"at least {pool.hugepages_2m} are needed"
                )
    return problems


@dataclass(frozen=True)
class DevicePlugin:
    title: str
    resource: str
    # The container that registers with the kubelet, as each chart names it; release
    # names and namespaces vary with how the add-ons are installed, these do not.
    containers: tuple[str, ...]


NVIDIA_PLUGIN = DevicePlugin(
    "NVIDIA device plugin",
    GPU_RESOURCE,
    # nvidia-device-plugin chart / GPU Operator's device plugin daemon set
    ("nvidia-device-plugin-ctr", "nvidia-device-plugin"),
)
EFA_PLUGIN = DevicePlugin("EFA device plugin", EFA_RESOURCE, ("aws-efa-k8s-device-plugin",))


def _owned_by_daemon_set(pod: Obj) -> str | None:
    for owner in pod.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("kind") == "DaemonSet":
            return owner.get("name")
    return None


def plugin_pods(state: ClusterState, plugin: DevicePlugin, node: str) -> list[Obj]:
    """Pods of `plugin`'s daemon set on `node`."""
    found = []
    for pod in state.pods_on(node):
        containers = {c.get("name") for c in pod.get("spec", {}).get("containers") or []}
        if _owned_by_daemon_set(pod) and containers & set(plugin.containers):
            found.append(pod)
    return found


def check_device_plugins(state: ClusterState, expect: StackExpectation) -> list[str]:
    """A Ready NVIDIA plugin pod on every GPU node, a Ready EFA plugin pod on every EFA node."""
    problems = []
    for node in state.nodes:
        pool = expect.pool_of(node)
        if pool is None:
            continue
        wanted = [p for p, needed in ((NVIDIA_PLUGIN, pool.gpus), (EFA_PLUGIN, pool.efa_interfaces)) if needed]
        for plugin in wanted:
            pods = plugin_pods(state, plugin, name(node))
            subject = _node_subject(node, pool)
            if not pods:
                problems.append(f"{subject}: no {plugin.title} pod runs there, so nothing advertises {plugin.resource}")
            elif not any(is_ready(p) for p in pods):
                pod = pods[0]
                problems.append(
                    f"{subject}: {plugin.title} pod {namespaced(pod)} (daemon set "
                    f"{_owned_by_daemon_set(pod)}) is not Ready ({pod_trouble(pod)})"
                )
    return problems


# --- results of the platform's own check workloads ----------------------------------
# The GPU node check (workloads/gpucheck) and the collective bandwidth check
# (workloads/collectives) print their verdicts as JSON in their pod logs. Their pods are
# found by the module they run, whatever the job, daemon set or JobSet around them is
# called.

GPU_CHECK_MODULE = "workloads.gpucheck"
COLLECTIVES_MODULE = "workloads.collectives"


def module_container(pod: Obj, module: str) -> str | None:
    """The name of the pod's container that runs `module` (`python -m <module>`, or
    torchrun's `-m <module>`); init containers do not count, their verdict is not the pod's."""
    for container in pod.get("spec", {}).get("containers") or []:
        words = [*(container.get("command") or []), *(container.get("args") or [])]
        if any(module in str(word).split() for word in words):
            return container.get("name")
    return None


def runs_module(pod: Obj, module: str) -> bool:
    return module_container(pod, module) is not None


def log_pods(state: ClusterState) -> list[tuple[Obj, str]]:
    """Pods whose logs the checks read, with the container to read: those running the GPU
    and the collective checks."""
    found = []
    for pod in state.pods:
        container = module_container(pod, GPU_CHECK_MODULE) or module_container(pod, COLLECTIVES_MODULE)
        if container:
            found.append((pod, container))
    return found


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of a log that is a JSON object, in order."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def exit_code(pod: Obj) -> int | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        for state in (status.get("state") or {}, status.get("lastState") or {}):
            terminated = state.get("terminated")
            if terminated is not None:
                return terminated.get("exitCode")
    return None


def _created(obj: Obj) -> str:
    """For picking the newest of several runs (RFC 3339 timestamps sort as text)."""
    return obj.get("metadata", {}).get("creationTimestamp", "")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def check_gpu_node_check(state: ClusterState, expect: StackExpectation) -> list[str]:
    """Every node of the training pool ran the GPU check, against its own catalog entry,
    and it found the node healthy (count, model, memory, ECC, row remaps, temperature,
    NVLink, clocks)."""
    problems = []
    for node in state.nodes:
        pool = expect.pool_of(node)
        if pool is None or pool.name != expect.training_pool:
            continue
        subject = _node_subject(node, pool)
        pods = [p for p in state.pods_on(name(node)) if runs_module(p, GPU_CHECK_MODULE)]
        if not pods:
            problems.append(f"{subject}: the GPU check ({GPU_CHECK_MODULE}) has no pod there")
            continue
        pod = max(pods, key=_created)
        log = state.logs.get(namespaced(pod), "")
        reports = [r for r in json_lines(log) if "healthy" in r and "findings" in r]
        if not reports:
            code = exit_code(pod)
            ended = f"exit {code}: " if code is not None else f"{pod_trouble(pod)}: "
            problems.append(f"{subject}: the GPU check printed no report ({ended}{_last_line(log)})")
            continue
        report = reports[-1]
        judged = report.get("expected") or {}
        if judged.get("gpus") != pool.gpus or judged.get("model") != pool.gpu_model:
            problems.append(
                f"{subject}: the GPU check judged the node as {judged.get('gpus')} x {judged.get('model')}, "
                f"the catalog says {pool.gpus} x {pool.gpu_model}"
            )
        if not report["healthy"]:
            failed = [f for f in report["findings"] if f.get("severity") == "fail"]
            details = "; ".join(
                (f"GPU {f['gpu']}: " if f.get("gpu") is not None else "") + f.get("message", f.get("check", "?"))
                for f in failed
            )
            problems.append(f"{subject}: the GPU check found the node unhealthy: {details}")
    return problems


_VERDICT_LINE = re.compile(
    r"^(?P<verb>PASS|FAIL): peak bus bandwidth (?P<peak>[0-9.]+) GB/s, threshold (?P<threshold>[0-9.]+) GB/s"
)


def collective_verdict(log: str) -> dict[str, Any] | None:
    """The collective check's verdict: its JSON `verdict` event, else its PASS/FAIL line."""
    for event in reversed(json_lines(log)):
        if event.get("event") == "verdict":
            return event
    for line in reversed(log.splitlines()):
        match = _VERDICT_LINE.match(line.strip())
        if match:
            return {"peak_busbw_gbps": float(match["peak"]), "threshold_gbps": float(match["threshold"]),
                    "all_correct": True}
        if line.strip() == "FAIL: all-reduce returned wrong values":
            return {"peak_busbw_gbps": 0.0, "threshold_gbps": 0.0, "all_correct": False}
    return None


def check_collectives(state: ClusterState, expect: StackExpectation) -> list[str]:
    """Where the training job is multi-node on EFA, the all-reduce check ran, returned
    right values and reached the stack's bus bandwidth threshold."""
    floor = expect.collective_threshold_gbps
    if floor is None:
        return []
    pods = sorted((p for p in state.pods if runs_module(p, COLLECTIVES_MODULE)), key=_created)
    if not pods:
        return [f"no collective bandwidth result: no pod ran {COLLECTIVES_MODULE} "
                f"(the training job on pool {expect.training_pool} runs it, threshold {floor:g} GB/s)"]
    verdicts = [(pod, collective_verdict(state.logs.get(namespaced(pod), ""))) for pod in pods]
    found = [(pod, v) for pod, v in verdicts if v is not None]
    if not found:
        pod = pods[0]
        return [f"the collective check {namespaced(pod)} printed no verdict "
                f"({pod_trouble(pod)}: {_last_line(state.logs.get(namespaced(pod), ''))})"]
    pod, verdict = found[-1]
    where = f"the collective check {namespaced(pod)}"
    if not verdict.get("all_correct", False):
        return [f"{where}: all-reduce returned wrong values"]
    peak, threshold = float(verdict["peak_busbw_gbps"]), float(verdict["threshold_gbps"])
    if threshold < floor:
        return [f"{where} ran with a {threshold:g} GB/s threshold, below the stack's {floor:g} GB/s "
                f"(peak {peak:.1f} GB/s)"]
    if peak < threshold:
        return [
            f"{where}: peak all-reduce bus bandwidth {peak:.1f} GB/s is below the {threshold:g} GB/s threshold "
            "(a few GB/s means NCCL fell back to TCP sockets instead of EFA)"
        ]
    return []


# The order is the order of the tests in tests/acceptance/test_cluster.py.
CLUSTER_CHECKS: dict[str, ClusterCheck] = {
    "nodes_ready": check_nodes_ready,
    "node_pools": check_node_pools,
    "allocatable_devices": check_allocatable,
    "device_plugins_ready": check_device_plugins,
    "gpu_node_check": check_gpu_node_check,
    "collective_bandwidth": check_collectives,
}
