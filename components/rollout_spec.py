"""Two versions of the served model at once, behind an authenticating gateway, as plain
Kubernetes manifests.

Who does what (docs/serving.md, "Rollout", says why these):
- **Envoy Gateway** (Gateway API) is the only way in. Its Gateway in the inference
  namespace takes gRPC and REST; a GRPCRoute and an HTTPRoute send each request to the
  stable or the canary Service by weight. A SecurityPolicy on the Gateway checks every
  request's JWT against the enterprise identity provider's keys (issuer, audience,
  expiry) and lets through only the tenants this model serves.
- **Argo Rollouts** owns the two versions. Its Rollout runs the pods of the Triton
  Deployment's template (`workloadRef`), so a new version in `mlplat:inference.version`
  becomes a new template, which Argo brings up as the canary. Its Gateway API plugin
  moves the routes' weights step by step, and an AnalysisTemplate asks Prometheus,
  every minute, whether the canary-abort alert fires: one failure aborts the rollout,
  which sends all traffic back to the stable pods and scales the canary down.
- **Prometheus** holds the rule: per-variant request, error and p99 series from Triton's
  own metrics (its pods labelled stable or canary by Argo), and the alert that fires when
  the canary's error rate or p99 exceeds the stable's by the configured margin for the
  configured window.

Nothing here imports Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.inference_spec import (
    ENVOY_GATEWAY_NAMESPACE,
    GATEWAY,
    GRPC_PORT,
    HTTP_PORT,
    PROMETHEUS_PORT,
    PROMETHEUS_URL,
    ROLLOUTS_API,
    VARIANT,
    VARIANT_LABEL,
    ServingPlan,
    gateway_pods,
    labels,
    service,
)
from components.request_log_spec import TENANT_HEADER, RequestLogPlan, extension_policy, mirror_filter
from components.tenancy_spec import MONITORING_NAMESPACE

GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io/v1alpha1"
# Argo labels each pod with the role it has now (ephemeral metadata, moved on promotion),
# and the PodMonitor copies the label onto every series the pod exports as VARIANT.
STABLE, CANARY = "stable", "canary"
GATEWAY_PLUGIN = "argoproj-labs/gatewayAPI"
GATEWAY_CLASS = "mlplat-envoy"
ENVOY_PROXY = "mlplat-proxy"
# Where the gateway's listeners are: the same ports Triton serves on, so clients keep
# their addresses.
GRPC_LISTENER, HTTP_LISTENER = "grpc", "http"
# Alert names the analysis and the runbooks refer to.
CANARY_ALERT = "InferenceCanaryUnhealthy"
AUTH_ALERT = "InferenceAuthFailures"
ANALYSIS = "canary-health"
# Triton's own per-request latency quantiles (`--metrics-config summary_latencies=true`).
P99_SERIES = 'nv_inference_request_summary_us{quantile="0.99"}'


@dataclass(frozen=True)
class AbortRule:
    """When a canary is rolled back: its error rate above `error_ratio` times the stable's
    (or above `error_floor`, when the stable has next to no errors), or its p99 above
    `p99_ratio` times the stable's, for `window_minutes`, while it takes at least
    `min_requests_per_second` (too little traffic says nothing)."""

    error_ratio: float = 2.0
    error_floor: float = 0.01
    p99_ratio: float = 1.5
    window_minutes: int = 10
    min_requests_per_second: float = 0.5


@dataclass(frozen=True)
class AuthPlan:
    """The enterprise identity provider, and who may call this model."""

    issuer: str
    audiences: tuple[str, ...]
    jwks_uri: str
    tenant_claim: str  # the token's claim that names the caller's tenant
    tenants: tuple[str, ...]  # the tenants this model serves


@dataclass(frozen=True)
class RolloutPlan:
    serving: ServingPlan
    # Canary: the canary's share at each step, each held `step_minutes` while the analysis
    # runs; after the last, the canary is promoted. A/B: one step, held until promoted.
    steps: tuple[int, ...] = (10, 25, 50)
    step_minutes: int = 10
    hold_last_step: bool = False  # A/B: the split stays until someone promotes or aborts
    abort: AbortRule = AbortRule()
    auth: AuthPlan | None = None
    request_log: RequestLogPlan | None = None  # a sample of the requests mirrored to the logger

    @property
    def namespace(self) -> str:
        return self.serving.namespace

    @property
    def name(self) -> str:
        return self.serving.name


def variant_service_name(plan: RolloutPlan, variant: str) -> str:
    return f"{plan.name}-{variant}"


def split(plan: RolloutPlan, step: int | None) -> dict[str, int]:
    """The weights the plugin sets at step `step` (None: no rollout in progress)."""
    canary = 0 if step is None else plan.steps[step]
    return {STABLE: 100 - canary, CANARY: canary}


# --- Gateway ---------------------------------------------------------------------------


def gateway_class() -> dict[str, Any]:
    """Envoy Gateway answers this class; its proxies are configured by ENVOY_PROXY."""
    return {"apiVersion": GATEWAY_API, "kind": "GatewayClass", "metadata": {"name": GATEWAY_CLASS},
            "spec": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
                     "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy",
                                       "name": ENVOY_PROXY, "namespace": ENVOY_GATEWAY_NAMESPACE}}}


# Access log fields: who asked what and what came back, never a header's value (the
# Authorization header is a bearer token) nor a body.
ACCESS_LOG = {
    "start_time": "%START_TIME%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
    "protocol": "%PROTOCOL%",
    "response_code": "%RESPONSE_CODE%",
    "grpc_status": "%GRPC_STATUS%",
    "response_flags": "%RESPONSE_FLAGS%",
    "duration_ms": "%DURATION%",
    "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_host": "%UPSTREAM_HOST%",
    "client": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "details": "%RESPONSE_CODE_DETAILS%",
}


# The proxies run as Envoy's image's own non-root user; Envoy Gateway's container defaults
# already drop every capability and forbid escalation.
PROXY_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                      "seccompProfile": {"type": "RuntimeDefault"}}


def envoy_proxy(plan: RolloutPlan, image: str, *, replicas: int = 2) -> dict[str, Any]:
    """The gateway's proxies: two replicas from the in-region mirror, spread over zones,
    non-root, a ClusterIP Service (the internal NLB, where asked for, is the stack's own
    Service in front of them), Prometheus metrics, and JSON access logs without tokens."""
    return {
        "apiVersion": ENVOY_GATEWAY_API, "kind": "EnvoyProxy",
        "metadata": {"name": ENVOY_PROXY, "namespace": ENVOY_GATEWAY_NAMESPACE},
        "spec": {
            "provider": {"type": "Kubernetes", "kubernetes": {
                "envoyDeployment": {
                    "replicas": replicas,
                    "container": {"image": image,
                                  "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                                "limits": {"cpu": "2", "memory": "1Gi"}}},
                    "pod": {"securityContext": PROXY_POD_SECURITY,
                            "labels": {"app.kubernetes.io/part-of": "mlplat"},
                            "topologySpreadConstraints": [{
                                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": gateway_pods(plan.namespace)}}]},
                },
                "envoyService": {"type": "ClusterIP"},
            }},
            "telemetry": {
                "accessLog": {"settings": [{"format": {"type": "JSON", "json": ACCESS_LOG},
                                            "sinks": [{"type": "File", "file": {"path": "/dev/stdout"}}]}]},
                "metrics": {"prometheus": {}},
            },
        },
    }


def gateway(plan: RolloutPlan) -> dict[str, Any]:
    """The only way in: gRPC and REST listeners for routes of this namespace."""
    same = {"namespaces": {"from": "Same"}}
    return {
        "apiVersion": GATEWAY_API, "kind": "Gateway",
        "metadata": {"name": GATEWAY, "namespace": plan.namespace, "labels": labels(plan.serving)},
        "spec": {"gatewayClassName": GATEWAY_CLASS, "listeners": [
            {"name": GRPC_LISTENER, "protocol": "HTTP", "port": GRPC_PORT,
             "allowedRoutes": {**same, "kinds": [{"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"}]}},
            {"name": HTTP_LISTENER, "protocol": "HTTP", "port": HTTP_PORT,
             "allowedRoutes": {**same, "kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}]}},
        ]},
    }


def gateway_clients(plan: RolloutPlan) -> dict[str, Any]:
    """The proxies run in Envoy Gateway's namespace, which denies ingress by default
    (components/system_network_spec.py): open their listener ports, and only those, to any
    caller (tenants' pods, the internal load balancer). The proxies authenticate every
    request."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{GATEWAY}-gateway-clients", "namespace": ENVOY_GATEWAY_NAMESPACE,
                         "labels": labels(plan.serving)},
            "spec": {"podSelector": {"matchLabels": gateway_pods(plan.namespace)}, "policyTypes": ["Ingress"],
                     "ingress": [{"ports": [{"protocol": "TCP", "port": p} for p in (GRPC_PORT, HTTP_PORT)]}]}}


def _backends(plan: RolloutPlan, port: int) -> list[dict[str, Any]]:
    weights = split(plan, None)
    # Group and kind spelled out: the API server defaults them before its rules run.
    return [{"group": "", "kind": "Service", "name": variant_service_name(plan, variant), "port": port,
             "weight": weights[variant]} for variant in (STABLE, CANARY)]


def _parent(listener: str) -> dict[str, Any]:
    return {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY, "sectionName": listener}


def _mirrored(plan: RolloutPlan, port: int) -> dict[str, Any]:
    """A copy of the sampled requests to the request logger, after authentication (where
    outputs are logged too, Envoy's ext_proc carries the requests instead)."""
    log = plan.request_log
    return {"filters": [mirror_filter(log, port)]} if log is not None and not log.log_outputs else {}


def outputs_policy(plan: RolloutPlan) -> dict[str, Any] | None:
    """Where outputs are logged: Envoy's ext_proc on both routes."""
    if plan.request_log is None:
        return None
    return extension_policy(plan.request_log, (("GRPCRoute", plan.name), ("HTTPRoute", plan.name)))


def grpc_route(plan: RolloutPlan) -> dict[str, Any]:
    """KServe v2 gRPC (`inference.GRPCInferenceService`) to the two variants; any other
    service gets no route."""
    return {
        "apiVersion": GATEWAY_API, "kind": "GRPCRoute",
        "metadata": {"name": plan.name, "namespace": plan.namespace, "labels": labels(plan.serving)},
        "spec": {
            "parentRefs": [_parent(GRPC_LISTENER)],
            "rules": [{"matches": [{"method": {"type": "Exact", "service": "inference.GRPCInferenceService"}}],
                       **_mirrored(plan, GRPC_PORT), "backendRefs": _backends(plan, GRPC_PORT)}],
        },
    }


def http_route(plan: RolloutPlan) -> dict[str, Any]:
    """KServe v2 REST for this model only (`/v2/models/<model>/...`)."""
    return {
        "apiVersion": GATEWAY_API, "kind": "HTTPRoute",
        "metadata": {"name": plan.name, "namespace": plan.namespace, "labels": labels(plan.serving)},
        "spec": {
            "parentRefs": [_parent(HTTP_LISTENER)],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/v2/models/{plan.serving.model}"}}],
                       **_mirrored(plan, HTTP_PORT), "backendRefs": _backends(plan, HTTP_PORT)}],
        },
    }


def security_policy(plan: RolloutPlan) -> dict[str, Any] | None:
    """Every request through the Gateway carries a JWT the identity provider signed, for
    this audience, not expired (Envoy's jwt_authn refuses a missing, forged or expired
    token with 401); then only the listed tenants are allowed (403 for the others)."""
    auth = plan.auth
    if auth is None:
        return None
    provider = "enterprise"
    return {
        "apiVersion": ENVOY_GATEWAY_API, "kind": "SecurityPolicy",
        "metadata": {"name": f"{plan.name}-callers", "namespace": plan.namespace, "labels": labels(plan.serving)},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY}],
            # The tenant reaches the request logger as a header the gateway sets from the
            # token (a client's own header of that name is dropped on arrival: client_headers).
            "jwt": {"providers": [{"name": provider, "issuer": auth.issuer, "audiences": list(auth.audiences),
                                   "remoteJWKS": {"uri": auth.jwks_uri},
                                   "claimToHeaders": [{"claim": auth.tenant_claim, "header": TENANT_HEADER}]}]},
            "authorization": {"defaultAction": "Deny", "rules": [{
                "name": "tenants-of-this-model", "action": "Allow",
                "principal": {"jwt": {"provider": provider, "claims": [
                    {"name": auth.tenant_claim, "valueType": "String", "values": list(auth.tenants)}]}},
            }]},
        },
    }


def client_headers(plan: RolloutPlan) -> dict[str, Any]:
    """A client's own tenant header is dropped as the request arrives, before the JWT filter
    sets the gateway's from the token: the request logger records the tenant the gateway
    vouched for, or none, never one a caller wrote (Envoy's early header mutation runs
    before every HTTP filter; a route's header filter would run after, and drop the
    gateway's own)."""
    return {
        "apiVersion": ENVOY_GATEWAY_API, "kind": "ClientTrafficPolicy",
        "metadata": {"name": f"{plan.name}-client-headers", "namespace": plan.namespace,
                     "labels": labels(plan.serving)},
        "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY}],
                 "headers": {"earlyRequestHeaders": {"remove": [TENANT_HEADER]}}},
    }


# --- The two versions -------------------------------------------------------------------


def variant_service(plan: RolloutPlan, variant: str) -> dict[str, Any]:
    """The stable or the canary pods: Argo adds the pod-template hash of each to the
    selector, so the routes' weights decide which version answers."""
    return service(plan.serving, variant_service_name(plan, variant))


def variant_services(plan: RolloutPlan) -> list[dict[str, Any]]:
    return [variant_service(plan, STABLE), variant_service(plan, CANARY)]


def rollout(plan: RolloutPlan) -> dict[str, Any]:
    """Argo's Rollout of the Triton Deployment's template; the autoscaler scales the
    Rollout. In a new environment the Deployment has no pods; in one that served before,
    Argo scales its pods down as the Rollout's become available (`progressively`), so
    capacity never drops (docs/serving.md, "Moving an environment that serves")."""
    steps: list[dict[str, Any]] = []
    for index, weight in enumerate(plan.steps):
        steps.append({"setWeight": weight})
        last = index == len(plan.steps) - 1
        steps.append({"pause": {}} if last and plan.hold_last_step else
                     {"pause": {"duration": f"{plan.step_minutes}m"}})
    return {
        "apiVersion": ROLLOUTS_API, "kind": "Rollout",
        "metadata": {"name": plan.name, "namespace": plan.namespace, "labels": labels(plan.serving)},
        "spec": {
            # Created at zero, as the Deployment was: a new environment has no model yet.
            # Scaling it up once the first is published is the only manual step; the
            # autoscaler owns the count from then on.
            "replicas": 0,
            "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": plan.name, "scaleDown": "progressively"},
            "revisionHistoryLimit": 5,
            "strategy": {"canary": {
                "stableService": variant_service_name(plan, STABLE),
                "canaryService": variant_service_name(plan, CANARY),
                "stableMetadata": {"labels": {VARIANT_LABEL: STABLE}},
                "canaryMetadata": {"labels": {VARIANT_LABEL: CANARY}},
                "trafficRouting": {"plugins": {GATEWAY_PLUGIN: {
                    "namespace": plan.namespace,
                    "grpcRoutes": [{"name": plan.name, "useHeaderRoutes": False}],
                    "httpRoutes": [{"name": plan.name}],
                }}},
                # Capacity never drops while the canary scales: the stable keeps its pods
                # until the canary is promoted or aborted.
                "maxUnavailable": 0,
                "maxSurge": "25%",
                "abortScaleDownDelaySeconds": 30,
                "analysis": {"templates": [{"templateName": ANALYSIS}], "startingStep": 1},
                "steps": steps,
            }},
        },
    }


def analysis_template(plan: RolloutPlan) -> dict[str, Any]:
    """Asks Prometheus every minute whether the canary-abort alert fires for this model;
    the first time it does, the analysis fails and Argo aborts the rollout. The rule
    itself (margins, window) lives in the PrometheusRule, where promtool tests it."""
    query = (f'sum(ALERTS{{alertname="{CANARY_ALERT}",alertstate="firing",namespace="{plan.namespace}",'
             f'model="{plan.serving.model}"}}) or vector(0)')
    return {
        "apiVersion": ROLLOUTS_API, "kind": "AnalysisTemplate",
        "metadata": {"name": ANALYSIS, "namespace": plan.namespace, "labels": labels(plan.serving)},
        "spec": {"metrics": [{
            "name": "canary-abort-alert",
            "interval": "1m",
            "failureLimit": 0,
            # Prometheus unreachable for five minutes running is a reason to stop too.
            "consecutiveErrorLimit": 5,
            "successCondition": "result[0] == 0",
            "provider": {"prometheus": {"address": f"{PROMETHEUS_URL}:{PROMETHEUS_PORT}", "query": query}},
        }]},
    }


# --- Metrics and rules ------------------------------------------------------------------


def _by(*extra: str) -> str:
    return ", ".join(("namespace", "model", VARIANT, *extra))


def canary_rules(plan: RolloutPlan) -> dict[str, Any]:
    """Per-variant requests, errors and p99 from Triton's counters and summaries, and the
    abort alert comparing the canary with the stable over the same window. Rates over the
    whole window, not per minute: a canary takes a tenth of the traffic, and a minute of it
    holds too few errors to tell 1% from 2%."""
    rule = plan.abort
    window = f"{rule.window_minutes}m"
    requests, errors, p99 = ("mlplat:inference_requests:rate1m", "mlplat:inference_errors:rate1m",
                             "mlplat:inference_p99_us")
    w_requests, w_ratio, w_p99 = ("mlplat:inference_requests:rate_window", "mlplat:inference_error_ratio:window",
                                  "mlplat:inference_p99_us:window")
    scope = f'namespace="{plan.namespace}",model="{plan.serving.model}"'

    def side(series: str, variant: str) -> str:
        return f'{series}{{{scope},{VARIANT}="{variant}"}}'

    def total(metric: str, over: str, how: str = "rate") -> str:
        return f"sum by ({_by()}) ({how}({metric}[{over}]))"

    busy = f"{side(w_requests, CANARY)} >= {rule.min_requests_per_second}"
    error_high = (f"{side(w_ratio, CANARY)} > ignoring({VARIANT}) "
                  f"clamp_min({side(w_ratio, STABLE)} * {rule.error_ratio}, {rule.error_floor})")
    slow = f"{side(w_p99, CANARY)} > ignoring({VARIANT}) ({side(w_p99, STABLE)} * {rule.p99_ratio})"
    failed = "nv_inference_request_failure"
    succeeded = "nv_inference_request_success"
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": f"{plan.name}-variants", "namespace": MONITORING_NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "mlplat", "app.kubernetes.io/component": "inference"}},
        "spec": {"groups": [
            {"name": "inference-variants", "interval": "30s", "rules": [
                # What dashboards show per variant: requests and errors per second, p99.
                {"record": requests, "expr": f"{total(succeeded, '1m')} + {total(failed, '1m')}"},
                {"record": errors, "expr": total(failed, "1m")},
                # The worst replica's p99: a summary's quantiles cannot be averaged.
                {"record": p99, "expr": f"max by ({_by()}) ({P99_SERIES})"},
                # What the abort rule compares, over its window.
                {"record": w_requests, "expr": f"{total(succeeded, window)} + {total(failed, window)}"},
                # `> -1` drops 0/0, a variant without traffic.
                {"record": w_ratio, "expr": f"{total(failed, window, 'increase')} / ({total(succeeded, window, 'increase')}"
                                            f" + {total(failed, window, 'increase')}) > -1"},
                {"record": w_p99, "expr": f"avg_over_time({p99}[{window}])"},
            ]},
            {"name": "inference-canary", "interval": "30s", "rules": [
                {"alert": CANARY_ALERT,
                 "expr": f"(({error_high}) or ({slow})) and ignoring({VARIANT}) ({busy})",
                 # Two evaluations running: one odd scrape does not abort a rollout.
                 "for": "1m",
                 "labels": {"severity": "critical", "component": "inference"},
                 "annotations": {
                     "summary": "The canary of {{ $labels.model }} is worse than the stable version",
                     "description": (f"Over the last {window} the canary's error rate exceeded {rule.error_ratio}x "
                                     f"the stable's (and {rule.error_floor:.2%}) or its p99 exceeded "
                                     f"{rule.p99_ratio}x the stable's; Argo Rollouts aborts the rollout and "
                                     "sends all traffic back to the stable version.")}},
            ]},
        ]},
    }


def auth_rules(plan: RolloutPlan) -> dict[str, Any]:
    """Requests the gateway refused for their token (401: Envoy's JWT filter) or their
    tenant (403: its RBAC filter), per second, with the reason as a label."""
    refused = "mlplat:inference_auth_refused:rate5m"

    def by_reason(counter: str, reason: str) -> dict[str, str]:
        return {"record": refused,
                "expr": f'label_replace(sum by (namespace) (rate({counter}[5m])), "reason", "{reason}", "", "")'}

    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": f"{plan.name}-auth", "namespace": MONITORING_NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "mlplat", "app.kubernetes.io/component": "inference"}},
        "spec": {"groups": [{"name": "inference-auth", "rules": [
            by_reason("envoy_http_jwt_authn_denied", "token"),
            by_reason("envoy_http_rbac_denied", "tenant"),
            {"alert": AUTH_ALERT, "expr": f"sum by (namespace) ({refused}) > 1", "for": "10m",
             "labels": {"severity": "warning", "component": "inference"},
             "annotations": {"summary": "The inference gateway refuses more than one request a second",
                             "description": "Callers without a valid token or of another tenant: see the "
                                            "gateway's access log (it holds no tokens)."}},
        ]}]},
    }


def gateway_monitor(plan: RolloutPlan) -> dict[str, Any]:
    """Prometheus scrapes the gateway's proxies (their JWT and RBAC counters)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": "inference-gateway", "namespace": ENVOY_GATEWAY_NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "mlplat"}},
        "spec": {
            "selector": {"matchLabels": gateway_pods(plan.namespace)},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/stats/prometheus", "interval": "15s",
                                     "relabelings": [{"targetLabel": "namespace", "replacement": plan.namespace}]}],
        },
    }

