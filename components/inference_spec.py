"""What the inference service looks like on the cluster, as plain Kubernetes manifests.

Triton serves the model repository in the models bucket with the config written by
`python -m workloads.serve export`. An init container copies the served model's part of
the repository to the pod's own disk with the AWS CLI, whose SDK takes its credentials from
Pod Identity (so no key is ever stored); Triton then loads it from there. Triton is not given the bucket itself: its
S3 client is built on an AWS SDK for C++ older than the first release that reads Pod
Identity credentials (1.11.263), so it would find none. GPU
replicas take one GPU each on the inference pool; the smb stack's replicas run ONNX Runtime
on its CPU pool. Replicas are spread across zones, roll with no replica unavailable, and
scale on Triton's own queue time per request (GPU) or on CPU use, both read from the
Prometheus stack through prometheus-adapter. Nothing here imports Pulumi;
`components/inference.py` turns these dicts into resources.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from components.specs.cluster import CA_CONFIG_MAP, CA_DIR, CA_FILE, ca_config_map
from components.tenancy_spec import MONITORING_NAMESPACE, POD_IDENTITY_AGENT, pod_security_labels
from components.training_spec import CONTAINER_SECURITY, GPU_RESOURCE, GPU_TOLERATION, POD_SECURITY, pool_affinity
from workloads.serve.canary import VERSION_ANNOTATION

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
# Where the init container puts the repository, and where Triton loads it from.
LOCAL_REPOSITORY = "/models"
# workloads/serve/repository.py uploads this file last into each version, and moves
# rolled-back versions to retired-<N>; a pod's copy keeps only versions with the marker.
PUBLISHED_MARKER = "PUBLISHED"
RETIRED_PATTERN = "retired-*"
# $1: the repository's s3:// URI, $2: the local repository, $3: the model, $4: the version
# served (empty: every published one). Only that model is copied (Triton loads every model
# it finds), and of a pinned version only that version: the two variants of a rollout are
# two pod templates that differ in it. The copy starts from empty, since an init container
# that failed halfway is retried on the same volume; a version caught halfway through
# publishing or retiring is dropped (Triton would refuse to start on it). No config or no
# complete version (or not the pinned one) fails the pod's start, and the kubelet retries
# it, rather than starting a Triton that serves nothing.
FETCH_SCRIPT = f"""set -eu
model="$2$3"
pinned="${{4:-}}"
rm -rf "$model"
mkdir -p "$model"
if [ -n "$pinned" ]; then
  aws s3 sync "$1$3/" "$model/" --only-show-errors --no-progress --exclude '*' --include config.pbtxt \\
    --include "$pinned/*"
else
  aws s3 sync "$1$3/" "$model/" --only-show-errors --no-progress --exclude '{RETIRED_PATTERN}'
fi
complete=0
for version in "$model"/*/; do
  name=$(basename "$version")
  case "$name" in ''|0*|*[!0-9]*) continue ;; esac
  if [ -f "${{version}}{PUBLISHED_MARKER}" ]; then
    complete=$((complete + 1))
  else
    echo "not serving $3 version $name: it is not completely published"
    rm -rf "$version"
  fi
done
if [ ! -f "$model/config.pbtxt" ] || [ "$complete" -eq 0 ]; then
  echo "nothing to serve: $1$3/ holds no config.pbtxt or no completely published version${{pinned:+ $pinned}}" >&2
  exit 1
fi
echo "copied $3: $complete version(s)"
"""
# Custom metric served by prometheus-adapter (see adapter_values): microseconds a request
# waited in Triton's scheduler queue, averaged over the last minute, per pod.
QUEUE_METRIC = "triton_queue_time_per_request_us"
ZONE_KEY = "topology.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"
# TLS 1.3 and 1.2 only, forward-secret ciphers (AWS's recommended NLB policy).
TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
NLB_CLASS = "service.k8s.aws/nlb"
SKIP_AWAIT = "pulumi.com/skipAwait"
# Triton's name: its Deployment, Service and the ServiceAccount the cloud layer's Pod
# Identity association names.
SERVICE_ACCOUNT = "triton"
LB_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer"
# The Prometheus that kube-prometheus-stack (release "kube-prometheus-stack") runs.
PROMETHEUS_URL = f"http://kube-prometheus-stack-prometheus.{MONITORING_NAMESPACE}.svc"
PROMETHEUS_PORT = 9090
ADAPTER_RELEASE = "prometheus-adapter"
# The rollout (components/rollout_spec.py): Argo Rollouts runs the pods of the Deployment's
# template and labels each with its role; the only way in is Envoy Gateway's Gateway.
ROLLOUTS_API = "argoproj.io/v1alpha1"
VARIANT_LABEL = "mlplat.io/variant"  # on the pods: stable or canary
VARIANT = "variant"  # the same on every series their metrics carry
ENVOY_GATEWAY_NAMESPACE = "envoy-gateway-system"
GATEWAY = "inference"  # the Gateway's name, in the serving namespace


def gateway_pods(namespace: str) -> dict[str, str]:
    """The labels Envoy Gateway puts on the proxies it runs for the Gateway."""
    return {"gateway.envoyproxy.io/owning-gateway-name": GATEWAY,
            "gateway.envoyproxy.io/owning-gateway-namespace": namespace}


@dataclass(frozen=True)
class LoadBalancerPlan:
    certificate_arn: str
    source_cidrs: tuple[str, ...]  # who may connect (the NLB's security group)


@dataclass(frozen=True)
class CustomerModelStore:
    """On a customer's cluster (docs/onprem.md): the model repository on its S3-compatible
    store, read with the keys of the customer's Secret in the serving namespace (an AWS
    shared-credentials file, mounted), verified against its CA."""

    endpoint: str  # https://host[:port]
    region: str  # what the store signs for
    credentials_secret: str  # its key `credentials`: read-only on the repository's prefix
    cidrs: tuple[str, ...]
    ca_bundle: str

    @property
    def port(self) -> int:
        host = self.endpoint.removeprefix("https://")
        return int(host.rsplit(":", 1)[1]) if ":" in host else 443


STORE_CREDENTIALS_DIR = "/etc/mlplat/object-store"
STORE_CREDENTIALS_KEY = "credentials"


@dataclass(frozen=True)
class ServingPlan:
    """Everything the manifests depend on, resolved from the stack's config."""

    namespace: str
    model: str  # the Triton model name
    device: str  # "gpu" or "cpu"
    pool: str  # node pool name (label mlplat.io/pool)
    image: str  # tritonserver, from the in-region registry
    fetch_image: str  # the AWS CLI, from the in-region registry: copies the repository
    model_repository: str  # s3://<models bucket>/<prefix>
    region: str
    cpu: int  # cores per replica (requests = limits)
    memory_gi: int
    gpus: int  # per replica
    min_replicas: int
    max_replicas: int
    target_queue_us: int
    target_cpu_percent: int
    vpc_cidr: str
    endpoint_cidrs: tuple[str, ...] = ()  # the S3 gateway endpoint's prefix list
    load_balancer: LoadBalancerPlan | None = None
    name: str = SERVICE_ACCOUNT  # Deployment, Rollout, ServiceAccount, HPA, PDB
    repository_gi: int = 20  # the pod's copy of its model (keepVersions + 2 versions during an export)
    version: int | None = None  # the version served; None: every published one
    customer: CustomerModelStore | None = None  # a customer's cluster: its store, no Pod Identity

    @property
    def service_account(self) -> str:
        return self.name


def labels(plan: ServingPlan) -> dict[str, str]:
    return {"app.kubernetes.io/name": plan.name, "app.kubernetes.io/instance": plan.model,
            "app.kubernetes.io/component": "inference", "app.kubernetes.io/part-of": "mlplat"}


def selector(plan: ServingPlan) -> dict[str, str]:
    return {"app.kubernetes.io/name": plan.name, "app.kubernetes.io/instance": plan.model}


def _meta(plan: ServingPlan, name: str | None = None) -> dict[str, Any]:
    return {"name": name or plan.name, "namespace": plan.namespace, "labels": labels(plan)}


def namespace(plan: ServingPlan) -> dict[str, Any]:
    """The service's own namespace, enforcing the `restricted` Pod Security level."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": plan.namespace,
        "labels": {**pod_security_labels("restricted"), "app.kubernetes.io/part-of": "mlplat"}}}


def service_account(plan: ServingPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(plan),
            "automountServiceAccountToken": False}


def triton_args(plan: ServingPlan) -> list[str]:
    """The server reads the pod's copy of the repository once at start (control mode
    none): a new version or a rollback reaches the pods by a rolling restart, which fetches
    the repository afresh, never by files changing underneath.
    `--disable-auto-complete-config` is today's spelling of strict model config: the
    config.pbtxt we generated is used as written, nothing is guessed from the model."""
    return [
        f"--model-repository={LOCAL_REPOSITORY}",
        "--model-control-mode=none",
        "--disable-auto-complete-config",
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--http-port={HTTP_PORT}",
        f"--grpc-port={GRPC_PORT}",
        f"--metrics-port={METRICS_PORT}",
        "--allow-metrics=true",
        # Per-request latency quantiles, per model and version: the canary's p99 against the
        # stable's (components/rollout_spec.py).
        "--metrics-config=summary_latencies=true",
        f"--allow-gpu-metrics={'true' if plan.gpus else 'false'}",
        "--exit-timeout-secs=30",
    ]


# Ephemeral storage beyond the repository copy: /tmp (1 GiB), logs and the writable layer.
DISK_OVERHEAD_GI = 2


def replica_disk_gi(repository_gi: int) -> int:
    """A replica's local disk: its repository copy and its scratch."""
    return repository_gi + DISK_OVERHEAD_GI


def _disk(plan: ServingPlan) -> str:
    """The pod's local disk, asked for so the scheduler places replicas where it is free
    and the kubelet evicts a replica that outgrows it rather than filling the node."""
    return f"{replica_disk_gi(plan.repository_gi)}Gi"


def resources(plan: ServingPlan) -> dict[str, dict[str, str]]:
    """Requests equal to limits: Guaranteed QoS, and a replica's latency never depends on
    a noisy neighbour's burst."""
    amounts = {"cpu": str(plan.cpu), "memory": f"{plan.memory_gi}Gi", "ephemeral-storage": _disk(plan)}
    if plan.gpus:
        amounts[GPU_RESOURCE] = str(plan.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "timeoutSeconds": 5,
            "failureThreshold": failures}


def fetch_container(plan: ServingPlan) -> dict[str, Any]:
    """Copies the model's part of the repository from the bucket before Triton starts. Any
    failure (no credentials, no access, nothing published yet) fails the pod's start, where
    it is seen, rather than leaving Triton with nothing to serve."""
    amounts = {"cpu": "1", "memory": "1Gi", "ephemeral-storage": _disk(plan)}
    return {
        "name": "fetch-models",
        "image": plan.fetch_image,
        "imagePullPolicy": "Always",
        "command": ["sh", "-c", FETCH_SCRIPT, "fetch-models", f"{plan.model_repository}/", f"{LOCAL_REPOSITORY}/",
                    plan.model, str(plan.version or "")],
        "env": [
            # The bucket's own region, through the VPC's S3 endpoint.
            {"name": "AWS_REGION", "value": plan.region},
            {"name": "AWS_DEFAULT_REGION", "value": plan.region},
            # Pod Identity or nothing: never the node's role from instance metadata.
            {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "volumeMounts": [{"name": "models", "mountPath": LOCAL_REPOSITORY},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": CONTAINER_SECURITY,
    } if plan.customer is None else _customer_fetch(plan, plan.customer, amounts)


def _customer_fetch(plan: ServingPlan, store: CustomerModelStore, amounts: dict[str, str]) -> dict[str, Any]:
    """The same copy from the customer's store: the AWS CLI at its endpoint, verified
    against its CA, with the keys of the customer's Secret as a mounted file."""
    container = fetch_container(replace(plan, customer=None))
    env = {"AWS_REGION": store.region, "AWS_DEFAULT_REGION": store.region, "AWS_ENDPOINT_URL_S3": store.endpoint,
           "AWS_CA_BUNDLE": CA_FILE,
           "AWS_SHARED_CREDENTIALS_FILE": f"{STORE_CREDENTIALS_DIR}/{STORE_CREDENTIALS_KEY}",
           "AWS_EC2_METADATA_DISABLED": "true", "HOME": "/tmp"}
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    container["volumeMounts"] += [{"name": "store", "mountPath": STORE_CREDENTIALS_DIR, "readOnly": True},
                                  {"name": "ca", "mountPath": CA_DIR, "readOnly": True}]
    return container


def pod_spec(plan: ServingPlan) -> dict[str, Any]:
    container = {
        "name": "triton",
        "image": plan.image,
        "imagePullPolicy": "Always",
        "command": ["tritonserver"],
        "args": triton_args(plan),
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": resources(plan),
        # Loading a large model can take minutes; until then only this probe runs.
        "startupProbe": _probe("/v2/health/live", 10, 60),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        # Ready only while every model is ready: the Service sends nothing to a pod still loading.
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        # Endpoints drop the pod before Triton stops taking requests.
        "lifecycle": {"preStop": {"sleep": {"seconds": 10}}},
        "volumeMounts": [{"name": "models", "mountPath": LOCAL_REPOSITORY, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": CONTAINER_SECURITY,
    }
    spec: dict[str, Any] = {
        "serviceAccountName": plan.service_account,
        # Pod Identity mounts its own token; nothing here talks to the Kubernetes API.
        "automountServiceAccountToken": False,
        "securityContext": POD_SECURITY,
        "affinity": pool_affinity(plan.pool),
        "topologySpreadConstraints": [
            # Zones hard, so one zone's outage leaves replicas; hosts soft, so a scale-out
            # is never blocked by a full node.
            {"maxSkew": 1, "topologyKey": ZONE_KEY, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": selector(plan)}},
            {"maxSkew": 1, "topologyKey": HOST_KEY, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": selector(plan)}},
        ],
        "initContainers": [fetch_container(plan)],
        "containers": [container],
        "volumes": [{"name": "models", "emptyDir": {"sizeLimit": f"{plan.repository_gi}Gi"}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
        "terminationGracePeriodSeconds": 60,
    }
    if plan.gpus:
        spec["tolerations"] = [GPU_TOLERATION]
    if plan.customer is not None:
        # A customer's nodes need not carry zone labels (a pod whose hard zone spread finds
        # none would never schedule): hosts only. Pod Identity does not exist there.
        spec["topologySpreadConstraints"] = [c for c in spec["topologySpreadConstraints"]
                                             if c["topologyKey"] != ZONE_KEY]
        spec["volumes"] += [
            {"name": "store", "secret": {"secretName": plan.customer.credentials_secret, "defaultMode": 0o440,
                                         "items": [{"key": STORE_CREDENTIALS_KEY, "path": STORE_CREDENTIALS_KEY}]}},
            {"name": "ca", "configMap": {"name": CA_CONFIG_MAP}}]
    return spec


def template_metadata(plan: ServingPlan) -> dict[str, Any]:
    """The pods' labels, and the version they serve where one is pinned: what the golden
    path's canary step reads to know its version is the one rolling out
    (workloads/pipeline/canary.py)."""
    if plan.version is None:
        return {"labels": labels(plan)}
    return {"labels": labels(plan), "annotations": {VERSION_ANNOTATION: str(plan.version)}}


def deployment(plan: ServingPlan) -> dict[str, Any]:
    """Created with zero replicas. A new environment has no model in the bucket yet, so a
    replica's fetch container would exit, the Deployment would never become ready and the
    first `pulumi up` would fail waiting for it. Publishing the first model scales it up
    (README, "First model"); the HorizontalPodAutoscaler, idle while the count is zero,
    owns the count from then on, and a deploy never resets it in the middle of a busy hour
    (the program ignores later changes to `replicas`)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(plan),
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": selector(plan)},
            # A new replica must be ready before an old one goes: capacity never drops.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "minReadySeconds": 10,
            "revisionHistoryLimit": 5,
            "template": {"metadata": template_metadata(plan), "spec": pod_spec(plan)},
        },
    }


def service(plan: ServingPlan, name: str) -> dict[str, Any]:
    """The gateway's backends, HTTP/REST and gRPC: Argo Rollouts adds the pod-template hash
    of the stable or the canary pods to the selector. The provider does not wait for it to
    target a pod: serving starts at zero replicas and is scaled up once a model is
    published (infra/checks/first_deploy.py lists why)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**_meta(plan, name), "annotations": {SKIP_AWAIT: "true"}},
        "spec": {
            "type": "ClusterIP",
            "selector": selector(plan),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
                 "appProtocol": "kubernetes.io/h2c"},
            ],
        },
    }


def load_balancer_service(plan: ServingPlan) -> dict[str, Any] | None:
    """The internal NLB, only when the stack asks for it: TLS terminated with the stack's
    ACM certificate (TLS 1.2+), gRPC on 443 (ALPN h2 so gRPC works through it), HTTP/REST on
    8443, reachable only from the listed networks, straight to the gateway's proxies (which
    authenticate every request), never to Triton."""
    if plan.load_balancer is None:
        return None
    lb = plan.load_balancer
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{GATEWAY}-gateway-tls", "namespace": ENVOY_GATEWAY_NAMESPACE, "labels": labels(plan),
                     "annotations": {
            f"{LB_ANNOTATION}-scheme": "internal",
            f"{LB_ANNOTATION}-nlb-target-type": "ip",
            f"{LB_ANNOTATION}-ssl-cert": lb.certificate_arn,
            f"{LB_ANNOTATION}-ssl-ports": "grpc-tls,https",
            f"{LB_ANNOTATION}-ssl-negotiation-policy": TLS_POLICY,
            # gRPC clients offer only h2 and get it; REST clients that also offer h2 (curl
            # does) get HTTP/1.1, the only protocol Triton's HTTP port speaks.
            f"{LB_ANNOTATION}-alpn-policy": "HTTP2Optional",
            f"{LB_ANNOTATION}-backend-protocol": "tcp",
        }},
        "spec": {
            "type": "LoadBalancer",
            # Only the AWS Load Balancer Controller answers this class; without it the
            # Service stays pending rather than becoming a public classic load balancer.
            "loadBalancerClass": NLB_CLASS,
            "allocateLoadBalancerNodePorts": False,
            "loadBalancerSourceRanges": list(lb.source_cidrs),
            "selector": gateway_pods(plan.namespace),
            # The proxies listen on the Gateway's listener ports.
            "ports": [
                {"name": "grpc-tls", "port": 443, "targetPort": GRPC_PORT, "protocol": "TCP"},
                {"name": "https", "port": 8443, "targetPort": HTTP_PORT, "protocol": "TCP"},
            ],
        },
    }


def autoscaler(plan: ServingPlan) -> dict[str, Any]:
    """GPU: keep the average queue time per request under the target (Triton's own
    measure of being short of instances). CPU: keep CPU use under the target. Out fast,
    in slowly: a GPU node takes minutes to come back."""
    if plan.gpus:
        metric = {"type": "Pods", "pods": {
            "metric": {"name": QUEUE_METRIC},
            "target": {"type": "AverageValue", "averageValue": str(plan.target_queue_us)}}}
    else:
        metric = {"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": plan.target_cpu_percent}}}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(plan),
        "spec": {
            # Argo Rollouts runs the pods (the Deployment holds the template at zero).
            "scaleTargetRef": {"apiVersion": ROLLOUTS_API, "kind": "Rollout", "name": plan.name},
            "minReplicas": plan.min_replicas,
            "maxReplicas": plan.max_replicas,
            "metrics": [metric],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]},
                "scaleDown": {"stabilizationWindowSeconds": 300,
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}]},
            },
        },
    }


def disruption_budget(plan: ServingPlan) -> dict[str, Any]:
    """Node drains and upgrades take one replica at a time; a crash-looping replica may
    still be evicted, so a broken pod never blocks a drain."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(plan),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(plan)},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }


def pod_monitor(plan: ServingPlan) -> dict[str, Any]:
    """Prometheus scrapes Triton's metrics port; the adapter turns them into the queue
    metric. Each series gets the pod's rollout role (stable or canary) as `variant`."""
    source = "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in VARIANT_LABEL)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(plan),
        "spec": {"selector": {"matchLabels": selector(plan)},
                 "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "relabelings": [
                     {"sourceLabels": [source], "targetLabel": VARIANT, "action": "replace"}]}]},
    }


def _policy(plan: ServingPlan, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": plan.namespace}, "spec": spec}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def network_policies(plan: ServingPlan) -> list[dict[str, Any]]:
    """Deny everything, then: DNS; HTTPS to the AWS endpoints (S3, for the repository's
    copy); the Pod Identity agent for credentials; the gateway's proxies, and nothing else,
    on the serving ports (every request is authenticated there); Prometheus on the metrics
    port."""
    pods = {"podSelector": {"matchLabels": selector(plan)}}
    client_sources: list[dict[str, Any]] = [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ENVOY_GATEWAY_NAMESPACE}},
        "podSelector": {"matchLabels": gateway_pods(plan.namespace)}}]
    if plan.customer is not None:
        # A customer's cluster: its object store at its CIDRs, in place of the AWS endpoints
        # and the Pod Identity agent.
        aws = {"allow-aws-endpoints", "allow-pod-identity"}
        kept = [p for p in network_policies(replace(plan, customer=None))
                if p["metadata"]["name"] not in aws]
        store = _policy(plan, "allow-object-store", {**pods, "policyTypes": ["Egress"], "egress": [{
            "to": [{"ipBlock": {"cidr": cidr}} for cidr in plan.customer.cidrs], "ports": _tcp(plan.customer.port)}]})
        return [*kept[:2], store, *kept[2:]]
    return [
        _policy(plan, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(plan, "allow-dns", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}),
        _policy(plan, "allow-aws-endpoints", {**pods, "policyTypes": ["Egress"], "egress": [{
            "to": [{"ipBlock": {"cidr": cidr}} for cidr in (plan.vpc_cidr, *plan.endpoint_cidrs)],
            "ports": _tcp(443)}]}),
        _policy(plan, "allow-pod-identity", {**pods, "policyTypes": ["Egress"], "egress": [{
            "to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(80)}]}),
        _policy(plan, "allow-gateway", {**pods, "policyTypes": ["Ingress"], "ingress": [{
            "from": client_sources, "ports": _tcp(HTTP_PORT, GRPC_PORT)}]}),
        _policy(plan, "allow-prometheus", {**pods, "policyTypes": ["Ingress"], "ingress": [{
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NAMESPACE}},
                      "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}],
            "ports": _tcp(METRICS_PORT)}]}),
    ]


def customer_objects(plan: ServingPlan) -> list[dict[str, Any]]:
    """What the pods need in the serving namespace on a customer's cluster: its CA."""
    return [] if plan.customer is None else [ca_config_map(plan.namespace, plan.customer.ca_bundle)]


def objects(plan: ServingPlan) -> list[dict[str, Any]]:
    """Every object of the service, in the order they are applied (the rollout's and the
    gateway's are components/rollout_spec.py's)."""
    found = [namespace(plan), service_account(plan), *network_policies(plan), *customer_objects(plan),
             deployment(plan)]
    lb = load_balancer_service(plan)
    if lb is not None:
        found.append(lb)
    return [*found, autoscaler(plan), disruption_budget(plan), pod_monitor(plan)]


# --- AWS side -------------------------------------------------------------------------


def repository_uri(bucket: str, prefix: str) -> str:
    return f"s3://{bucket}/{prefix}"


def role_name(prefix: str, model: str) -> str:
    """The IAM name of the serving pods' role (Pod Identity)."""
    return f"{prefix}-inference-{model}"[:64]


def s3_statements(bucket_arn: str, prefix: str, key_arn: str) -> list[dict[str, Any]]:
    """Read-only: list the repository's prefix, read its objects, decrypt with the models
    key (what `aws s3 sync` calls). Publishing and rollback are done by CI, never by the
    serving pods."""
    return [
        {"Sid": "ListRepository", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn],
         "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}},
        {"Sid": "LocateBucket", "Effect": "Allow", "Action": ["s3:GetBucketLocation"], "Resource": [bucket_arn]},
        {"Sid": "ReadRepository", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": [f"{bucket_arn}/{prefix}/*"]},
        {"Sid": "DecryptModels", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": [key_arn]},
    ]


# --- prometheus-adapter -----------------------------------------------------------------

# Queue time per request: the queue counter's rate over the success counter's rate. The
# divisor is held at 1 request/s or more so an idle replica reads 0, not "no data" (which
# would freeze scaling in).
QUEUE_QUERY = (
    "sum by (<<.GroupBy>>) (rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[1m])) / "
    "clamp_min(sum by (<<.GroupBy>>) (rate(nv_inference_request_success{<<.LabelMatchers>>}[1m])), 1)"
)
_POD_RESOURCES = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}


def adapter_rules(resource_metrics: bool) -> dict[str, Any]:
    rules: dict[str, Any] = {
        # Only what the autoscalers read: the default rules would publish every series.
        "default": False,
        "custom": [{
            "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
            "resources": _POD_RESOURCES,
            "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
            "metricsQuery": QUEUE_QUERY,
        }],
    }
    if resource_metrics:
        # EKS has no metrics-server unless one is added: CPU autoscaling reads container CPU
        # (cAdvisor, scraped by the Prometheus stack) through the adapter instead.
        overrides = {"overrides": {"node": {"resource": "node"}, "namespace": {"resource": "namespace"},
                                   "pod": {"resource": "pod"}}}
        rules["resource"] = {
            "cpu": {
                "containerQuery": 'sum by (<<.GroupBy>>) (rate(container_cpu_usage_seconds_total'
                                  '{container!="",<<.LabelMatchers>>}[3m]))',
                "nodeQuery": "sum by (<<.GroupBy>>) (rate(container_cpu_usage_seconds_total"
                             "{id='/',<<.LabelMatchers>>}[3m]))",
                "resources": overrides, "containerLabel": "container",
            },
            "memory": {
                "containerQuery": 'sum by (<<.GroupBy>>) (container_memory_working_set_bytes'
                                  '{container!="",<<.LabelMatchers>>})',
                "nodeQuery": "sum by (<<.GroupBy>>) (container_memory_working_set_bytes{id='/',<<.LabelMatchers>>})",
                "resources": overrides, "containerLabel": "container",
            },
            "window": "3m",
        }
    return rules


def adapter_values(image_repository: str, image_tag: str, resource_metrics: bool) -> dict[str, Any]:
    """prometheus-adapter: the custom metrics API (and, where asked, the resource metrics
    API) backed by the Prometheus stack. Two replicas: the API server calls it for every
    autoscaler decision."""
    return {
        "image": {"repository": image_repository, "tag": image_tag, "pullPolicy": "IfNotPresent"},
        "prometheus": {"url": PROMETHEUS_URL, "port": PROMETHEUS_PORT},
        "replicas": 2,
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
        "securityContext": {**CONTAINER_SECURITY, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "rules": adapter_rules(resource_metrics),
    }


def source_cidrs(configured: Sequence[str], vpc_cidr: str) -> tuple[str, ...]:
    return tuple(configured) or (vpc_cidr,)
