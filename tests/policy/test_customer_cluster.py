"""A stack on a customer's own in-country cluster (issue 21): no AWS, object storage only at
allow-listed https endpoints, nothing exposed outside the cluster, the object store's
encryption at rest stated; images and charts from the customer's registry by digest,
including what operators pull from their custom resources. Each rule passes and fails in
the shared table (cases.py, directly and over gRPC); here the paths one case per side does
not show, AWS stacks left as they were, and policies/config/onprem.json through the pack."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from platform_policies import CUSTOMER_CLUSTER
from platform_policies import customer_cluster as cc
from platform_policies import kubernetes as k8s
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import StackValidationPolicy

from infra.preview.analyzer import load_policy_config
from tests.policy.cases import (
    CLUSTER_POLICY,
    CONFIG_MAP,
    CUSTOMER,
    CUSTOMER_CASES,
    CUSTOMER_REGISTRY,
    DAEMONSET,
    DEPLOYMENT,
    ENDPOINTS,
    ENVOY_PROXY,
    GATEWAY,
    GATEWAY_CLASS,
    HARBOR_CONTAINER,
    HARBOR_MIRROR,
    HELM,
    HELM_CHART,
    K8S_PROVIDER,
    OBJECT_STORE,
    PROXY_REF,
    SECRET,
    SERVICE,
    STACK_CASES,
    STATED,
    _pod,
    cluster_policy,
    config_map,
    daemon_set,
    deployment,
    envoy_proxy,
    gateway_class,
    platform_config_map,
    service,
    with_env,
)
from tests.policy.harness import NOT_APPLICABLE, check, check_stack, stack_resource

ONPREM = Path(__file__).resolve().parents[2] / "policies" / "config" / "onprem.json"
CUSTOMER_RULES = {p.name: p for p in CUSTOMER_CLUSTER}
RESOURCE_RULES = [p.name for p in CUSTOMER_CLUSTER if not isinstance(p, StackValidationPolicy)]


# --- AWS stacks are judged as before ------------------------------------------------------

@pytest.mark.parametrize("case", [c for c in CUSTOMER_CASES if c.rule in CUSTOMER_RULES], ids=lambda c: c.id)
def test_customer_cluster_rules_do_not_judge_an_aws_stack(case):
    """Without `deployment: customer-cluster` (every AWS stack's config) each rule declares
    itself not applicable, whatever it is shown."""
    assert check(CUSTOMER_RULES[case.rule], case.type, case.props, provider_props=case.provider,
                 name=case.name) == NOT_APPLICABLE


def test_the_stack_rule_does_not_judge_an_aws_stack():
    for case in [c for c in STACK_CASES if c.rule in CUSTOMER_RULES]:
        resources = [stack_resource(r.type, r.props, r.name) for r in case.resources]
        assert check_stack(CUSTOMER_RULES[case.rule], resources) == []


# --- No AWS resource -----------------------------------------------------------------------

def test_every_resource_is_judged_and_only_aws_ones_fail():
    rule = cc.no_aws_resources_on_customer_cluster
    assert check(rule, "mlplat:tracking:TrackingServer", {}, provider_props=None, config=CUSTOMER) == []
    assert check(rule, K8S_PROVIDER, {"context": "dc1"}, provider_props=None, config=CUSTOMER) == []
    [message] = check(rule, "aws:iam/role:Role", {"assumeRolePolicy": "{}"}, name="mlflow", config=CUSTOMER)
    assert message.startswith("aws:iam/role:Role 'mlflow' is an AWS resource")


# --- Object-store endpoints ---------------------------------------------------------------

def _endpoints(resource_type, props, config=ENDPOINTS):
    return check(cc.object_store_endpoints_allowed, resource_type, props, provider_props=None, config=config)


def test_endpoint_forms():
    ok = [OBJECT_STORE, f"{OBJECT_STORE}/", "https://S3.DC1.example.ae:443"]
    for endpoint in ok:
        assert _endpoints(DEPLOYMENT, deployment(_pod(with_env(HARBOR_CONTAINER, AWS_ENDPOINT_URL_S3=endpoint)))) == []
    other_port = _endpoints(DEPLOYMENT, deployment(_pod(with_env(HARBOR_CONTAINER, AWS_ENDPOINT_URL_S3=
                                                                  "https://s3.dc1.example.ae:9000"))))
    assert len(other_port) == 1 and "is not an allowed object-store endpoint" in other_port[0]
    [bare] = _endpoints(DEPLOYMENT, deployment(_pod(with_env(HARBOR_CONTAINER, AWS_ENDPOINT_URL="s3.dc1.example.ae"))))
    assert bare.endswith("s3.dc1.example.ae is not an endpoint URL; write it as https://<host>[:<port>]")
    # Plain http is its own violation, even to an allowed host.
    [http] = _endpoints(DEPLOYMENT, deployment(_pod(with_env(HARBOR_CONTAINER, AWS_ENDPOINT_URL_S3=
                                                             "http://s3.dc1.example.ae"))))
    assert "is plain http" in http and "not an allowed" not in http
    # With no endpoint allowed (the default), none passes.
    assert _endpoints(DEPLOYMENT, deployment(_pod(with_env(HARBOR_CONTAINER, AWS_ENDPOINT_URL_S3=OBJECT_STORE))),
                      config=CUSTOMER)


def test_s3_locations_need_an_endpoint_in_the_same_container():
    triton = {**HARBOR_CONTAINER, "args": ["--model-repository=s3://https://s3.dc1.example.ae:443/models/triton"]}
    assert _endpoints(DEPLOYMENT, deployment(_pod(triton))) == []  # Triton names its endpoint in the path
    [abroad] = _endpoints(DEPLOYMENT, deployment(_pod({**triton, "args": [
        "--model-repository=s3://https://s3.eu-west-1.amazonaws.com:443/models/triton"]})))
    assert "https://s3.eu-west-1.amazonaws.com:443 is not an allowed" in abroad
    script = {**HARBOR_CONTAINER, "command": ["sh", "-c", "aws s3 sync s3://models/triton/ /models/"]}
    [missing] = _endpoints(DEPLOYMENT, deployment(_pod(script)))
    assert "uses s3://models/triton/ but sets no object-store endpoint" in missing
    from_secret = {**script, "env": [{"name": "AWS_ENDPOINT_URL_S3",
                                      "valueFrom": {"configMapKeyRef": {"name": "object-store", "key": "endpoint"}}}]}
    assert _endpoints(DEPLOYMENT, deployment(_pod(from_secret))) == []
    env_from = {**script, "envFrom": [{"configMapRef": {"name": "object-store"}}]}
    assert _endpoints(DEPLOYMENT, deployment(_pod(env_from))) == []  # the ConfigMap is judged on its own
    jobset = {"kind": "JobSet", "metadata": {"name": "train", "namespace": "research"},
              "spec": {"replicatedJobs": [{"template": {"spec": {"template": {"spec": _pod(with_env(
                  HARBOR_CONTAINER, MLPLAT_CHECKPOINT_UPLOAD="s3://checkpoints/runs"))}}}}]}}
    [message] = _endpoints("kubernetes:jobset.x-k8s.io/v1alpha2:JobSet", jobset)
    assert message.startswith("JobSet research/train: spec.replicatedJobs[0].template.spec.template.spec.containers[0]")


def test_mlflow_artifacts_destination():
    server = {**HARBOR_CONTAINER, "args": ["mlflow", "server", "--artifacts-destination=gs://models/mlflow"]}
    [foreign] = _endpoints(DEPLOYMENT, deployment(_pod(with_env(server, MLFLOW_S3_ENDPOINT_URL=OBJECT_STORE))))
    assert "uses gs://models/mlflow, another cloud's object store" in foreign
    http_store = {**server, "args": ["mlflow", "server", "--artifacts-destination", "http://s3.dc1.example.ae/models"]}
    [http] = _endpoints(DEPLOYMENT, deployment(_pod(http_store)))
    assert "artifacts destination http://s3.dc1.example.ae/models is plain http" in http


def test_config_maps_and_secrets():
    envs = config_map("object-store", "research", {"AWS_ENDPOINT_URL_S3": "http://s3.dc1.example.ae"})
    [message] = _endpoints(CONFIG_MAP, envs)
    assert message.startswith("ConfigMap research/object-store: data[AWS_ENDPOINT_URL_S3] http://")
    json_file = config_map("client", "research", {"s3.json": json.dumps({"endpoint_url": OBJECT_STORE})})
    assert _endpoints(CONFIG_MAP, json_file) == []
    encoded = {"metadata": {"name": "store", "namespace": "mlflow"},
               "data": {"MLFLOW_S3_ENDPOINT_URL": base64.b64encode(b"https://evil.example.com").decode()}}
    [secret] = _endpoints(SECRET, encoded)
    assert "data[MLFLOW_S3_ENDPOINT_URL] https://evil.example.com is not an allowed" in secret
    assert _endpoints(SECRET, {"metadata": {"name": "s"}, "stringData": {"AWS_ENDPOINT_URL": OBJECT_STORE}}) == []
    assert _endpoints(CONFIG_MAP, config_map("dashboards", "monitoring", {"a.json": "{}"})) == NOT_APPLICABLE
    # The platform ConfigMap names the store's endpoint too.
    assert _endpoints(CONFIG_MAP, platform_config_map(**STATED)) == []


def test_helm_values():
    release = {"chart": "mlflow", "name": "mlflow", "namespace": "mlflow",
               "values": {"extraEnvVars": [{"name": "MLFLOW_S3_ENDPOINT_URL", "value": "https://other.example.com"}],
                          "artifactRoot": {"s3": {"endpoint_url": OBJECT_STORE}}}}
    [message] = _endpoints(HELM, release)
    assert message.startswith("Release mlflow/mlflow: values.extraEnvVars[0] MLFLOW_S3_ENDPOINT_URL")
    assert _endpoints(HELM_CHART, release) == NOT_APPLICABLE  # judged on what it renders


# --- Nothing exposed outside the cluster ---------------------------------------------------

def _exposure(resource_type, props, config=CUSTOMER):
    return check(cc.nothing_exposed_outside_the_cluster, resource_type, props, provider_props=None, config=config)


def test_services_and_gateways():
    [external] = _exposure(SERVICE, service(externalIPs=["192.0.2.10"]))
    assert "externalIPs ['192.0.2.10']" in external
    assert _exposure(SERVICE, {"metadata": {"name": "headless"}, "spec": {"clusterIP": "None"}}) == []
    with_addresses = {"metadata": {"name": "inference", "namespace": "inference"},
                      "spec": {"gatewayClassName": "mlplat-envoy", "addresses": [{"value": "192.0.2.20"}],
                               "listeners": [{"name": "grpc", "port": 8001, "protocol": "HTTP"}]}}
    [message] = _exposure(GATEWAY, with_addresses)
    assert "spec.addresses asks for addresses outside the cluster (['192.0.2.20'])" in message
    assert _exposure(GATEWAY, {**with_addresses, "spec": {**with_addresses["spec"], "addresses": []}}) == []
    [other] = _exposure(GATEWAY_CLASS, gateway_class(None, controller="io.cilium/gateway-controller"))
    assert "controller io.cilium/gateway-controller" in other
    patched = envoy_proxy({"type": "ClusterIP", "patch": {"type": "StrategicMerge",
                                                          "value": {"spec": {"type": "NodePort"}}}})
    [message] = _exposure(ENVOY_PROXY, patched)
    assert "patch sets the Service's type to NodePort" in message
    [load_balancer] = _exposure(ENVOY_PROXY, envoy_proxy({"type": "LoadBalancer"}))
    assert "envoyService.type LoadBalancer" in load_balancer


def test_node_agents_are_allow_listed_by_name_only_for_the_host_network():
    agent = daemon_set({**_pod({**HARBOR_CONTAINER, "ports": [{"containerPort": 50051, "hostPort": 50051}]}),
                        "hostNetwork": True})
    assert len(_exposure(DAEMONSET, agent)) == 2
    allowed = {**CUSTOMER, "allowedNodeAgents": [{"kind": "DaemonSet", "namespace": "nvidia-network-operator",
                                                  "name": "rdma-shared-dp", "reason": "registers RDMA devices"}]}
    assert _exposure(DAEMONSET, agent, allowed) == NOT_APPLICABLE  # with its reason, as allow-lists are
    assert _exposure(DAEMONSET, daemon_set(agent["spec"]["template"]["spec"], name="other"), allowed)
    # A Service is never a node agent.
    lb = {**service("LoadBalancer"), "metadata": {"name": "rdma-shared-dp", "namespace": "nvidia-network-operator"}}
    assert _exposure(SERVICE, lb, {**allowed, "allowedNodeAgents": [
        {**allowed["allowedNodeAgents"][0], "kind": "Service"}]})


def test_helm_values_and_charts():
    release = {"chart": "prometheus-node-exporter", "name": "node-exporter", "namespace": "monitoring",
               "values": {"hostNetwork": True, "service": {"type": "NodePort", "port": 9100}}}
    assert _exposure(HELM, release) == [
        "Release monitoring/node-exporter: values.hostNetwork is true: the chart's pods would listen on the node's "
        "own addresses",
        "Release monitoring/node-exporter: values.service.type is NodePort: the chart's Service would be reachable "
        "from outside the cluster"]
    assert _exposure(HELM_CHART, release) == NOT_APPLICABLE


def test_operator_components_switched_off_are_not_judged():
    off = cluster_policy(dcgm={"enabled": False, "repository": "nvcr.io/nvidia/cloud-native", "image": "dcgm",
                               "hostNetwork": True},
                         vfioManager={"enabled": True, "repository": "nvcr.io/nvidia", "image": "k8s-driver-manager",
                                      "hostNetwork": True})  # a sandbox component: sandboxWorkloads is off
    assert _exposure(CLUSTER_POLICY, off) == []
    assert _exposure("kubernetes:core/v1:Namespace", {"metadata": {"name": "x"}}) == NOT_APPLICABLE


# --- Encryption at rest, stated ------------------------------------------------------------

def test_encryption_values():
    rule = cc.object_store_encryption_named
    for said in ("NONE", " disabled ", "", "false", "n/a"):
        assert check(rule, CONFIG_MAP, platform_config_map(**{**STATED, "objectStore.encryptionAtRest": said}),
                     provider_props=None, config=CUSTOMER), said
    other = {**platform_config_map(**STATED), "metadata": {"name": "mlplat-platform", "namespace": "default"}}
    assert check(rule, CONFIG_MAP, other, provider_props=None, config=CUSTOMER) == NOT_APPLICABLE


def test_the_statement_is_required_of_the_stack():
    rule = cc.object_store_encryption_stated
    provider = stack_resource(K8S_PROVIDER, {"context": "dc1"}, "cluster", provider_props=None)
    [(message, urn)] = check_stack(rule, [provider], CUSTOMER)
    assert urn == provider.urn
    assert message.startswith("no ConfigMap mlplat-system/mlplat-platform states the object store's encryption")
    # A value it names badly is the resource rule's: not reported twice.
    bad = stack_resource(CONFIG_MAP, platform_config_map(**{"objectStore.encryptionAtRest": "none"}), "platform")
    assert check_stack(rule, [provider, bad], CUSTOMER) == []
    # Without a Kubernetes provider in the stack, reported on the stack.
    lonely = stack_resource(CONFIG_MAP, config_map("x", "default", {}), "x")
    [(message, urn)] = check_stack(rule, [lonely], CUSTOMER)
    assert urn is None and message.startswith("no ConfigMap mlplat-system/mlplat-platform")


# --- Images from operators' custom resources (every stack) ---------------------------------

def test_cluster_policy_images_are_those_it_deploys():
    images = {path: image for path, image in k8s._images(_Args(CLUSTER_POLICY, cluster_policy()))}
    assert set(images) == {"spec.driver", "spec.driver.manager"}  # gds off, sandbox plugin with sandboxes off
    assert images["spec.driver"].digest == "sha256:" + "a" * 64 and images["spec.driver"].tag == "580.126.20"
    assert images["spec.driver.manager"].digest == "sha256:" + "b" * 64 and images["spec.driver.manager"].tag is None
    sandboxes = cluster_policy(sandboxWorkloads={"enabled": True})
    assert "spec.sandboxDevicePlugin" in {p for p, _ in k8s._images(_Args(CLUSTER_POLICY, sandboxes))}


def test_envoy_proxy_and_prometheus_images_are_judged():
    proxy = envoy_proxy({"type": "ClusterIP"})
    proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]["container"] = {"image": "docker.io/envoyproxy/envoy:v1.35"}
    [message] = check(k8s.k8s_images_from_allowed_registries, ENVOY_PROXY, proxy, provider_props=None,
                      config=CUSTOMER_REGISTRY)
    assert "spec.provider.kubernetes.envoyDeployment.container.image pulls docker.io/envoyproxy/envoy:v1.35" in message
    prometheus = {"kind": "Prometheus", "metadata": {"name": "p", "namespace": "monitoring"},
                  "spec": {"image": f"{HARBOR_MIRROR}/prometheus:v3.13.2@sha256:{'f' * 64}", "version": "v3.13.2"}}
    assert check(k8s.k8s_images_from_allowed_registries, "kubernetes:monitoring.coreos.com/v1:Prometheus", prometheus,
                 provider_props=None, config=CUSTOMER_REGISTRY) == []
    assert check(k8s.k8s_images_pinned, "kubernetes:monitoring.coreos.com/v1:Prometheus", prometheus,
                 provider_props=None) == []


class _Args:
    def __init__(self, resource_type, props):
        self.resource_type, self.props, self.name = resource_type, props, "r"


# --- policies/config/onprem.json through the pack process ----------------------------------

def _struct(values: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def _request(resource_type: str, props: dict, name: str = "r") -> analyzer_pb2.AnalyzeRequest:
    return analyzer_pb2.AnalyzeRequest(type=resource_type, urn=f"urn:pulumi:onprem::mlplat::{resource_type}::{name}",
                                       name=name, properties=_struct(props))


SINGLE_RESOURCE = [
    ("aws:s3/bucket:Bucket", {"bucket": "data"}, "no-aws-resources-on-customer-cluster"),
    (SERVICE, service("LoadBalancer"), "nothing-exposed-outside-the-cluster"),
    (DAEMONSET, daemon_set({**_pod(HARBOR_CONTAINER), "hostNetwork": True}), "nothing-exposed-outside-the-cluster"),
    (CONFIG_MAP, config_map("object-store", "mlflow", {"MLFLOW_S3_ENDPOINT_URL": "http://s3.dc1.example.ae"}),
     "object-store-endpoints-allowed"),
    (CONFIG_MAP, platform_config_map(**{"objectStore.encryptionAtRest": "none"}), "object-store-encryption-named"),
    (DEPLOYMENT, deployment(_pod({**HARBOR_CONTAINER, "image": f"nvcr.io/nvidia/driver:580@sha256:{'e' * 64}"})),
     "k8s-images-from-allowed-registries"),
]


@pytest.mark.parametrize(("kind", "props", "rule"), SINGLE_RESOURCE, ids=[f"{r}:{k.rsplit(':', 1)[-1]}"
                                                                          for k, _, r in SINGLE_RESOURCE])
def test_onprem_config_refuses_single_resource_violations_in_analyze(pack, kind, props, rule):
    """Configured from policies/config/onprem.json as `mlplat preview` and `pulumi up
    --policy-pack-config` do: what one resource shows is refused when the engine registers
    it (Analyze), and AnalyzeStack does not report it again."""
    pack.configure(pack.info(), load_policy_config(ONPREM), str(ONPREM))
    answer = pack.stub.Analyze(_request(kind, props))
    [diag] = [d for d in answer.diagnostics if d.policyName == rule]
    assert diag.enforcementLevel == analyzer_pb2.MANDATORY
    request = _request(kind, props)
    stack = pack.stub.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[analyzer_pb2.AnalyzerResource(
        type=request.type, urn=request.urn, name=request.name, properties=request.properties)]))
    assert rule not in [d.policyName for d in stack.diagnostics]


def test_onprem_config_passes_a_compliant_slice_of_a_customer_stack(pack):
    """The customer-cluster rules over gRPC with onprem.json: a compliant Kubernetes provider,
    platform ConfigMap, in-cluster gateway and workload pass, each judged; the stack without
    the platform ConfigMap is refused on its provider."""
    pack.configure(pack.info(), load_policy_config(ONPREM), str(ONPREM))
    image = f"harbor.dc1.example.ae/mlplat/onprem/tracking:0.1.0@sha256:{'e' * 64}"
    objects = [
        (K8S_PROVIDER, {"context": "dc1"}, "cluster"),
        (CONFIG_MAP, platform_config_map(**STATED), "platform"),
        (ENVOY_PROXY, envoy_proxy({"type": "ClusterIP"}), "proxy"),
        (GATEWAY_CLASS, gateway_class(PROXY_REF), "class"),
        (DEPLOYMENT, deployment(_pod(with_env({**HARBOR_CONTAINER, "image": image}, MLFLOW_S3_ENDPOINT_URL=OBJECT_STORE,
                                              MLPLAT_ARTIFACTS="s3://models/mlflow")), "mlflow", "mlflow"), "mlflow"),
    ]
    judged: dict[str, set[str]] = {}
    for kind, props, name in objects:
        answer = pack.stub.Analyze(_request(kind, props, name))
        assert [(d.policyName, d.message) for d in answer.diagnostics] == [], kind
        skipped = {n.policy_name for n in answer.not_applicable}
        for rule in RESOURCE_RULES:
            if rule not in skipped:
                judged.setdefault(rule, set()).add(name)
    assert judged == {"no-aws-resources-on-customer-cluster": {n for _, _, n in objects},
                      "nothing-exposed-outside-the-cluster": {"proxy", "class", "mlflow"},
                      "object-store-endpoints-allowed": {"platform", "mlflow"},
                      "object-store-encryption-named": {"platform"}}
    resources = [analyzer_pb2.AnalyzerResource(type=r.type, urn=r.urn, name=r.name, properties=r.properties)
                 for r in (_request(kind, props, name) for kind, props, name in objects)]
    assert list(pack.stub.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=resources)).diagnostics) == []
    without = [r for r in resources if r.name != "platform"]
    [diag] = pack.stub.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=without)).diagnostics
    assert (diag.policyName, diag.urn) == ("object-store-encryption-stated", without[0].urn)
