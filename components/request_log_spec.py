"""The request logger on the cluster and its rights in AWS, as plain data.

The gateway mirrors `samplePercent` of the requests it let through (Gateway API
`RequestMirror` on the routes, components/rollout_spec.py) to the `request-logger`
Service; the logger (`python -m workloads.monitor log-requests`, in the serving image)
writes them to `request-logs/<model>/` of the datasets bucket, under the datasets key,
where a lifecycle rule keeps them `retentionDays` and the bucket policy lets no one else
touch them. Nothing here imports Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.inference_spec import (
    ENVOY_GATEWAY_NAMESPACE,
    GRPC_PORT,
    HTTP_PORT,
    ServingPlan,
    gateway_pods,
)
from components.tenancy_spec import POD_IDENTITY_AGENT
from components.training_spec import CONTAINER_SECURITY, POD_SECURITY

NAME = "request-logger"
PREFIX = "request-logs"
EXT_PROC_PORT = 9002  # where the gateway streams requests with their responses (log_outputs)
TENANT_HEADER = "x-mlplat-tenant"  # set by the gateway from the token's tenant claim
# The kubelet kills the pod this long after SIGTERM; the logger is told to be gone STOP_MARGIN_S
# sooner, its last write included, so that what it could not write it says rather than loses.
GRACE_S = 60
STOP_MARGIN_S = 10


@dataclass(frozen=True)
class RequestLogPlan:
    serving: ServingPlan
    image: str  # the platform's serving image (it carries workloads/monitor)
    bucket: str  # the datasets bucket
    kms_key_arn: str  # its key: every object is written with SSE-KMS under it
    sample_percent: float
    fields: tuple[tuple[str, str], ...]  # (input or output, "personal" | "plain")
    allow_personal: bool = False
    log_outputs: bool = False  # streamed through Envoy's ext_proc instead of mirrored

    @property
    def namespace(self) -> str:
        return self.serving.namespace

    @property
    def model(self) -> str:
        return self.serving.model


def key_prefix(model: str) -> str:
    return f"{PREFIX}/{model}/"


def role_name(prefix: str, model: str) -> str:
    return f"{prefix}-inference-{model}-requests"[:64]


def labels(plan: RequestLogPlan) -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": plan.model,
            "app.kubernetes.io/component": "request-logging", "app.kubernetes.io/part-of": "mlplat"}


def _selector(plan: RequestLogPlan) -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/instance": plan.model}


def _meta(plan: RequestLogPlan, name: str = NAME) -> dict[str, Any]:
    return {"name": name, "namespace": plan.namespace, "labels": labels(plan)}


def command(plan: RequestLogPlan) -> list[str]:
    marked = [arg for name, kind in plan.fields for arg in ("--field", f"{name}={kind}")]
    return ["python", "-m", "workloads.monitor", "log-requests", "--model", plan.model, "--bucket", plan.bucket,
            "--prefix", PREFIX, "--kms-key", plan.kms_key_arn, *marked,
            *(["--allow-personal"] if plan.allow_personal else []),
            "--grpc-port", str(GRPC_PORT), "--http-port", str(HTTP_PORT),
            "--stop-within", str(GRACE_S - STOP_MARGIN_S),
            *(["--ext-proc-port", str(EXT_PROC_PORT), "--sample-percent", f"{plan.sample_percent:g}"]
              if plan.log_outputs else [])]


def service_account(plan: RequestLogPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(plan), "automountServiceAccountToken": False}


def deployment(plan: RequestLogPlan) -> dict[str, Any]:
    """Two replicas; each writes its own objects (named by pod), so a restart loses at most
    what one pod held for a minute."""
    resources = {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
    container = {
        "name": NAME,
        "image": plan.image,
        "imagePullPolicy": "Always",
        "command": command(plan),
        "env": [{"name": "AWS_REGION", "value": plan.serving.region},
                {"name": "AWS_DEFAULT_REGION", "value": plan.serving.region},
                {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"}],
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
                  {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
                  {"name": "ext-proc", "containerPort": EXT_PROC_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 20},
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": CONTAINER_SECURITY,
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(plan),
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": _selector(plan)},
            "template": {"metadata": {"labels": labels(plan)}, "spec": {
                "serviceAccountName": NAME,
                "automountServiceAccountToken": False,
                "securityContext": POD_SECURITY,
                "containers": [container],
                "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
                # SIGTERM writes what the pod holds, within --stop-within (command()).
                "terminationGracePeriodSeconds": GRACE_S,
            }},
        },
    }


def service(plan: RequestLogPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(plan), "spec": {
        "type": "ClusterIP", "selector": _selector(plan), "ports": [
            {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
            {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
             "appProtocol": "kubernetes.io/h2c"},
            {"name": "ext-proc", "port": EXT_PROC_PORT, "targetPort": "ext-proc", "protocol": "TCP",
             "appProtocol": "kubernetes.io/h2c"}]}}


def network_policies(plan: RequestLogPlan) -> list[dict[str, Any]]:
    """Beside the namespace's deny-all and DNS: the gateway's proxies in, on the serving
    ports; out, HTTPS to the VPC's endpoints (S3, KMS) and the Pod Identity agent."""
    pods = {"podSelector": {"matchLabels": _selector(plan)}}
    serving = plan.serving

    def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": plan.namespace}, "spec": {**pods, **spec}}

    return [
        policy(f"{NAME}-from-gateway", {"policyTypes": ["Ingress"], "ingress": [{
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ENVOY_GATEWAY_NAMESPACE}},
                      "podSelector": {"matchLabels": gateway_pods(plan.namespace)}}],
            "ports": [{"protocol": "TCP", "port": port} for port in (HTTP_PORT, GRPC_PORT, EXT_PROC_PORT)]}]}),
        policy(f"{NAME}-to-aws", {"policyTypes": ["Egress"], "egress": [
            {"to": [{"ipBlock": {"cidr": cidr}} for cidr in (serving.vpc_cidr, *serving.endpoint_cidrs)],
             "ports": [{"protocol": "TCP", "port": 443}]},
            {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": [{"protocol": "TCP", "port": 80}]}]}),
    ]


def mirror_filter(plan: RequestLogPlan, port: int) -> dict[str, Any]:
    """The routes' filter: a copy of `samplePercent` of the requests to the logger."""
    mirror: dict[str, Any] = {"backendRef": {"group": "", "kind": "Service", "name": NAME, "port": port}}
    if float(plan.sample_percent).is_integer():
        mirror["percent"] = int(plan.sample_percent)
    else:  # a fraction of a percent: Gateway API takes it as numerator/denominator
        mirror["fraction"] = {"numerator": round(plan.sample_percent * 100), "denominator": 10000}
    return {"type": "RequestMirror", "requestMirror": mirror}


def extension_policy(plan: RequestLogPlan, routes: tuple[tuple[str, str], ...]) -> dict[str, Any] | None:
    """With log_outputs: Envoy's ext_proc on the routes, in shadow mode ("send and go":
    Envoy never waits for the logger, so the logger costs a request nothing), bodies
    streamed (shadow mode takes no other), failing open. The logger samples."""
    if not plan.log_outputs:
        return None
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyExtensionPolicy",
        "metadata": {"name": f"{NAME}-outputs", "namespace": plan.namespace, "labels": labels(plan)},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": kind, "name": name} for kind, name in routes],
            "extProc": [{
                "backendRefs": [{"group": "", "kind": "Service", "name": NAME, "port": EXT_PROC_PORT}],
                "processingMode": {"request": {"body": "Streamed"}, "response": {"body": "Streamed"}},
                "shadowMode": True,
                "failOpen": True,
            }],
        },
    }


def objects(plan: RequestLogPlan) -> list[dict[str, Any]]:
    return [service_account(plan), *network_policies(plan), deployment(plan), service(plan)]


# --- AWS side -------------------------------------------------------------------------


def s3_statements(bucket_arn: str, model: str, key_arn: str) -> list[dict[str, Any]]:
    """Write, and nothing else, under the model's prefix; encrypt with the datasets key."""
    return [
        {"Sid": "WriteRequestLogs", "Effect": "Allow", "Action": ["s3:PutObject"],
         "Resource": [f"{bucket_arn}/{key_prefix(model)}*"]},
        {"Sid": "EncryptRequestLogs", "Effect": "Allow", "Action": ["kms:GenerateDataKey"], "Resource": [key_arn]},
    ]
