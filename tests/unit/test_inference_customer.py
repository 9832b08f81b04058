"""Serving on a customer's cluster (docs/onprem.md), as plain data: Triton's repository
copied from the customer's S3-compatible store (its endpoint, its CA, the keys of the
customer's Secret as a mounted file), egress to the store's CIDRs in place of the AWS
endpoints and the Pod Identity agent, no zone spread the customer's nodes may not label."""

from __future__ import annotations

from dataclasses import replace

from components.inference_spec import (
    STORE_CREDENTIALS_DIR,
    ZONE_KEY,
    CustomerModelStore,
    ServingPlan,
    customer_objects,
    network_policies,
    objects,
    pod_spec,
)

AWS = ServingPlan(namespace="inference", model="gpt", device="gpu", pool="serve", image="triton", fetch_image="cli",
                  model_repository="s3://models/triton", region="me-central-1", cpu=8, memory_gi=64, gpus=1,
                  min_replicas=2, max_replicas=4, target_queue_us=50000, target_cpu_percent=70,
                  vpc_cidr="10.0.0.0/16", endpoint_cidrs=("52.95.0.0/16",))
STORE = CustomerModelStore(endpoint="https://s3.dc1.example.ae:8443", region="ae-auh-dc1",
                           credentials_secret="object-store", cidrs=("10.40.8.0/27",),
                           ca_bundle="-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
PLAN = replace(AWS, region="ae-auh-dc1", vpc_cidr="", endpoint_cidrs=(), customer=STORE)


def test_the_repository_is_copied_from_the_customers_store_with_mounted_keys_and_its_ca():
    pod = pod_spec(PLAN)
    [fetch] = pod["initContainers"]
    env = {e["name"]: e["value"] for e in fetch["env"]}
    assert env["AWS_ENDPOINT_URL_S3"] == STORE.endpoint and env["AWS_REGION"] == "ae-auh-dc1"
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == f"{STORE_CREDENTIALS_DIR}/credentials"
    assert env["AWS_CA_BUNDLE"].startswith("/etc/mlplat/ca/")
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(env)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["store"]["secret"]["secretName"] == "object-store"
    assert volumes["ca"]["configMap"]["name"] == customer_objects(PLAN)[0]["metadata"]["name"]
    assert customer_objects(PLAN)[0]["data"]["ca.crt"] == STORE.ca_bundle
    assert [c["topologyKey"] for c in pod["topologySpreadConstraints"]] == ["kubernetes.io/hostname"]
    [triton] = pod["containers"]
    assert not any(e["name"].startswith("AWS_") for e in triton["env"])  # Triton reads only its local copy


def test_egress_reaches_the_store_alone_and_the_aws_service_is_as_before():
    names = [p["metadata"]["name"] for p in network_policies(PLAN)]
    assert names == ["default-deny", "allow-dns", "allow-object-store", "allow-gateway", "allow-prometheus"]
    [store] = [p for p in network_policies(PLAN) if p["metadata"]["name"] == "allow-object-store"]
    assert store["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": "10.40.8.0/27"}}],
                                        "ports": [{"protocol": "TCP", "port": 8443}]}]
    assert [p["metadata"]["name"] for p in network_policies(AWS)] == [
        "default-deny", "allow-dns", "allow-aws-endpoints", "allow-pod-identity", "allow-gateway", "allow-prometheus"]
    assert customer_objects(AWS) == [] and ZONE_KEY in str(pod_spec(AWS)["topologySpreadConstraints"])
    assert [o["kind"] for o in objects(PLAN)].count("ConfigMap") == 1


def test_the_objects_are_valid_kubernetes():
    import kubernetes_validate

    from infra.versions import KUBERNETES_VERSION

    for obj in objects(PLAN):
        if obj["kind"] != "PodMonitor":  # a CRD: the render checks judge it against its schema
            kubernetes_validate.validate(obj, f"{KUBERNETES_VERSION}.0", strict=True)
