"""Training on a customer's cluster is tracked (docs/onprem.md): the trainer's pods (and every
framework's) get their tenant's MLflow password and the object store's keys from the
customer's Secrets in the tenant's namespace, the tracking server's in-cluster URI, the
store's https endpoint and its CA; the collective check gets no Secret. Pure specs: the plan
`infra/training.py cluster_plan` makes from the onprem stack's descriptor, rendered."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest

from components.specs.cluster import CA_CONFIG_MAP, CA_DIR, CA_FILE
from components.tracking_spec import SERVER_URI
from components.training_spec import (
    LAUNCHER,
    TRAINER,
    TrainingPlan,
    collectives_jobset,
    job_of,
    training_config_maps,
    training_jobset,
)
from infra.descriptor import CustomerClusterDescriptor, environment_settings
from infra.training import (
    TENANT_TRACKING_CREDENTIALS,
    TENANT_TRACKING_KEY,
    TRAINING_STORE_CREDENTIALS,
    cluster_plan,
)
from infra.training_plan import resolve_training
from infra.versions import KUBERNETES_VERSION
from tests.conftest import customer_descriptor

STACK = "onprem"
REPO = Path(__file__).resolve().parents[2]
BUILT = {"training": "0.1.0@sha256:" + "0" * 64, "checks": "0.1.0@sha256:" + "1" * 64}


@pytest.fixture(scope="module")
def descriptor() -> CustomerClusterDescriptor:
    found = customer_descriptor(STACK)
    assert isinstance(found, CustomerClusterDescriptor)
    return found


@pytest.fixture(scope="module")
def config():
    return environment_settings(STACK)


@pytest.fixture(scope="module")
def plan(config, descriptor) -> TrainingPlan:
    job = resolve_training(config)
    assert job is not None
    return cluster_plan(config, descriptor, job, BUILT)


def pods(jobset: dict) -> dict[str, dict]:
    return {r["name"]: r["template"]["spec"]["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]}


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


def assert_tracked(pod: dict, container: dict, plan: TrainingPlan, descriptor: CustomerClusterDescriptor) -> None:
    """What a pod that runs the tenant's work needs to track its run and store checkpoints."""
    env = env_of(container)
    store = descriptor.object_storage
    assert env["MLFLOW_TRACKING_PASSWORD"] == {"name": "MLFLOW_TRACKING_PASSWORD", "valueFrom": {"secretKeyRef": {
        "name": TENANT_TRACKING_CREDENTIALS, "key": TENANT_TRACKING_KEY}}}
    plain = {name: e.get("value") for name, e in env.items()}
    assert plain["MLFLOW_TRACKING_URI"] == SERVER_URI
    assert plain["MLFLOW_TRACKING_USERNAME"] == plan.namespace
    assert plain["MLPLAT_CHECKPOINT_UPLOAD"] == f"s3://{descriptor.buckets['checkpoints']}/runs/research"
    # The policy pack's object-store-endpoints-allowed: an allowed https endpoint beside s3://.
    allowed = json.loads((REPO / "policies" / "config" / "onprem.json").read_text())
    assert plain["AWS_ENDPOINT_URL_S3"] == store.endpoint and store.endpoint.startswith("https://")
    assert store.endpoint in json.dumps(allowed)
    assert (plain["AWS_REGION"], plain["AWS_DEFAULT_REGION"]) == (store.region, store.region)
    assert plain["AWS_CA_BUNDLE"] == CA_FILE
    # Nothing secret in plain values; the store's keys are a mounted file, never variables.
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLPLAT_TRACKING_SECRET_ARN"} & set(env)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    credentials = plain["AWS_SHARED_CREDENTIALS_FILE"]
    directory, key = credentials.rsplit("/", 1)
    store_volume = volumes[mounts[directory]["name"]]["secret"]
    # Training's own keys, not the feature store's (objectStorage.credentialsSecret, narrower).
    assert store_volume["secretName"] == TRAINING_STORE_CREDENTIALS != store.credentials_secret
    assert store_volume["items"] == [{"key": key, "path": key}] and mounts[directory]["readOnly"]
    assert volumes[mounts[CA_DIR]["name"]] == {"name": "ca", "configMap": {"name": CA_CONFIG_MAP}}


def test_the_trainer_reads_its_tenants_secrets_and_the_customers_store(plan, descriptor):
    trainer = pods(training_jobset(plan))[TRAINER]
    [container] = trainer["containers"]
    assert_tracked(trainer, container, plan, descriptor)
    # The CA the mount reads: the descriptor's, in the tenant's namespace.
    [ca] = [c for c in training_config_maps(plan) if c["metadata"]["name"] == CA_CONFIG_MAP]
    assert ca["metadata"]["namespace"] == plan.namespace
    assert ca["data"] == {"ca.crt": descriptor.object_storage.ca_bundle}
    kubernetes_validate.validate(job_of(training_jobset(plan)), f"{KUBERNETES_VERSION}.0", strict=True)
    kubernetes_validate.validate(ca, f"{KUBERNETES_VERSION}.0", strict=True)


@pytest.mark.parametrize(("framework", "nodes"), [("deepspeed", 2), ("tensorflow", 2), ("horovod", 2),
                                                  ("horovod", 1)])
def test_every_frameworks_pods_get_the_same_credentials(plan, descriptor, framework, nodes):
    user = replace(plan, framework=framework, command=("python", "train.py"), nodes=nodes, min_nodes=nodes,
                   user_image="harbor.dc1.example.ae/research/own@sha256:" + "d" * 64, train_args=())
    jobset = training_jobset(user)
    for name, pod in pods(jobset).items():
        [container] = pod["containers"]
        assert_tracked(pod, container, user, descriptor)
        if name == LAUNCHER:  # mpirun hands the password on to the ranks it starts over SSH
            assert ["-x", "MLFLOW_TRACKING_PASSWORD"] in [container["command"][i:i + 2]
                                                          for i in range(len(container["command"]))]
    for i in range(len(jobset["spec"]["replicatedJobs"])):
        kubernetes_validate.validate(job_of(jobset, i), f"{KUBERNETES_VERSION}.0", strict=True)


def test_the_collective_check_gets_no_secret(plan):
    [check] = pods(collectives_jobset(plan)).values()
    [container] = check["containers"]
    assert all("valueFrom" not in e for e in container["env"])
    assert not [v for v in check["volumes"] if "secret" in v]


@pytest.mark.parametrize("off", ["tracking-disabled", "no-postgres"])
def test_without_the_tracking_server_the_run_is_not_tracked(config, descriptor, off):
    job = resolve_training(config)
    if off == "tracking-disabled":
        config = config.model_copy(update={"tracking": config.tracking.model_copy(update={"enabled": False})})
    else:
        descriptor = descriptor.model_copy(update={"services": descriptor.services.model_copy(
            update={"postgres": None})})
    untracked = cluster_plan(config, descriptor, job, BUILT)
    assert (untracked.tracking_env, untracked.tracking_secret_env, untracked.secret_files,
            untracked.ca_bundle) == ((), (), (), "")
    trainer = pods(training_jobset(untracked))[TRAINER]
    assert all("valueFrom" not in e for e in trainer["containers"][0]["env"])
    assert training_config_maps(untracked) == []
