"""The cluster layer on a customer's own in-country cluster (stacks/Pulumi.onprem.yaml): it
previews offline with no mandatory violation and nothing of AWS; it installs the GPU
Operator with the driver, the toolkit and GPUDirect RDMA, and the Network Operator with a
NicClusterPolicy serving the fabric's RDMA resource; the training JobSet asks for that
resource with NCCL's InfiniBand settings; every image and chart comes from the customer's
registry; and the descriptor's bad inputs stop `mlplat preview` with one line, exit 2,
before anything is registered. (The rendered objects go through the render checks of
tests/rendered with every other stack: tests/conftest.py VARIANTS.)"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from components.addons.values import NIC_CLUSTER_POLICY
from components.specs.cluster import PLATFORM_CONFIG_MAP, PLATFORM_NAMESPACE
from components.training_spec import EFA_RESOURCE, FORBIDDEN_ENV, TrainingPlan
from infra.checks.images import object_id, out_of_plan, pulled_references
from infra.descriptor import CustomerClusterDescriptor
from infra.preview.engine import kubernetes_objects
from infra.preview.fixtures import ACCOUNT_ID
from infra.versions import CHARTS
from tests.conftest import customer_descriptor, preview
from tests.helpers import of_type, one

STACK = "onprem"
MLPLAT = [sys.executable, "-m", "infra.cli"]
CHART = "kubernetes:helm.sh/v4:Chart"


@pytest.fixture(scope="module")
def result():
    return preview(STACK)


@pytest.fixture(scope="module")
def descriptor() -> CustomerClusterDescriptor:
    found = customer_descriptor(STACK)
    assert isinstance(found, CustomerClusterDescriptor)
    return found


def objects(result, kind: str) -> list[dict]:
    return [o for _owner, o in kubernetes_objects(result.registrations) if o["kind"] == kind]


def test_previews_with_no_mandatory_violation_and_nothing_of_aws(result):
    assert result.engine_errors == []
    assert [v.message for v in result.verdict.mandatory] == []
    assert result.exit_code == 0
    assert [r.urn for r in result.registrations if r.type.startswith("aws:") or "providers:aws" in r.type] == []
    [provider] = of_type(result, "pulumi:providers:kubernetes")
    assert provider.inputs()["context"] == "mlplat-onprem"  # the customer's kubeconfig context, no EKS token


def test_installs_no_aws_only_add_on_and_no_storage_class(result):
    charts = {r.name for r in of_type(result, CHART)}
    # Serving's controllers (gateway-helm, argo-rollouts, prometheus-adapter) are on here too.
    assert charts == {"kube-prometheus-stack", "gpu-operator", "network-operator", "jobset", "kueue", "gateway-helm",
                      "argo-rollouts", "prometheus-adapter"}
    assert of_type(result, "kubernetes:storage.k8s.io/v1:StorageClass") == []  # the customer's own classes
    kinds = {o["kind"] for _owner, o in kubernetes_objects(result.registrations)}
    assert "PersistentVolume" not in kinds  # no static (Lustre) volumes: dynamic claims of the shared class


def test_the_gpu_operator_installs_the_driver_the_toolkit_and_nvidia_peermem(result):
    [policy] = objects(result, "ClusterPolicy")
    spec = policy["spec"]
    assert spec["driver"]["enabled"] is True and spec["toolkit"]["enabled"] is True
    assert spec["driver"]["rdma"] == {"enabled": True, "useHostMofed": False}  # GPUDirect RDMA, DOCA's MOFED


def test_the_nic_cluster_policy_serves_the_fabrics_rdma_resource(result, descriptor):
    [policy] = objects(result, "NicClusterPolicy")
    assert policy["metadata"]["name"] == NIC_CLUSTER_POLICY
    spec = policy["spec"]
    assert spec["ofedDriver"]["image"] == "doca-driver"
    [entry] = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"]
    [fabric] = descriptor.fabrics.values()
    assert f"{entry['resourcePrefix']}/{entry['resourceName']}" == fabric.rdma_resource
    assert entry["selectors"] == {"vendors": ["15b3"], "linkTypes": ["infiniband"]}
    [term] = spec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "mlplat.io/pool", "operator": "In", "values": ["train-h100"]}]
    # Kueue admits jobs that ask for it: the resource is out of quota, like huge pages.
    kueue = one(result, CHART, "kueue").inputs()["values"]["managerConfig"]["controllerManagerConfigYaml"]
    assert "rdma/" in yaml.safe_load(kueue)["resources"]["excludeResourcePrefixes"]


def test_the_training_jobset_asks_for_rdma_with_infiniband_settings(result, descriptor):
    if "fabric" not in {f.name for f in fields(TrainingPlan)}:
        pytest.skip("TrainingPlan has no `fabric` yet (components/training_spec.py)")
    [fabric] = descriptor.fabrics.values()
    jobsets = objects(result, "JobSet")
    assert jobsets
    for jobset in jobsets:
        for replicated in jobset["spec"]["replicatedJobs"]:
            pod = replicated["template"]["spec"]["template"]["spec"]
            for container in pod["containers"]:
                if "nvidia.com/gpu" not in container["resources"]["limits"]:
                    continue
                assert container["resources"]["limits"][fabric.rdma_resource] == "1"
                assert EFA_RESOURCE not in container["resources"]["limits"]
                env = {e["name"]: e.get("value") for e in container["env"]}
                # `=`: exactly these HCAs; `:1`: their one port each.
                assert env["NCCL_IB_HCA"] == "=" + ",".join(f"{hca}:1" for hca in fabric.hcas)
                assert not set(env) & set(FORBIDDEN_ENV)
            assert {"key": "mlplat.io/pool", "operator": "In", "values": ["train-h100"]} in \
                pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                    "nodeSelectorTerms"][0]["matchExpressions"]


def test_each_tenant_keeps_checkpoints_on_a_claim_of_the_shared_class(result, descriptor):
    claims = {c["metadata"]["namespace"]: c for c in objects(result, "PersistentVolumeClaim")}
    assert set(claims) == {"research", "applied"}
    for claim in claims.values():
        assert claim["spec"]["storageClassName"] == descriptor.storage_classes.shared
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    [trainer] = [j for j in objects(result, "JobSet") if not j["metadata"]["name"].endswith("allreduce")]
    pod = trainer["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert {"name": "scratch", "persistentVolumeClaim": {"claimName": "shared-scratch"}} in pod["volumes"]


def test_every_image_and_chart_comes_from_the_customers_registry(result, descriptor):
    """Every image a node may pull (operands the GPU Operator leaves off are never pulled:
    infra/checks/images.py inert), ours and the charts'."""
    host = descriptor.registry_host
    refs = [(f"{object_id(obj)} {where}", ref) for _owner, obj in kubernetes_objects(result.registrations)
            if obj["kind"] != "CustomResourceDefinition" for where, ref in pulled_references(obj)]
    assert refs and all(ref.startswith(f"{host}/mlplat/onprem/") for _where, ref in refs)
    assert out_of_plan(refs, ACCOUNT_ID, "me-central-1", STACK, registry=host) == []
    for chart in of_type(result, CHART):
        assert chart.inputs()["chart"] == f"oci://{host}/{CHARTS[chart.name].mirror_repository(STACK)}"


def test_the_platform_config_map_states_the_stores_encryption_at_rest(result, descriptor):
    [config] = [c for c in objects(result, "ConfigMap")
                if c["metadata"] == {"name": PLATFORM_CONFIG_MAP, "namespace": PLATFORM_NAMESPACE,
                                     "labels": {"app.kubernetes.io/part-of": "mlplat"}}]
    data = config["data"]
    assert data["objectStore.encryptionAtRest"] == descriptor.object_storage.encryption_at_rest
    assert data["objectStore.endpoint"] == "https://s3.dc1.example.ae"
    assert data["nodes.train-h100.fabric"].startswith("infiniband, 8 x 400 Gb/s")


@pytest.mark.parametrize(("change", "line"), [
    (lambda d: d["registry"].update(host="registry.example.com"),
     "`registry.host`: registry.example.com is not in the registry allow-list of policies/config/onprem.json"),
    (lambda d: d["nodes"][1]["fabric"].update(kind="omnipath"),
     "`nodes[1].fabric.kind`: 'omnipath' is not a fabric in the catalog; known: infiniband, roce"),
    (lambda d: d["objectStorage"].update(endpoint="http://s3.dc1.example.ae"),
     "`objectStorage.endpoint`: 'http://s3.dc1.example.ae' has no TLS; the object store must be reached over "
     "https://"),
], ids=["registry-outside-the-allow-list", "unknown-fabric", "endpoint-without-tls"])
def test_a_bad_descriptor_stops_the_preview_with_one_line_and_exit_2(tmp_path: Path, change, line):
    stack = yaml.safe_load((Path(__file__).resolve().parents[2] / "stacks" / f"Pulumi.{STACK}.yaml").read_text())
    change(stack["config"]["mlplat:descriptor"])
    (tmp_path / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(stack))
    done = subprocess.run([*MLPLAT, "preview", "--stack", STACK, "--stacks-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    error = [text for text in done.stderr.splitlines() if text.startswith("mlplat: error:")]
    assert len(error) == 1 and error[0].startswith(f"mlplat: error: cluster layer onprem: mlplat:descriptor: {line}")
    assert "Plan for stack" not in done.stdout  # nothing was registered


def test_the_tracking_server_uses_the_customers_database_and_store(result, descriptor):
    [server] = [d for d in objects(result, "Deployment") if d["metadata"]["namespace"] == "mlflow"]
    [container] = server["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLFLOW_S3_ENDPOINT_URL"] == descriptor.object_storage.endpoint
    assert env["MLPLAT_ARTIFACTS"] == f"s3://{descriptor.buckets['models']}/mlflow"
    volumes = {v["name"]: v for v in server["spec"]["template"]["spec"]["volumes"]}
    assert volumes["database"]["secret"]["secretName"] == descriptor.services.postgres.dsn_secret.name
    [ca] = [c for c in objects(result, "ConfigMap") if c["metadata"]["namespace"] == "mlflow"]
    assert ca["data"]["ca.crt"] == descriptor.object_storage.ca_bundle
    [egress] = [p for p in objects(result, "NetworkPolicy")
                if p["metadata"] == {"name": "allow-egress", "namespace": "mlflow"}]
    allowed = {(b["ipBlock"]["cidr"], port["port"]) for rule in egress["spec"]["egress"] for b in rule["to"]
               if "ipBlock" in b for port in rule["ports"]}
    assert allowed == {("10.40.9.0/28", 5432), ("10.40.8.0/27", 443)}


def test_each_tenants_feature_store_uses_the_customers_redis_and_store_in_cluster_only(result, descriptor):
    redis = descriptor.services.redis
    servers = {d["metadata"]["namespace"]: d for d in objects(result, "Deployment")
               if d["metadata"]["name"] == "feature-server"}
    assert set(servers) == {"research", "applied"}
    for tenant, server in servers.items():
        [container] = server["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["AWS_ENDPOINT_URL_S3"] == descriptor.object_storage.endpoint
        volumes = {v["name"]: v for v in server["spec"]["template"]["spec"]["volumes"]}
        assert volumes["redis"]["secret"]["secretName"] == redis.password_secret.name
        [store] = [c for c in objects(result, "ConfigMap")
                   if c["metadata"] == {"name": "feature-store", "namespace": tenant,
                                        "labels": {"app.kubernetes.io/part-of": "mlplat-features",
                                                   "app.kubernetes.io/name": "feature-store"}}]
        online = yaml.safe_load(store["data"]["feature_store.yaml"])["online_store"]
        assert online["connection_string"].startswith(f"{redis.endpoint},ssl=true,")
        assert online["user"] == f"mlplat-onprem-features-{tenant}"
        [fence] = [p for p in objects(result, "NetworkPolicy")
                   if p["metadata"] == {"name": "allow-feature-store", "namespace": tenant}]
        allowed = {(b["ipBlock"]["cidr"], port["port"]) for rule in fence["spec"]["egress"] for b in rule["to"]
                   for port in rule["ports"]}
        assert allowed == {("10.40.9.16/28", 6380), ("10.40.8.0/27", 443)}
    services = [s for s in objects(result, "Service") if s["metadata"]["name"] == "feature-server"]
    assert len(services) == 2 and all(s["spec"]["type"] == "ClusterIP" for s in services)


def test_training_runs_are_tracked_with_the_tenants_secrets_and_the_customers_store(result, descriptor):
    """The trainer's pods reach the tracking server as their tenant (the password from the
    tenant's Secret) and copy checkpoints to the customer's store at its endpoint, over its CA."""
    [trainer] = [j for j in objects(result, "JobSet") if not j["metadata"]["name"].endswith("allreduce")]
    tenant = trainer["metadata"]["namespace"]
    pod = trainer["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "mlflow-tracking",
                                                                             "key": "password"}}
    plain = {name: e.get("value") for name, e in env.items()}
    assert plain["MLFLOW_TRACKING_URI"] == "http://mlflow.mlflow.svc.cluster.local:5000"
    assert plain["MLFLOW_TRACKING_USERNAME"] == tenant
    assert plain["MLPLAT_CHECKPOINT_UPLOAD"] == f"s3://{descriptor.buckets['checkpoints']}/runs/research"
    assert plain["AWS_ENDPOINT_URL_S3"] == descriptor.object_storage.endpoint == "https://s3.dc1.example.ae"
    assert plain["AWS_CA_BUNDLE"] == "/etc/mlplat/ca/ca.crt"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["object-store"]["secret"]["secretName"] == "training-object-store"
    assert volumes["ca"]["configMap"] == {"name": "customer-ca"}
    [ca] = [c for c in objects(result, "ConfigMap") if c["metadata"] == {
        "name": "customer-ca", "namespace": tenant, "labels": {"app.kubernetes.io/part-of": "mlplat"}}]
    assert ca["data"]["ca.crt"] == descriptor.object_storage.ca_bundle
    # The network lets them: the tenant's egress to the server and the store, the server's ingress.
    policies = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["spec"]
                for p in objects(result, "NetworkPolicy")}
    [to_server] = policies[(tenant, "allow-tracking")]["egress"]
    assert to_server["ports"] == [{"protocol": "TCP", "port": 5000}]
    assert to_server["to"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "mlflow"}}
    [to_store] = policies[(tenant, "allow-vpc-endpoints")]["egress"]
    assert {b["ipBlock"]["cidr"] for b in to_store["to"]} == set(descriptor.object_storage.cidrs)
    assert to_store["ports"] == [{"protocol": "TCP", "port": 443}]
    [admitted] = policies[("mlflow", "allow-tenants")]["ingress"]
    assert tenant in admitted["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"]


# Serving on the customer's cluster (stacks/Pulumi.onprem.yaml): two inference nodes and the
# model behind the gateway; the controllers' images await their pins as on AWS.

def test_serving_runs_behind_an_in_cluster_gateway_reading_the_customers_store(result, descriptor):
    assert result.engine_errors == []
    assert [v.message for v in result.verdict.mandatory] == []  # with the controllers' images awaiting pins
    assert [r.urn for r in result.registrations if r.type.startswith("aws:") or "providers:aws" in r.type] == []
    assert all(s["spec"].get("type", "ClusterIP") == "ClusterIP" for s in objects(result, "Service"))
    [proxy] = objects(result, "EnvoyProxy")
    assert proxy["spec"]["provider"]["kubernetes"]["envoyService"] == {"type": "ClusterIP"}
    assert objects(result, "Rollout") and objects(result, "Gateway")
    [triton] = [d for d in objects(result, "Deployment") if d["metadata"]["name"] == "triton"]
    pod = triton["spec"]["template"]["spec"]
    [fetch] = pod["initContainers"]
    env = {e["name"]: e["value"] for e in fetch["env"]}
    assert env["AWS_ENDPOINT_URL_S3"] == descriptor.object_storage.endpoint
    assert fetch["command"][4] == f"s3://{descriptor.buckets['models']}/triton/"
    assert {v["name"]: v for v in pod["volumes"]}["store"]["secret"]["secretName"] == "object-store"
    [fence] = [p for p in objects(result, "NetworkPolicy")
               if p["metadata"] == {"name": "allow-object-store", "namespace": "inference"}]
    assert [b["ipBlock"]["cidr"] for b in fence["spec"]["egress"][0]["to"]] == ["10.40.8.0/27"]
    assert not [p for p in objects(result, "NetworkPolicy") if p["metadata"]["namespace"] == "inference"
                and p["metadata"]["name"] in ("allow-pod-identity", "allow-aws-endpoints")]
    images = {ref for _owner, obj in kubernetes_objects(result.registrations) for _w, ref in pulled_references(obj)}
    assert all(ref.startswith(f"{descriptor.registry_host}/mlplat/onprem/") for ref in images)


def test_serving_on_the_customers_cluster_keeps_the_first_deploy_from_waiting(result, descriptor):
    from infra.checks.first_deploy import waits

    gpu = [{"mlplat.io/pool": "serve-l40s", "node.kubernetes.io/instance-type": "r760-l40s-4"},
           *(g.selector for g in descriptor.nodes if g.gpus)]
    other = [g.selector for g in descriptor.nodes if not g.gpus]
    labels = {key: frozenset(s[key] for s in gpu if key in s) - frozenset(s[key] for s in other if key in s)
              for s in gpu for key in s}
    locations = [f"s3://{descriptor.buckets[name]}" for name in ("models", "datasets")]
    assert waits(kubernetes_objects(result.registrations), data_locations=locations, gpu_node_labels=labels) == []
