"""`InferenceService` under mocks: the Deployment, Services, HPA and PDB as the engine
receives them, GPU and CPU, with no AWS resource; the Pod Identity role (`serving_identity`,
the cloud layer's); providers and parents; the rendered objects pass
`kubernetes-validate --strict`; and the stacks serve what their config asks."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.inference import InferenceService, InferenceServiceArgs, MetricsAdapter, RolloutControllers
from components.inference_spec import (
    NLB_CLASS,
    QUEUE_METRIC,
    TLS_POLICY,
    LoadBalancerPlan,
    ServingPlan,
)
from components.rollout_spec import AuthPlan, RolloutPlan
from infra.config import load_stack
from infra.inference import resolve_inference, serving_identity
from infra.storage import storage_names
from components.addons.values import mirror_image
from infra.versions import IMAGES, KUBERNETES_VERSION, SERVED_APIS, UNBUILT, image_uri, registry_host
from tests.component.recorder import Recording, record
from tests.conftest import preview
from tests.helpers import of_type

ACCOUNT, REGION = "111122223333", "me-central-1"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
HPA = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RELEASE = "kubernetes:helm.sh/v4:Chart"
ROLLOUT = "kubernetes:argoproj.io/v1alpha1:Rollout"
CERT = "arn:aws:acm:me-central-1:111122223333:certificate/12345678-90ab-cdef-1234-567890abcdef"
MODELS_ARN, KEY_ARN = "arn:aws:s3:::mlplat-test-models", "arn:aws:kms:me-central-1:111122223333:key/m"

GPU_PLAN = ServingPlan(
    namespace="inference", model="gpt", device="gpu", pool="inference",
    image=image_uri("tritonserver", ACCOUNT, REGION, "prod"), fetch_image=image_uri("aws-cli", ACCOUNT, REGION, "prod"),
    model_repository="s3://mlplat-test-models/triton",
    region=REGION, cpu=6, memory_gi=48, gpus=1, min_replicas=2, max_replicas=8, target_queue_us=50_000,
    target_cpu_percent=70, vpc_cidr="10.0.0.0/16", endpoint_cidrs=("3.5.212.0/23",),
    load_balancer=LoadBalancerPlan(CERT, ("10.20.0.0/16",)),
)
CPU_PLAN = replace(GPU_PLAN, device="cpu", pool="cpu", cpu=2, memory_gi=4, gpus=0, max_replicas=6,
                   load_balancer=None)


AUTH = AuthPlan(issuer="https://login.example.ae/realms/mlplat", audiences=("mlplat-inference",),
                jwks_uri="https://login.example.ae/realms/mlplat/certs", tenant_claim="tenant",
                tenants=("applied", "serving"))
CHARTS_MIRROR = f"oci://{registry_host(ACCOUNT, REGION)}/mlplat/prod/charts"
CONTROLLERS = RolloutControllers(
    envoy_gateway=mirror_image("envoy-gateway", ACCOUNT, REGION, "prod"),
    envoy=image_uri("envoy", ACCOUNT, REGION, "prod"),
    pushgateway=image_uri("pushgateway", ACCOUNT, REGION, "prod"),
    argo_rollouts=mirror_image("argo-rollouts", ACCOUNT, REGION, "prod"),
    plugin=image_uri("rollouts-gatewayapi-plugin", ACCOUNT, REGION, "prod", {"rollouts-gatewayapi-plugin": UNBUILT}),
    chart_mirror=CHARTS_MIRROR,
)


def build(plan: ServingPlan) -> Recording:
    def program(aws_provider):
        cluster = k8s.Provider("cluster-k8s", kubeconfig="{}")
        prometheus = k8s.core.v1.ConfigMap("prometheus-stand-in", metadata={"name": "p", "namespace": "monitoring"},
                                           opts=pulumi.ResourceOptions(provider=cluster))
        image = mirror_image("prometheus-adapter", ACCOUNT, REGION, "prod")
        InferenceService("inference-gpt", InferenceServiceArgs(
            plan=RolloutPlan(serving=plan, auth=AUTH),
            controllers=CONTROLLERS,
            adapter=MetricsAdapter(image.full_repository, image.tag, resource_metrics=plan.device == "cpu",
                                   chart_mirror=f"oci://{registry_host(ACCOUNT, REGION)}/mlplat/prod/charts"),
            depends_on=(prometheus,),
        ), opts=pulumi.ResourceOptions(providers={"aws": aws_provider, "kubernetes": cluster}))

    return record(program)


@pytest.fixture(scope="module")
def gpu() -> Recording:
    return build(GPU_PLAN)


@pytest.fixture(scope="module")
def cpu() -> Recording:
    return build(CPU_PLAN)


def obj(rec: Recording, resource_type: str, name: str = "triton") -> dict:
    [found] = [r for r in rec.of_type(resource_type) if r.inputs()["metadata"]["name"] == name]
    return found.inputs()


def pod(rec: Recording) -> dict:
    return obj(rec, DEPLOYMENT)["spec"]["template"]["spec"]


def container(rec: Recording) -> dict:
    [triton] = pod(rec)["containers"]
    return triton


# --- the Deployment ----------------------------------------------------------------------


def fetcher(rec: Recording) -> dict:
    [fetch] = pod(rec)["initContainers"]
    return fetch


def test_triton_serves_the_pods_copy_of_the_repository_with_strict_config(gpu):
    main = container(gpu)
    assert main["image"] == image_uri("tritonserver", ACCOUNT, REGION, "prod")
    assert main["image"].startswith(f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/mlplat/prod/mirror/tritonserver:"
                                    f"{IMAGES['tritonserver'].tag}")
    assert main["command"] == ["tritonserver"]
    args = main["args"]
    for flag in ("--model-repository=/models", "--model-control-mode=none",
                 "--disable-auto-complete-config", "--metrics-port=8002", "--allow-metrics=true",
                 "--allow-gpu-metrics=true"):
        assert flag in args
    # Triton never talks to AWS: it is given no region and no bucket.
    assert not any(e["name"].startswith("AWS_") for e in main["env"])
    assert not any("s3://" in arg for arg in args)
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in main["volumeMounts"]
    assert {p["name"]: p["containerPort"] for p in main["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}


def test_an_init_container_copies_the_repository_with_pod_identity_credentials(gpu):
    fetch = fetcher(gpu)
    assert fetch["image"] == image_uri("aws-cli", ACCOUNT, REGION, "prod")
    assert fetch["image"].startswith(f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/mlplat/prod/mirror/aws-cli:"
                                     f"{IMAGES['aws-cli'].tag}")
    # AWS CLI v2 reads Pod Identity credentials from 2.15.0 on.
    major, minor = (int(part) for part in IMAGES["aws-cli"].tag.split(".")[:2])
    assert (major, minor) >= (2, 15)
    # The script (FETCH_SCRIPT, run for real in tests/unit/test_fetch_script.py) gets the
    # bucket's repository and the pod's folder as its arguments.
    assert fetch["command"][:2] == ["sh", "-c"]
    # No version pinned: every published version is served, and the template names none.
    assert fetch["command"][3:] == ["fetch-models", "s3://mlplat-test-models/triton/", "/models/", "gpt", ""]
    assert "annotations" not in obj(gpu, DEPLOYMENT)["spec"]["template"]["metadata"]
    assert 'aws s3 sync "$1$3/" "$model/"' in fetch["command"][2]
    env = {e["name"]: e["value"] for e in fetch["env"]}
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == REGION
    # Without Pod Identity credentials the copy fails; it never falls back to the node's role.
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert {"name": "models", "mountPath": "/models"} in fetch["volumeMounts"]
    # Guaranteed QoS holds for init containers too; the disk it fills is the pod's.
    assert fetch["resources"]["requests"] == fetch["resources"]["limits"]
    assert fetch["resources"]["limits"]["ephemeral-storage"] == container(gpu)["resources"]["limits"][
        "ephemeral-storage"] == "22Gi"


def test_health_probes_are_tritons_endpoints(gpu):
    main = container(gpu)
    assert main["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    # Loading a large model takes minutes: the startup probe allows ten.
    startup = main["startupProbe"]
    assert startup["httpGet"]["path"] == "/v2/health/live"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


def test_gpu_replicas_take_one_gpu_on_the_inference_pool(gpu):
    spec = pod(gpu)
    resources = container(gpu)["resources"]
    assert resources["limits"] == resources["requests"] == {"cpu": "6", "memory": "48Gi", "nvidia.com/gpu": "1",
                                                            "ephemeral-storage": "22Gi"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true",
                                    "effect": "NoSchedule"}]
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "mlplat.io/pool", "operator": "In", "values": ["inference"]}]


def test_cpu_replicas_ask_for_no_gpu_and_tolerate_nothing(cpu):
    spec = pod(cpu)
    assert container(cpu)["resources"]["limits"] == {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "22Gi"}
    assert "tolerations" not in spec
    assert "--allow-gpu-metrics=false" in container(cpu)["args"]
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == ["cpu"]


def test_rolling_updates_never_lose_a_replica_and_spread_across_zones(gpu):
    deployment = obj(gpu, DEPLOYMENT)
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    # Created with none (no model is published in a new environment); the publish step and
    # then the autoscaler own the count, and the program never sends it again.
    assert deployment["spec"]["replicas"] == 0
    [registered] = [r for r in gpu.of_type(DEPLOYMENT) if r.inputs()["metadata"]["name"] == "triton"]
    assert registered.ignore_changes == ["spec.replicas"]
    zone, host = pod(gpu)["topologySpreadConstraints"]
    assert (zone["topologyKey"], zone["whenUnsatisfiable"], zone["maxSkew"]) == (
        "topology.kubernetes.io/zone", "DoNotSchedule", 1)
    assert (host["topologyKey"], host["whenUnsatisfiable"]) == ("kubernetes.io/hostname", "ScheduleAnyway")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert zone["labelSelector"]["matchLabels"] == selector
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_restricted_security_context(gpu):
    spec, main = pod(gpu), container(gpu)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "triton"
    for each in (main, fetcher(gpu)):
        sc = each["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    # Only bounded scratch volumes are writable, and Triton cannot change its repository.
    assert {m["name"]: m.get("readOnly", False) for m in main["volumeMounts"]} == {"models": True, "tmp": False}
    assert spec["volumes"] == [{"name": "models", "emptyDir": {"sizeLimit": "20Gi"}},
                               {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]


# --- Services ----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["stable", "canary"])
def test_each_variant_has_a_cluster_ip_service_over_the_pods(gpu, variant):
    """Argo Rollouts adds each variant's pod-template hash to these selectors."""
    svc = obj(gpu, SERVICE, f"triton-{variant}")
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"] == obj(gpu, DEPLOYMENT)["spec"]["selector"]["matchLabels"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("http", 8000, "http"), ("grpc", 8001, "grpc")]
    rollout = obj(gpu, ROLLOUT)["spec"]["strategy"]["canary"]
    assert rollout[f"{variant}Service"] == f"triton-{variant}"


def test_internal_tls_load_balancer_only_when_configured(gpu, cpu):
    lb = obj(gpu, SERVICE, "inference-gateway-tls")
    # In front of the gateway's proxies, which authenticate every request; never Triton.
    assert lb["metadata"]["namespace"] == "envoy-gateway-system"
    assert lb["spec"]["selector"] == {"gateway.envoyproxy.io/owning-gateway-name": "inference",
                                      "gateway.envoyproxy.io/owning-gateway-namespace": "inference"}
    assert [(p["port"], p["targetPort"]) for p in lb["spec"]["ports"]] == [(443, 8001), (8443, 8000)]
    notes = lb["metadata"]["annotations"]
    prefix = "service.beta.kubernetes.io/aws-load-balancer"
    assert notes[f"{prefix}-scheme"] == "internal"
    assert notes[f"{prefix}-ssl-cert"] == CERT
    assert notes[f"{prefix}-ssl-negotiation-policy"] == TLS_POLICY == "ELBSecurityPolicy-TLS13-1-2-2021-06"
    assert notes[f"{prefix}-ssl-ports"] == "grpc-tls,https"
    # h2 for gRPC clients (they offer nothing else), HTTP/1.1 for REST clients that offer both.
    assert notes[f"{prefix}-alpn-policy"] == "HTTP2Optional"
    spec = lb["spec"]
    assert (spec["type"], spec["loadBalancerClass"]) == ("LoadBalancer", NLB_CLASS)
    assert spec["loadBalancerSourceRanges"] == ["10.20.0.0/16"]
    # Every listener is TLS.
    assert {p["name"] for p in spec["ports"]} == set(notes[f"{prefix}-ssl-ports"].split(","))
    assert "inference-gateway-tls" not in {r.inputs()["metadata"]["name"] for r in cpu.of_type(SERVICE)}


# --- autoscaling and disruption ------------------------------------------------------------


def test_gpu_autoscaler_follows_tritons_queue_time(gpu):
    hpa = obj(gpu, HPA)["spec"]
    # Argo Rollouts runs the pods; the Deployment only holds their template.
    assert hpa["scaleTargetRef"] == {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "triton"}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 8)
    assert hpa["metrics"] == [{"type": "Pods", "pods": {"metric": {"name": QUEUE_METRIC},
                                                        "target": {"type": "AverageValue", "averageValue": "50000"}}}]
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] > hpa["behavior"]["scaleUp"][
        "stabilizationWindowSeconds"]


def test_cpu_autoscaler_follows_cpu_use(cpu):
    hpa = obj(cpu, HPA)["spec"]
    assert hpa["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]


def adapter_values(rec: Recording) -> dict:
    [release] = [r for r in rec.of_type(RELEASE) if r.name == "prometheus-adapter"]
    inputs = release.inputs()
    assert (inputs["name"], inputs["namespace"], inputs["chart"]) == (
        "prometheus-adapter", "monitoring",
        f"oci://{registry_host(ACCOUNT, REGION)}/mlplat/prod/charts/prometheus-adapter")
    return inputs["values"]


def test_the_adapter_serves_the_metric_the_autoscaler_reads(gpu, cpu):
    gpu_rules = adapter_values(gpu)["rules"]
    [rule] = gpu_rules["custom"]
    assert rule["name"]["as"] == QUEUE_METRIC
    assert "nv_inference_queue_duration_us" in rule["metricsQuery"]
    assert "nv_inference_request_success" in rule["metricsQuery"]
    assert gpu_rules["default"] is False and "resource" not in gpu_rules
    # CPU autoscaling needs the resource metrics API, which EKS lacks without metrics-server.
    assert "container_cpu_usage_seconds_total" in adapter_values(cpu)["rules"]["resource"]["cpu"]["containerQuery"]
    image = adapter_values(gpu)["image"]
    assert f"{image['repository']}:{image['tag']}" == image_uri("prometheus-adapter", ACCOUNT, REGION, "prod")


def test_autoscaler_waits_for_its_metrics(gpu):
    [hpa] = gpu.of_type(HPA)
    [adapter] = [r for r in gpu.of_type(RELEASE) if r.name == "prometheus-adapter"]
    [rollout] = gpu.of_type(ROLLOUT)
    assert {adapter.urn, rollout.urn} <= set(hpa.dependencies)


def test_disruption_budget_takes_one_replica_at_a_time(gpu):
    pdb = obj(gpu, PDB)["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"] == obj(gpu, DEPLOYMENT)["spec"]["selector"]["matchLabels"]
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


# --- fences and credentials ------------------------------------------------------------------


def test_network_policies_deny_by_default_and_open_only_the_serving_ports(gpu):
    # The serving namespace's (the controllers' namespaces have their own: test_platform_ingress).
    policies = {r.inputs()["metadata"]["name"]: r.inputs()["spec"] for r in gpu.of_type(POLICY)
                if r.inputs()["metadata"]["namespace"] == "inference"}
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    [clients] = policies["allow-gateway"]["ingress"]
    assert clients["ports"] == [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}]
    # Only the gateway's proxies, which authenticate every request: no other pod, not the
    # NLB (it fronts the proxies), not the VPC.
    assert clients["from"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}},
        "podSelector": {"matchLabels": {"gateway.envoyproxy.io/owning-gateway-name": "inference",
                                        "gateway.envoyproxy.io/owning-gateway-namespace": "inference"}}}]
    [scrape] = policies["allow-prometheus"]["ingress"]
    assert scrape["ports"] == [{"protocol": "TCP", "port": 8002}]
    [identity] = policies["allow-pod-identity"]["egress"]
    assert identity["to"] == [{"ipBlock": {"cidr": "169.254.170.23/32"}}]
    [aws_apis] = policies["allow-aws-endpoints"]["egress"]
    assert aws_apis["ports"] == [{"protocol": "TCP", "port": 443}]
    assert [b["ipBlock"]["cidr"] for b in aws_apis["to"]] == ["10.0.0.0/16", "3.5.212.0/23"]


def identity() -> Recording:
    """The cloud layer's half of serving, `serving_identity`, for prod's inference section,
    with a models bucket and key of its own."""
    def program(aws_provider):
        bucket = SimpleNamespace(arn=pulumi.Output.from_input(MODELS_ARN))
        key = SimpleNamespace(arn=pulumi.Output.from_input(KEY_ARN))
        storage = SimpleNamespace(buckets={"models": SimpleNamespace(bucket=bucket)})
        serving_identity(load_stack("prod"), "mlplat-test", "111122223333", "mlplat-test", storage, {"models": key}, aws_provider)

    return record(program)


@pytest.fixture(scope="module")
def role_rec() -> Recording:
    return identity()


def test_the_component_makes_no_aws_resource(gpu, cpu):
    # The role is the cloud layer's: the cluster layer has no AWS provider.
    for rec in (gpu, cpu):
        assert not [r for r in rec.registrations if r.type.startswith("aws:") and r.name != "aws-test"]


def test_pod_identity_reads_only_the_repository(role_rec):
    settings = resolve_inference(load_stack("prod")).settings
    role = role_rec.one("aws:iam/role:Role")
    assert role.inputs()["name"] == f"mlplat-test-inference-{settings.model_name}"
    trust = json.loads(role.inputs()["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    association = role_rec.one("aws:eks/podIdentityAssociation:PodIdentityAssociation").inputs()
    assert (association["namespace"], association["serviceAccount"]) == (settings.namespace, "triton")
    assert association["clusterName"] == "mlplat-test"
    policy = json.loads(role_rec.one("aws:iam/rolePolicy:RolePolicy").inputs()["policy"])
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert actions == {"s3:ListBucket", "s3:GetBucketLocation", "s3:GetObject", "kms:Decrypt"}
    read = next(s for s in policy["Statement"] if s["Action"] == ["s3:GetObject"])
    assert read["Resource"] == [f"{MODELS_ARN}/{settings.repository_prefix}/*"]
    [decrypt] = [s for s in policy["Statement"] if s["Action"] == ["kms:Decrypt"]]
    assert decrypt["Resource"] in (KEY_ARN, [KEY_ARN])


def test_pods_start_after_their_credentials():
    # A pod started before its Pod Identity association gets no AWS credentials until it
    # restarts: the association is the cloud layer's, applied before the cluster layer,
    # for exactly the namespace and ServiceAccount the cluster layer's Deployment runs as.
    cloud, cluster = preview("prod"), preview("prod-cluster")
    [deployment] = [r for r in of_type(cluster, DEPLOYMENT) if r.inputs()["metadata"]["name"] == "triton"]
    namespace = deployment.inputs()["metadata"]["namespace"]
    account = deployment.inputs()["spec"]["template"]["spec"]["serviceAccountName"]
    associations = {(r.inputs()["namespace"], r.inputs()["serviceAccount"])
                    for r in of_type(cloud, "aws:eks/podIdentityAssociation:PodIdentityAssociation")}
    assert (namespace, account) in associations
    assert not [r for r in cluster.registrations if r.type.startswith("aws:")]


def test_children_are_parented_and_on_the_right_providers(gpu):
    [component] = gpu.of_type("mlplat:inference:InferenceService")
    [k8s_provider] = gpu.of_type("pulumi:providers:kubernetes")
    inside = [r for r in gpu.registrations if r.custom and not r.is_provider and r.name != "prometheus-stand-in"]
    assert len(inside) >= 12
    for reg in inside:
        chain, parent = [], reg.parent
        while parent:
            chain.append(parent)
            parent = gpu.by_urn(parent).parent if any(r.urn == parent for r in gpu.registrations) else ""
        assert component.urn in chain, reg.urn
        assert reg.type.startswith("kubernetes:") and reg.provider_urn == k8s_provider.urn, reg.urn


# --- schema -----------------------------------------------------------------------------------


def kubernetes_objects(rec: Recording) -> list[dict]:
    """The Kubernetes objects as the engine received them (typed resources carry their
    apiVersion and kind among their inputs)."""
    found = []
    for reg in rec.registrations:
        if reg.custom and reg.type.startswith("kubernetes:") and "helm.sh" not in reg.type \
                and reg.name != "prometheus-stand-in":
            body = reg.inputs()
            assert {"apiVersion", "kind", "metadata"} <= set(body), reg.urn
            found.append(body)
    return found


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_rendered_objects_pass_strict_schema_validation(device, gpu, cpu):
    rec = gpu if device == "gpu" else cpu
    # Custom resources are judged against their CRDs by the preview (infra/checks/admission.py).
    objects = [o for o in kubernetes_objects(rec) if o["apiVersion"] in SERVED_APIS]
    assert {o["kind"] for o in objects} >= {"Namespace", "ServiceAccount", "NetworkPolicy", "Deployment", "Service",
                                            "HorizontalPodAutoscaler", "PodDisruptionBudget"}
    for manifest in objects:
        kubernetes_validate.validate(manifest, f"{KUBERNETES_VERSION}.0", strict=True)


def test_the_schema_check_would_catch_a_typo(gpu):
    [deployment] = [o for o in kubernetes_objects(gpu) if o["kind"] == "Deployment"]
    deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavaliable"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, f"{KUBERNETES_VERSION}.0", strict=True)


# --- the stacks -----------------------------------------------------------------------------


def service_of(stack: str) -> list:
    return of_type(preview(f"{stack}-cluster"), "mlplat:inference:InferenceService")


def test_prod_serves_on_gpus_and_smb_on_cpus():
    prod = preview("prod-cluster")
    [deployment] = [r for r in of_type(prod, DEPLOYMENT) if r.inputs()["metadata"]["namespace"] == "inference"
                    and r.inputs()["metadata"]["name"] == "triton"]
    [triton] = deployment.inputs()["spec"]["template"]["spec"]["containers"]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == "1"
    bucket = storage_names(load_stack("prod"), "prod", ACCOUNT).buckets["models"]
    [fetch] = deployment.inputs()["spec"]["template"]["spec"]["initContainers"]
    # prod pins the version it serves (mlplat:inference.version).
    assert fetch["command"][-4:] == [f"s3://{bucket}/triton/", "/models/", "gpt", "1"]
    # ... and names it on the pods' template, where the golden path's canary step reads it.
    assert deployment.inputs()["spec"]["template"]["metadata"]["annotations"] == {"mlplat.io/model-version": "1"}
    assert any(r.inputs().get("bucket") == bucket for r in of_type(preview("prod"), "aws:s3/bucket:Bucket"))
    smb = preview("smb-cluster")
    [deployment] = [r for r in of_type(smb, DEPLOYMENT) if r.inputs()["metadata"]["namespace"] == "inference"
                    and r.inputs()["metadata"]["name"] == "triton"]
    [triton] = deployment.inputs()["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in triton["resources"]["limits"]
    assert not any("nvidia.com/gpu" in json.dumps(r.inputs()) for r in of_type(smb, DEPLOYMENT))


@pytest.mark.parametrize("stack", ["dev", "staging"])
def test_stacks_without_an_inference_section_serve_nothing(stack):
    assert service_of(stack) == []
    # Nor does their cloud layer make a serving role.
    assert not [r for r in of_type(preview(stack), "aws:eks/podIdentityAssociation:PodIdentityAssociation")
                if r.inputs()["serviceAccount"] == "triton"]
