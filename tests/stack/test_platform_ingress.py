"""Side doors into the platform's own pods (issue 34, findings 6 and 7): the rendered
NetworkPolicies of prod's and onprem's cluster layers, decided by tests/netpol.py.

The attacker is a pod in a tenant's namespace wearing whatever labels it likes: those of
the pod it aims at, of Prometheus, of Argo Rollouts, of the drift check. It must reach no
platform pod except at the platform's entrances, each computed here from the rendered
objects, not from the policies: the tracking server, the gateway's listeners, and the ports
the API server calls (webhooks, aggregated APIs). Those who must get in still do: the API
server to every webhook, Prometheus to every scrape target, Argo's analysis to Prometheus,
the drift check to the Pushgateway.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from components.drift_spec import PUSHED_METRICS
from components.inference_spec import GRPC_PORT, HTTP_PORT, gateway_pods
from components.system_network_spec import ingress_policies
from components.tracking_spec import PORT as TRACKING_PORT
from infra.preview.report import kubernetes_objects
from tests.conftest import preview
from tests.netpol import Cluster, Pod, selects

STACKS = ("prod-cluster", "onprem")
PROMETHEUS = {"app.kubernetes.io/name": "prometheus", "prometheus": "kube-prometheus-stack-prometheus"}
ARGO = {"app.kubernetes.io/name": "argo-rollouts", "app.kubernetes.io/component": "rollouts-controller"}
API_SERVER = Pod(None, ip="10.0.12.34")  # EKS's control-plane interface in a cluster subnet


@cache
def objects(stack: str) -> list[dict[str, Any]]:
    return kubernetes_objects(preview(stack))


def tenants(stack: str) -> list[str]:
    return [o["metadata"]["name"] for o in objects(stack) if o["kind"] == "Namespace"
            and "mlplat.io/tenant" in (o["metadata"].get("labels") or {})]


def _template(o: dict[str, Any]) -> dict[str, Any] | None:
    if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
        return o["spec"]["template"]
    if o["kind"] == "CronJob":
        return o["spec"]["jobTemplate"]["spec"]["template"]
    return None


def pods(stack: str) -> dict[str, Pod]:
    """Every pod the stack's objects make, by `namespace/kind/name`, the operators' pods
    (Prometheus, Alertmanager, the gateway's proxies) with the labels and ports their
    operators give them. hostNetwork pods are the node's: no policy applies to them."""
    found: dict[str, Pod] = {}
    for o in objects(stack):
        template = _template(o)
        if template is None or template["spec"].get("hostNetwork"):
            continue
        ports = {p.get("name", str(p["containerPort"])): p["containerPort"]
                 for c in template["spec"]["containers"] for p in c.get("ports", [])}
        found[f"{o['metadata']['namespace']}/{o['kind']}/{o['metadata']['name']}"] = Pod(
            o["metadata"]["namespace"], dict(template["metadata"].get("labels") or {}), ports)
    kinds = {o["kind"] for o in objects(stack)}
    if "Prometheus" in kinds:
        found["monitoring/Prometheus"] = Pod("monitoring", PROMETHEUS, {"http-web": 9090, "reloader-web": 8080})
    if "Alertmanager" in kinds:
        found["monitoring/Alertmanager"] = Pod("monitoring", {"app.kubernetes.io/name": "alertmanager"},
                                               {"http-web": 9093})
    for gw in (o for o in objects(stack) if o["kind"] == "Gateway"):
        listeners = {f"listener-{x['port']}": x["port"] for x in gw["spec"]["listeners"]}
        found["envoy-gateway-system/proxy"] = Pod("envoy-gateway-system", {
            **gateway_pods(gw["metadata"]["namespace"]), "app.kubernetes.io/name": "envoy",
            "app.kubernetes.io/component": "proxy"}, {**listeners, "metrics": 19001})
    return found


def platform_pods(stack: str) -> dict[str, Pod]:
    own = set(tenants(stack)) | {"kube-system"}  # kube-system is EKS's (or the customer's)
    return {k: p for k, p in pods(stack).items() if p.namespace not in own}


def called_by_the_api_server(stack: str) -> set[tuple[str, int]]:
    """(pod, port) of every webhook and aggregated API, through its Service."""
    everything = objects(stack)
    services = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in everything if o["kind"] == "Service"}
    refs = [w["clientConfig"]["service"] for o in everything
            if o["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
            for w in o["webhooks"] if "service" in w["clientConfig"]]
    refs += [o["spec"]["service"] for o in everything if o["kind"] == "APIService" and o["spec"].get("service")]
    assert refs, f"{stack}: no webhooks found; the walk is broken"
    found = set()
    for ref in refs:
        svc = services[(ref["namespace"], ref["name"])]
        port = next(p for p in svc["spec"]["ports"] if p["port"] == ref.get("port", 443))
        for key, pod in pods(stack).items():
            if pod.namespace == ref["namespace"] and selects({"matchLabels": svc["spec"]["selector"]}, pod.labels):
                target = port.get("targetPort", port["port"])
                found.add((key, pod.ports[target] if isinstance(target, str) else target))
    return found


def entrances(stack: str) -> set[tuple[str, int]]:
    """Where a tenant's pod may connect in the platform: computed from what the stack runs."""
    found = set(called_by_the_api_server(stack))
    for key, pod in platform_pods(stack).items():
        if pod.labels.get("app.kubernetes.io/name") == "mlflow":
            found.add((key, TRACKING_PORT))  # the tracking server admits tenants, and checks who
        if key == "envoy-gateway-system/proxy":
            found |= {(key, GRPC_PORT), (key, HTTP_PORT)}  # the gateway authenticates every request
    return found


def attacker(namespace: str, target: Pod) -> Pod:
    """A tenant's pod with every label that opens a door somewhere, and an address in the
    VPC as the VPC CNI gives pods (an ipBlock of the VPC's CIDR would let it in)."""
    return Pod(namespace, {**PROMETHEUS, **ARGO, "app.kubernetes.io/name": "model-drift",
                           "app.kubernetes.io/instance": "gpt", "app.kubernetes.io/part-of": "mlplat",
                           **target.labels}, ip="10.0.200.7")


@pytest.mark.parametrize("stack", STACKS)
def test_a_tenants_pod_reaches_no_platform_pod_but_at_its_entrances(stack):
    cluster = Cluster(objects(stack))
    expected = entrances(stack)
    assert any(k.startswith("monitoring/") for k, _ in expected)  # prometheus-adapter's API
    reached = {(key, port) for key, pod in platform_pods(stack).items() for port in set(pod.ports.values())
               for tenant in tenants(stack) if cluster.admits(attacker(tenant, pod), pod, port)}
    assert reached == expected


@pytest.mark.parametrize("stack", STACKS)
def test_every_platform_namespace_that_runs_pods_denies_ingress_by_default(stack):
    namespaces = {pod.namespace for pod in platform_pods(stack).values()}
    assert {"monitoring", "kueue-system", "jobset-system"} <= namespaces
    for namespace in namespaces:
        deny = [p for p in objects(stack) if p["kind"] == "NetworkPolicy" and p["metadata"]["namespace"] == namespace
                and p["spec"]["podSelector"] == {} and "Ingress" in p["spec"]["policyTypes"]
                and not p["spec"].get("ingress")]
        assert deny, f"{stack}: {namespace} has no default-deny ingress"


@pytest.mark.parametrize("stack", STACKS)
def test_the_api_server_still_reaches_every_webhook_and_aggregated_api(stack):
    cluster = Cluster(objects(stack))
    found = pods(stack)
    called = called_by_the_api_server(stack)
    assert {k.split("/")[0] for k, _ in called} >= {"kueue-system", "jobset-system", "monitoring"}
    refused = [(k, port) for k, port in called if not cluster.admits(API_SERVER, found[k], port)]
    assert refused == []


def scrape_targets(stack: str) -> set[tuple[str, int]]:
    """(pod, port) of every ServiceMonitor's and PodMonitor's endpoints."""
    everything = objects(stack)
    found = pods(stack)
    targets = set()
    for monitor in (o for o in everything if o["kind"] in ("ServiceMonitor", "PodMonitor")):
        spec, ns = monitor["spec"], monitor["metadata"]["namespace"]
        namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or [ns]
        if monitor["kind"] == "PodMonitor":
            ports = [e["port"] for e in spec["podMetricsEndpoints"]]
            selected = [(k, p, ports) for k, p in found.items()
                        if p.namespace in namespaces and selects(spec["selector"], p.labels)]
        else:
            selected = []
            for svc in (o for o in everything if o["kind"] == "Service" and o["metadata"]["namespace"] in namespaces
                        and selects(spec["selector"], o["metadata"].get("labels") or {})):
                by_name = {p.get("name"): p for p in svc["spec"]["ports"]}
                ports = [by_name[e["port"]].get("targetPort", by_name[e["port"]]["port"]) for e in spec["endpoints"]
                         if e.get("port") in by_name]
                selected += [(k, p, ports) for k, p in found.items() if p.namespace == svc["metadata"]["namespace"]
                             and selects({"matchLabels": svc["spec"].get("selector") or {}}, p.labels)]
        for key, pod, ports in selected:
            targets |= {(key, pod.ports[p] if isinstance(p, str) else int(p)) for p in ports}
    return targets


@pytest.mark.parametrize("stack", STACKS)
def test_prometheus_still_scrapes_every_target(stack):
    cluster = Cluster(objects(stack))
    found = pods(stack)
    prometheus = found["monitoring/Prometheus"]
    targets = scrape_targets(stack)
    assert {k.split("/")[0] for k, _ in targets} >= {"monitoring", "kueue-system", "argo-rollouts"} - (
        set() if stack == "prod-cluster" else {"argo-rollouts"})
    refused = [(k, port) for k, port in targets if not cluster.admits(prometheus, found[k], port)]
    assert refused == []


def test_argos_analysis_queries_prometheus_and_a_look_alike_in_a_tenant_namespace_cannot():
    cluster = Cluster(objects("prod-cluster"))
    prometheus = pods("prod-cluster")["monitoring/Prometheus"]
    argo = pods("prod-cluster")["argo-rollouts/Deployment/argo-rollouts"]
    assert cluster.admits(argo, prometheus, 9090)
    for tenant in tenants("prod-cluster"):
        assert not cluster.admits(Pod(tenant, dict(argo.labels)), prometheus, 9090)
        assert not cluster.admits(Pod(tenant, dict(PROMETHEUS)), prometheus, 9090)


def test_only_the_drift_check_pushes_and_only_its_models_drift_series_are_kept():
    """The check runs in the serving namespace, where no tenant runs pods: a pod with its
    labels in any tenant's namespace, the model's own tenant's included, is refused."""
    everything = objects("prod-cluster")
    cluster = Cluster(everything)
    found = pods("prod-cluster")
    gateway = found["monitoring/Deployment/pushgateway"]
    [check] = [p for k, p in found.items() if "/CronJob/model-drift-" in k]
    assert check.namespace == "inference" and check.namespace not in tenants("prod-cluster")
    assert cluster.connects(check, gateway, 9091)
    for tenant in tenants("prod-cluster"):
        assert not cluster.admits(Pod(tenant, dict(check.labels)), gateway, 9091), tenant
    triton = found["inference/Deployment/triton"]
    assert not cluster.connects(triton, gateway, 9091)  # a model's code cannot push either
    [monitor] = [o for o in everything if o["kind"] == "ServiceMonitor" and o["metadata"]["name"] == "pushgateway"]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is False  # a pushed job or instance cannot pass for another target
    keep = [r for r in endpoint["metricRelabelings"] if r["action"] == "keep"]
    assert len(keep) == 1 and keep[0]["sourceLabels"] == ["__name__", "model"]
    assert set(PUSHED_METRICS) == {"mlplat_model_input_drift_score", "mlplat_model_input_drifted",
                                   "mlplat_model_input_drift_rows", "mlplat_model_drift_check_timestamp_seconds"}


def test_the_drift_check_reaches_what_it_needs_and_nothing_else_in_its_namespace():
    cluster = Cluster(objects("prod-cluster"))
    found = pods("prod-cluster")
    [check] = [p for k, p in found.items() if "/CronJob/model-drift-" in k]
    tracking = found["mlflow/Deployment/mlflow"]
    assert cluster.connects(check, tracking, TRACKING_PORT)  # the lineage, as its tenant
    assert cluster.connects(check, Pod(None, ip="10.0.40.5"), 443)  # an interface endpoint (S3 and the rest)
    assert cluster.connects(check, Pod(None, ip="169.254.170.23"), 80)  # Pod Identity
    assert not cluster.connects(check, found["inference/Deployment/triton"], 8000)
    assert not cluster.connects(check, Pod(None, ip="8.8.8.8"), 443)
    # The tracking server admits the check from the serving namespace, not its look-alike elsewhere.
    assert not cluster.admits(Pod("inference", {"app": "other"}), tracking, TRACKING_PORT)


def test_a_platform_namespace_without_its_openings_would_refuse_the_api_server():
    """Plant the bug: drop kueue-system's opening, and the API server's calls to Kueue's
    webhooks are refused (what the walk above would report)."""
    everything = [o for o in objects("prod-cluster")
                  if not (o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == "kueue-system"
                          and o["metadata"]["name"] == "allow-api-server")]
    cluster = Cluster(everything)
    found = pods("prod-cluster")
    kueue = [(k, port) for k, port in called_by_the_api_server("prod-cluster") if k.startswith("kueue-system/")]
    assert kueue and not any(cluster.admits(API_SERVER, found[k], port) for k, port in kueue)
    assert [p["metadata"]["name"] for p in ingress_policies("kueue-system")][-1] == "allow-api-server"
