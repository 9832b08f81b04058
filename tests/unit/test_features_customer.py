"""The feature store on a customer's cluster (docs/onprem.md), as plain data: each tenant's
project on the customer's Redis (TLS against its CA, the tenant's user, the password from
the customer's Secret as a mounted file) and its S3-compatible store (the endpoint on every
container, the keys as a file), fenced to those services' CIDRs; the AWS project unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from components.features_spec import (
    CUSTOMER_CA_FILE,
    ONLINE_STORE_TYPE,
    PASSWORD_STORE_TYPE,
    REDIS_PASSWORD_FILE,
    CustomerFeatureStores,
    ProjectPlan,
    config_map,
    deployment,
    feature_store_yaml,
    materialize_job,
    network_policy,
    project_objects,
    service,
)
from workloads.features.repo import FeatureInputError, Tenant, check_config

STORES = CustomerFeatureStores(redis_port=6380, password_secret="feature-store-redis", password_key="password",
                               redis_cidrs=("10.40.9.16/28",), endpoint="https://s3.dc1.example.ae:8443",
                               credentials_secret="object-store", store_cidrs=("10.40.8.0/27",),
                               ca_bundle="-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
AWS = ProjectPlan(tenant="research", project="research", image="img", datasets_bucket="datasets",
                  redis_host="master.example.cache.amazonaws.com", replication_group_id="mlplat-prod-features",
                  user="mlplat-prod-features-research", region="me-central-1", vpc_cidr="10.0.0.0/16",
                  instance_types=("m7i.large",), replicas=2, materialize_every_minutes=60)
PLAN = replace(AWS, redis_host="redis.dc1.example.ae", replication_group_id="", region="ae-auh-dc1", vpc_cidr="",
               user="mlplat-onprem-features-research", customer=STORES)


def _containers(manifest: dict) -> list[dict]:
    spec = manifest["spec"]
    pod = (spec["jobTemplate"]["spec"] if manifest["kind"] == "CronJob" else spec)["template"]["spec"]
    return pod["containers"]


def test_the_online_store_is_the_customers_redis_with_the_password_from_a_file():
    online = feature_store_yaml(PLAN)["online_store"]
    assert online["type"] == PASSWORD_STORE_TYPE
    assert online["connection_string"] == f"redis.dc1.example.ae:6380,ssl=true,ssl_ca_certs={CUSTOMER_CA_FILE}"
    assert (online["user"], online["password_file"]) == ("mlplat-onprem-features-research", REDIS_PASSWORD_FILE)
    assert "password" not in online["connection_string"]
    # What the pods check before Feast reads it (workloads/features/repo.py).
    check_config(feature_store_yaml(PLAN), Tenant("research", "research", "datasets"), "feature_store.yaml")
    assert feature_store_yaml(AWS)["online_store"]["type"] == ONLINE_STORE_TYPE


def test_a_config_without_tls_is_refused_in_the_pod():
    data = feature_store_yaml(PLAN)
    data["online_store"]["connection_string"] = "redis.dc1.example.ae:6380"
    with pytest.raises(FeatureInputError, match="ssl=true"):
        check_config(data, Tenant("research", "research", "datasets"), "feature_store.yaml")


@pytest.mark.parametrize("make", [deployment, materialize_job])
def test_every_container_names_the_customers_store_its_ca_and_mounted_credentials(make):
    manifest = make(PLAN)
    [container] = _containers(manifest)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["AWS_ENDPOINT_URL_S3"] == env["FEAST_S3_ENDPOINT_URL"] == STORES.endpoint
    assert env["AWS_CA_BUNDLE"] == CUSTOMER_CA_FILE
    assert not any(k in env for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "REDIS_PASSWORD"))
    pod = (manifest["spec"]["jobTemplate"]["spec"] if make is materialize_job else manifest["spec"])["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["redis"]["secret"] == {"secretName": "feature-store-redis", "defaultMode": 0o440,
                                          "items": [{"key": "password", "path": "password"}]}
    assert volumes["store"]["secret"]["secretName"] == "object-store"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert all(mounts[n]["readOnly"] for n in ("redis", "store", "ca"))
    assert env["AWS_SHARED_CREDENTIALS_FILE"].startswith(mounts["store"]["mountPath"] + "/")


def test_the_server_is_in_cluster_only_and_egress_reaches_redis_and_the_store_alone():
    assert service(PLAN)["spec"]["type"] == "ClusterIP"
    egress = network_policy(PLAN)["spec"]["egress"]
    allowed = {(b["ipBlock"]["cidr"], p["port"]) for rule in egress for b in rule["to"] for p in rule["ports"]}
    assert allowed == {("10.40.9.16/28", 6380), ("10.40.8.0/27", 8443)}


def test_the_first_deploy_does_not_wait_for_the_customers_secrets_but_the_aws_project_is_as_before():
    assert deployment(PLAN)["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    assert service(PLAN)["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    objects = project_objects(AWS)
    assert [o["kind"] for o in objects] == ["NetworkPolicy", "ServiceAccount", "ConfigMap", "Deployment", "Service",
                                            "PodDisruptionBudget", "CronJob", "PodMonitor"]
    assert not any("annotations" in o["metadata"] for o in objects)
    assert [o["metadata"]["name"] for o in project_objects(PLAN)][:4] == [
        "allow-feature-store", "feature-store", "feature-store", "feature-store-ca"]
    assert "ca_certs" not in yaml.safe_load(config_map(AWS)["data"]["feature_store.yaml"])["online_store"][
        "connection_string"]


def test_the_objects_are_valid_kubernetes():
    import kubernetes_validate

    from infra.versions import KUBERNETES_VERSION

    for obj in project_objects(PLAN):
        if obj["kind"] != "PodMonitor":  # a CRD: the render checks judge it against its schema
            kubernetes_validate.validate(obj, f"{KUBERNETES_VERSION}.0", strict=True)
