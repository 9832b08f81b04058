"""Ingress fences of the platform's own namespaces, as plain data.

Tenants may run any pod in their namespaces, so every port of a platform pod is a port a
tenant can try: Prometheus answers any query (every tenant's metrics), the Pushgateway
takes any series, controllers serve metrics and debug handlers. Each platform namespace
denies ingress by default and admits only: its own pods (the stack's components talk among
themselves), Prometheus (it scrapes every namespace), and the openings listed here, each
with who needs it. Webhooks and aggregated APIs are called by the API server, whose source
address a policy cannot name (EKS's control-plane interfaces in the cluster's subnets, a
customer's control-plane hosts), so those ports are open to any source: what answers there
is an admission verdict or an API that authenticates its caller.

Egress stays open in these namespaces: Prometheus scrapes every pod and node on their own
ports, and the controllers talk to the API server. The tenants' and the serving and tracking
namespaces deny both ways (components/tenancy_spec.py, inference_spec.py, tracking_spec.py).
Nothing here imports Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.inference_spec import PROMETHEUS_PORT
from components.rollout_values import ARGO_ROLLOUTS_NAMESPACE
from components.tenancy_spec import MONITORING_NAMESPACE, pods_in

PROMETHEUS_PODS = {"app.kubernetes.io/name": "prometheus"}


@dataclass(frozen=True)
class Opening:
    name: str  # the NetworkPolicy's name
    pods: tuple[tuple[str, str], ...]  # the labels of the pods it opens
    ports: tuple[int, ...]
    reason: str
    # Who may connect: peers as NetworkPolicy writes them; empty: any source.
    sources: tuple[dict[str, Any], ...] = ()


OPENINGS: dict[str, tuple[Opening, ...]] = {
    "kueue-system": (Opening(
        "allow-api-server", (("app.kubernetes.io/name", "kueue"), ("control-plane", "controller-manager")),
        (9443, 8082), "The API server calls Kueue's admission webhooks (9443) and its visibility API (8082)."),),
    "jobset-system": (Opening(
        "allow-api-server", (("app.kubernetes.io/name", "jobset"),), (9443,),
        "The API server calls JobSet's admission webhooks."),),
    MONITORING_NAMESPACE: (
        Opening("allow-api-server", (("app.kubernetes.io/name", "prometheus-adapter"),), (6443,),
                "The API server aggregates prometheus-adapter's custom metrics API (the inference autoscaler's)."),
        Opening("allow-rollout-analysis", tuple(PROMETHEUS_PODS.items()), (PROMETHEUS_PORT,),
                "Argo Rollouts' canary analysis queries Prometheus.",
                (pods_in(ARGO_ROLLOUTS_NAMESPACE, {"app.kubernetes.io/name": "argo-rollouts"}),)),
    ),
}


def _policy(namespace: str, name: str, spec: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/part-of": "mlplat"},
                         "annotations": {"mlplat.io/reason": reason}},
            "spec": spec}


def ingress_policies(namespace: str) -> list[dict[str, Any]]:
    """Deny ingress, then admit the namespace's own pods, Prometheus, and its openings."""
    policies = [
        _policy(namespace, "default-deny-ingress", {"podSelector": {}, "policyTypes": ["Ingress"]},
                "Nothing reaches a platform pod unless a policy below admits it."),
        _policy(namespace, "allow-same-namespace", {
            "podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]},
            "The namespace's components call each other; no tenant can run a pod here."),
    ]
    if namespace != MONITORING_NAMESPACE:  # there, its own pods already
        policies.append(_policy(namespace, "allow-prometheus", {
            "podSelector": {}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [pods_in(MONITORING_NAMESPACE, PROMETHEUS_PODS)]}]},
            "Prometheus scrapes the components' metrics ports."))
    for opening in OPENINGS.get(namespace, ()):
        rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": p} for p in opening.ports]}
        if opening.sources:
            rule["from"] = [dict(s) for s in opening.sources]
        policies.append(_policy(namespace, opening.name, {
            "podSelector": {"matchLabels": dict(opening.pods)}, "policyTypes": ["Ingress"], "ingress": [rule]},
            opening.reason))
    return policies
