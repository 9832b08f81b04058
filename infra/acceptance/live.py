"""Reading a real cluster: the Kubernetes API for the cluster checks, testinfra for nodes.

Nodes are reached by default through a short-lived privileged debug pod per node (what
`kubectl debug node/<name> --profile=sysadmin` creates: host PID, IPC and network, the
node's root at /host), so nodes need no SSH; `ssh` is there for clusters that allow it.
The debug pods carry a deadline, so a suite that dies leaves nothing running for long, and
a label (`mlplat.io/acceptance`) to find any it left behind.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from infra.acceptance.cluster import ClusterState, Obj, name
from infra.acceptance.node import NodeView

DEBUG_LABEL = "mlplat.io/acceptance"
DEBUG_CONTAINER = "debug"
DEBUG_SECONDS = 1800
HOST_ROOT = "/host"


def debug_pod_manifest(node: str, pod_name: str, namespace: str, image: str) -> dict[str, Any]:
    """A privileged pod pinned to `node` that sees the node as the node sees itself.

    Privileged with the host's namespaces on purpose: the checks read /proc of the host,
    run the host's own nvidia-smi and fi_info under chroot, and ask the metadata service
    from the host's network, which is exactly what a node-level check must see.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": namespace,
            "labels": {DEBUG_LABEL: "node-debug", "app.kubernetes.io/managed-by": "mlplat-acceptance"},
        },
        "spec": {
            "nodeName": node,
            "hostPID": True,
            "hostIPC": True,
            "hostNetwork": True,
            "restartPolicy": "Never",
            # Stopped by the kubelet after this long even if the suite never cleans up.
            "activeDeadlineSeconds": DEBUG_SECONDS,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            # Tainted GPU and system nodes included: the checks visit every node.
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": DEBUG_CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", str(DEBUG_SECONDS)],
                    "securityContext": {"privileged": True},
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "500m", "memory": "128Mi"},
                    },
                    "volumeMounts": [{"name": "host-root", "mountPath": HOST_ROOT}],
                }
            ],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
        },
    }


def debug_pod_name(node: str) -> str:
    """A valid, unique-enough pod name for a node: node names are long DNS names."""
    stem = re.sub(r"[^a-z0-9-]", "-", node.split(".")[0].lower())[:40].strip("-")
    return f"mlplat-acceptance-{stem}-{int(time.time()) % 100000}"


_MIRROR_IMAGE = r"(?P<account>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/mlplat/"


def mirror_account(state: ClusterState, region: str) -> str | None:
    """The account of the in-region registry, read from an image the platform already
    runs (every platform pod pulls from it), so the debug image comes from there too."""
    for pod in state.pods:
        for container in pod.get("spec", {}).get("containers") or []:
            match = re.match(_MIRROR_IMAGE, container.get("image", ""))
            if match and match.group("region") == region:
                return match.group("account")
    return None


@dataclass
class LiveCluster:
    """The Kubernetes API of one cluster, through the official Python client."""

    kubeconfig: str | None = None
    context: str | None = None

    def __post_init__(self) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=self.kubeconfig, context=self.context)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)

    @staticmethod
    def _items(response: Any) -> tuple[Obj, ...]:
        # Raw JSON, not the client's models: the checks and the fixtures read the same
        # camelCase shape `kubectl get -o json` prints.
        return tuple(json.loads(response.data)["items"])

    def read_state(self, log_pods: Any = None) -> ClusterState:
        """Nodes, daemon sets, pods, jobs and services; then the logs of the (pod, container)
        pairs `log_pods(state)` picks (those whose output carries a check's result)."""
        state = ClusterState(
            nodes=self._items(self.core.list_node(_preload_content=False)),
            daemon_sets=self._items(self.apps.list_daemon_set_for_all_namespaces(_preload_content=False)),
            pods=self._items(self.core.list_pod_for_all_namespaces(_preload_content=False)),
            jobs=self._items(self.batch.list_job_for_all_namespaces(_preload_content=False)),
            services=self._items(self.core.list_service_for_all_namespaces(_preload_content=False)),
        )
        logs = {}
        for pod, container in log_pods(state) if log_pods else ():
            meta = pod["metadata"]
            response = self.core.read_namespaced_pod_log(
                meta["name"], meta["namespace"], container=container, _preload_content=False
            )
            logs[f"{meta['namespace']}/{meta['name']}"] = response.data.decode(errors="replace")
        return dataclasses.replace(state, logs=logs)

    @contextmanager
    def debug_views(
        self, nodes: list[str], namespace: str, image: str, timeout: float = 300
    ) -> Iterator[dict[str, NodeView | str]]:
        """One debug pod per node, deleted afterwards; yields each node's view, or why
        its pod did not start."""
        created: dict[str, str] = {}
        try:
            for node in nodes:
                pod_name = debug_pod_name(node)
                self.core.create_namespaced_pod(namespace, debug_pod_manifest(node, pod_name, namespace, image))
                created[node] = pod_name
            failed = self._wait_running(created, namespace, timeout)
            yield {node: failed.get(node) or self.debug_view(pod, namespace) for node, pod in created.items()}
        finally:
            for pod_name in created.values():
                try:
                    self.core.delete_namespaced_pod(pod_name, namespace, grace_period_seconds=0)
                except Exception:  # noqa: BLE001 - its deadline removes it anyway
                    pass

    def _wait_running(self, pods: dict[str, str], namespace: str, timeout: float) -> dict[str, str]:
        """Wait for the pods to run; returns {node: why} for those that did not."""
        failed: dict[str, str] = {}
        pending = dict(pods)
        deadline = time.monotonic() + timeout
        while pending:
            for node, pod_name in list(pending.items()):
                pod = json.loads(self.core.read_namespaced_pod(pod_name, namespace, _preload_content=False).data)
                phase = pod.get("status", {}).get("phase")
                if phase == "Running":
                    del pending[node]
                elif phase in ("Failed", "Succeeded"):
                    failed[node] = f"debug pod {namespace}/{pod_name} ended ({phase})"
                    del pending[node]
            if pending and time.monotonic() > deadline:
                for node, pod_name in pending.items():
                    failed[node] = f"debug pod {namespace}/{pod_name} did not start within {timeout:g} s"
                break
            if pending:
                time.sleep(2)
        return failed

    def debug_view(self, pod_name: str, namespace: str) -> NodeView:
        import testinfra

        host = testinfra.get_host(
            f"kubectl://{pod_name}",
            namespace=namespace,
            container=DEBUG_CONTAINER,
            **{k: v for k, v in (("kubeconfig", self.kubeconfig), ("context", self.context)) if v},
        )
        return NodeView(host, root=HOST_ROOT, chroot=True)


def ssh_view(node: Obj, user: str, identity_file: str | None = None, ssh_config: str | None = None) -> NodeView:
    """The node over SSH at its InternalIP, with sudo (PID 1's mount table needs root)."""
    import testinfra

    addresses = node.get("status", {}).get("addresses") or []
    address = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), name(node))
    extra = {k: v for k, v in (("ssh_identity_file", identity_file), ("ssh_config", ssh_config)) if v}
    return NodeView(testinfra.get_host(f"ssh://{user}@{address}", sudo=True, **extra), root="/")
