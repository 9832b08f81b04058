"""What a tenant's pipeline engine is made of, as plain data: Apache Airflow in the tenant's
namespace (docs/pipelines.md says why Airflow, and why one per tenant), and the templates of
the Jobs its tasks submit.

In the tenant's namespace, inside its default-deny, quota and Pod Security `restricted`:
- the API server (UI, REST API, and the execution API the tasks report to), the scheduler
  with the local executor, and the DAG processor: one Deployment each, in the `pipelines`
  image, run as `python -m workloads.pipeline engine <component>` (workloads/pipeline/engine.py);
- the migration Job, named after the Airflow version, so an upgrade runs `airflow db migrate`
  once before the new version's pods start, and a rerun of the same version does nothing;
- two service accounts: `pipeline-engine` (the Airflow pods; the only ones in the namespace
  with an API token, bound to a Role that may submit and watch Jobs and JobSets there and
  nothing else) and `pipeline-steps` (the steps' pods; no token; on AWS its Pod Identity
  role reaches the tenant's own prefixes, its tracking user and its online-store user);
- the tenant's golden-path parameters and the step templates, in one ConfigMap.

A task does not run its step in the scheduler: it submits the step's Job (the `train` step's
JobSet) from these templates, labelled with the tenant's Kueue queue, so every step waits
for the tenant's quota like any other job (workloads/pipeline/launch.py). Nothing here
imports Pulumi.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from typing import Any

import yaml

from components.addons.queues import LOCAL_QUEUE
from components.features_spec import CONFIG_DIR as FEAST_DIR
from components.features_spec import ProjectPlan
from components.features_spec import _pod_spec as feature_pod_spec
from components.specs.cluster import CA_KEY, ca_config_map
from components.training_spec import (
    CONTAINER_SECURITY,
    QUEUE_LABEL,
    SCRATCH_MOUNT,
    instance_type_affinity,
    tenant_pod_security,
)
from workloads.pipeline.launch import VERB_LABEL

AIRFLOW_VERSION = "3.3.2"  # the Makefile's PIPELINES_PINS and the pipelines image install this
ENGINE_ACCOUNT = "pipeline-engine"
STEPS_ACCOUNT = "pipeline-steps"
LAUNCHER_ROLE = "pipeline-launcher"
CONFIG_MAP = "golden-path"
CONFIG_DIR = "/etc/mlplat/pipeline"
PARAMS_FILE = f"{CONFIG_DIR}/params.yaml"
TEMPLATES_FILE = f"{CONFIG_DIR}/steps.json"
FEATURE_CONFIG = f"{FEAST_DIR}/feature_store.yaml"  # where the features steps read the tenant's
API_SERVER = "airflow-api-server"
SCHEDULER = "airflow-scheduler"
DAG_PROCESSOR = "airflow-dag-processor"
API_PORT = 8080
HEALTH_PORT = 8974  # the scheduler's health server
DB_PORT = 5432
CANARY_ROLE = "pipeline-canary"
# The canary step polls the API server: a quarter core and the MLflow client's memory.
CANARY_RESOURCES = {"cpu": "250m", "memory": "1Gi"}
ENGINE_LABEL = "mlplat.io/pipeline-engine"  # the Airflow pods: their egress to the database and API server
STEP_LABEL = "mlplat.io/pipeline-step"
LABELS = {"app.kubernetes.io/part-of": "mlplat-pipelines"}
DSN_DIR = "/etc/mlplat/pipeline-database"
# On a customer's cluster: the tenant's tracking password and object-store keys, in the
# customer's Secrets in the tenant's namespace (as the training job reads them).
TRACKING_SECRET = "mlflow-tracking"
TRACKING_SECRET_KEY = "password"
STORE_SECRET = "training-object-store"
STORE_CREDENTIALS_DIR = "/etc/mlplat/object-store"
STORE_CREDENTIALS_KEY = "credentials"
TRACKING_URI = "http://mlflow.mlflow.svc.cluster.local:5000"
# The customer's CA in the tenant's namespace, under a name of the engine's own (the
# training job's and the feature project's copies have theirs).
CA_CONFIG_MAP = "pipeline-ca"
CA_DIR = "/etc/mlplat/pipeline-ca"


@dataclass(frozen=True)
class CustomerDatabase:
    """On a customer's cluster: the tenant's Airflow database, its DSN in the customer's
    Secret in the tenant's namespace, at the customer's PostgreSQL addresses; the API
    server's addresses for the engine's calls; the object store and its CA for the steps."""

    dsn_secret: str
    dsn_key: str
    cidrs: tuple[str, ...]
    port: int
    api_server_cidrs: tuple[str, ...]
    api_server_port: int
    store_endpoint: str
    store_region: str
    ca_bundle: str


@dataclass(frozen=True)
class CanaryAccess:
    """The served model the tenant's golden path canaries (workloads/pipeline/canary.py):
    its canary step reads that Rollout and the Deployment it runs, nothing else."""

    namespace: str  # the serving namespace
    name: str  # the Rollout's and the Deployment's


@dataclass(frozen=True)
class EnginePlan:
    tenant: str
    gid: int
    image: str  # the pipelines image
    training_image: str
    params: dict[str, Any]  # the tenant's golden-path parameters, checked (infra/config.py)
    instance_types: tuple[str, ...]  # the engine's and the CPU steps' pool
    features: ProjectPlan | None  # the tenant's feature project: the features steps' pods
    scratch_claim: str  # the tenant's shared scratch, mounted at SCRATCH_MOUNT in every step
    region: str
    # On AWS: the tracking RDS instance, the tenant's database secret and tracking user's.
    db_host: str = ""
    db_secret_arn: str = ""
    tracking_secret_arn: str = ""
    vpc_cidr: str = ""
    schedule: str | None = None
    min_interval_h: float = 24.0
    # The tenant's own job for the train step (infra/jobs.py render: a node of its first GPU
    # pool, its checks, fabric and tracking user); None: a tenant with no GPU pool trains on CPU.
    train_jobset: dict[str, Any] | None = None
    step_cpu: str = "2"
    step_memory: str = "8Gi"
    customer: CustomerDatabase | None = None
    canary: CanaryAccess | None = None  # the tenant publishes the stack's served model, with a canary


def _meta(plan: EnginePlan, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": plan.tenant,
            "labels": {**LABELS, "app.kubernetes.io/name": name, **(labels or {})}}


def service_accounts(plan: EnginePlan) -> list[dict[str, Any]]:
    return [
        # The engine calls the API server (it submits the steps' Jobs): its token is mounted.
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(plan, ENGINE_ACCOUNT),
         "automountServiceAccountToken": True},
        # The steps talk to AWS (Pod Identity), MLflow and Redis, never to the API server.
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(plan, STEPS_ACCOUNT),
         "automountServiceAccountToken": False},
    ]


LAUNCHER_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]


def rbac(plan: EnginePlan) -> list[dict[str, Any]]:
    """The engine submits and watches its steps in its own namespace: no Secrets, no other
    namespace, no change to the fences (quota, policies, RBAC)."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(plan, LAUNCHER_ROLE),
         "rules": LAUNCHER_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(plan, LAUNCHER_ROLE),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": LAUNCHER_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": ENGINE_ACCOUNT, "namespace": plan.tenant}]},
    ]


def canary_access(plan: EnginePlan) -> list[dict[str, Any]]:
    """What the canary step reads: a Role in the serving namespace that may get the served
    Rollout and its Deployment by name (no list, no watch, no other object), bound to the
    steps' account; the canary step's pod alone mounts that account's token (step_templates).
    A pod of the tenant's own that asks for the token reads no more than those two objects,
    of the model its own pipeline publishes. On AWS the API server's private endpoint is in
    the VPC, which the tenant's pods reach on 443 already; on a customer's cluster the canary
    step's pods get the way to the API server the engine has."""
    if plan.canary is None:
        return []
    c = plan.canary
    name = f"{CANARY_ROLE}-{plan.tenant}"
    meta = {"name": name, "namespace": c.namespace, "labels": dict(LABELS)}
    made: list[dict[str, Any]] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": [
            {"apiGroups": ["argoproj.io"], "resources": ["rollouts"], "resourceNames": [c.name], "verbs": ["get"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [c.name], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": STEPS_ACCOUNT, "namespace": plan.tenant}]},
    ]
    if plan.customer is not None:
        made.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                     "metadata": {"name": CANARY_ROLE, "namespace": plan.tenant},
                     "spec": {"podSelector": {"matchLabels": {VERB_LABEL: "canary"}}, "policyTypes": ["Egress"],
                              "egress": [{"to": [{"ipBlock": {"cidr": x}} for x in plan.customer.api_server_cidrs],
                                          "ports": [{"protocol": "TCP", "port": plan.customer.api_server_port}]}]}})
    return made


def network_policy(plan: EnginePlan) -> dict[str, Any]:
    """The tenant's default-deny, extended for the Airflow pods alone: their database, and
    the API server. On AWS both are inside the VPC (RDS; EKS's private endpoint), and HTTPS
    into the VPC is the tenant's already (its endpoint policy); on a customer's cluster, the
    customer's PostgreSQL and API-server addresses. The API server's port is open to the
    tenant's own pods (its namespace policy), which are the tenant already."""
    if plan.customer is not None:
        c = plan.customer
        egress = [{"to": [{"ipBlock": {"cidr": x}} for x in c.cidrs], "ports": [{"protocol": "TCP", "port": c.port}]},
                  {"to": [{"ipBlock": {"cidr": x}} for x in c.api_server_cidrs],
                   "ports": [{"protocol": "TCP", "port": c.api_server_port}]}]
    else:
        egress = [{"to": [{"ipBlock": {"cidr": plan.vpc_cidr}}], "ports": [{"protocol": "TCP", "port": DB_PORT}]}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "allow-pipeline-engine", "namespace": plan.tenant},
            "spec": {"podSelector": {"matchLabels": {ENGINE_LABEL: "true"}}, "policyTypes": ["Egress"],
                     "egress": egress}}


# --- the steps' templates -----------------------------------------------------------------


def _with_pipeline(container: dict[str, Any], spec: dict[str, Any], env: dict[str, str]) -> None:
    """A step's container: `env` set (replacing what the pod had of those names), and the
    golden-path ConfigMap (its parameters) mounted."""
    container["env"] = [e for e in container.get("env", []) if e["name"] not in env] + \
        [{"name": k, "value": v} for k, v in env.items()]
    container["volumeMounts"] = [*container.get("volumeMounts", []),
                                 {"name": "pipeline", "mountPath": CONFIG_DIR, "readOnly": True}]
    spec["volumes"] = [*spec.get("volumes", []), {"name": "pipeline", "configMap": {"name": CONFIG_MAP}}]


def _tracking(plan: EnginePlan, container: dict[str, Any], spec: dict[str, Any]) -> None:
    """The step signs in to MLflow as its tenant: on AWS the password from its tracking
    secret with the steps' own role; on a customer's cluster from the customer's Secret."""
    env = {"MLFLOW_TRACKING_URI": TRACKING_URI, "MLFLOW_TRACKING_USERNAME": plan.tenant,
           "MLPLAT_TENANT": plan.tenant, "HOME": "/tmp", "MLPLAT_PIPELINE_PARAMS": PARAMS_FILE}
    if plan.customer is None:
        env["MLPLAT_TRACKING_SECRET_ARN"] = plan.tracking_secret_arn
    _with_pipeline(container, spec, env)
    if plan.customer is not None:
        container["env"].append({"name": "MLFLOW_TRACKING_PASSWORD", "valueFrom": {"secretKeyRef": {
            "name": TRACKING_SECRET, "key": TRACKING_SECRET_KEY}}})
    container["volumeMounts"].append({"name": "scratch", "mountPath": SCRATCH_MOUNT})
    spec["volumes"].append({"name": "scratch", "persistentVolumeClaim": {"claimName": plan.scratch_claim}})
    spec["serviceAccountName"] = STEPS_ACCOUNT
    spec["automountServiceAccountToken"] = False
    spec["restartPolicy"] = "Never"


def _job(plan: EnginePlan, image: str, spec: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    pod_labels = {**LABELS, **labels, STEP_LABEL: image}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"namespace": plan.tenant, "labels": {**pod_labels, QUEUE_LABEL: LOCAL_QUEUE}},
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 7 * 86400,
                     "template": {"metadata": {"labels": pod_labels}, "spec": spec}}}


def _training_pod(plan: EnginePlan) -> dict[str, Any]:
    env = {"AWS_REGION": plan.region, "AWS_DEFAULT_REGION": plan.region, "PYTHONDONTWRITEBYTECODE": "1"}
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    if plan.customer is not None:
        c = plan.customer
        env.update({"AWS_ENDPOINT_URL_S3": c.store_endpoint, "AWS_CA_BUNDLE": f"{CA_DIR}/{CA_KEY}",
                    "AWS_REGION": c.store_region, "AWS_DEFAULT_REGION": c.store_region,
                    "AWS_SHARED_CREDENTIALS_FILE": f"{STORE_CREDENTIALS_DIR}/{STORE_CREDENTIALS_KEY}"})
        volumes += [{"name": "store", "secret": {"secretName": STORE_SECRET, "defaultMode": 0o440, "items": [
                        {"key": STORE_CREDENTIALS_KEY, "path": STORE_CREDENTIALS_KEY}]}},
                    {"name": "ca", "configMap": {"name": CA_CONFIG_MAP}}]
        mounts += [{"name": "store", "mountPath": STORE_CREDENTIALS_DIR, "readOnly": True},
                   {"name": "ca", "mountPath": CA_DIR, "readOnly": True}]
    resources: dict[str, Any] = {"requests": {"cpu": plan.step_cpu, "memory": plan.step_memory},
                                 "limits": {"cpu": plan.step_cpu, "memory": plan.step_memory}}
    spec: dict[str, Any] = {
        "securityContext": tenant_pod_security(plan.gid),
        "affinity": instance_type_affinity(plan.instance_types),
        "containers": [{"name": "step", "image": plan.training_image, "imagePullPolicy": "IfNotPresent",
                        "command": ["python", "-m", "workloads.pipeline"],
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                        "resources": resources, "securityContext": CONTAINER_SECURITY, "volumeMounts": mounts}],
        "volumes": volumes,
    }
    _tracking(plan, spec["containers"][0], spec)
    return spec


def _canary_pod(plan: EnginePlan) -> dict[str, Any]:
    """The canary step: a training step's pod that mounts the steps' account token (it reads
    the Rollout: canary_access), with a small share of the tenant's quota, which it holds for
    as long as it waits on the rollout (serving.canary.wait_hours)."""
    spec = _training_pod(plan)
    spec["automountServiceAccountToken"] = True
    spec["containers"][0]["resources"] = {"requests": dict(CANARY_RESOURCES), "limits": dict(CANARY_RESOURCES)}
    return spec


def _train_jobset(plan: EnginePlan, job: dict[str, Any]) -> dict[str, Any]:
    """The tenant's own training JobSet (the self-service path: its GPUs, checks, fabric,
    queue and `trainer` identity), running the pipeline's train step in place of the trainer;
    the step starts the trainer under torchrun itself. No name: the launcher gives each its own."""
    made = copy.deepcopy(job)
    made["metadata"].pop("name", None)
    # Each run's JobSet names its own headless service (the step's torchrun is one node's).
    made["spec"].get("network", {}).pop("subdomain", None)
    for replicated in made["spec"]["replicatedJobs"]:
        spec = replicated["template"]["spec"]["template"]["spec"]
        main = spec["containers"][0]
        main["command"] = ["python", "-m", "workloads.pipeline"]
        main.pop("args", None)
        _with_pipeline(main, spec, {"MLPLAT_TENANT": plan.tenant, "MLPLAT_PIPELINE_PARAMS": PARAMS_FILE,
                                    "HOME": "/tmp"})
    return made


def _features_pod(plan: EnginePlan, project: ProjectPlan) -> dict[str, Any]:
    """The feature project's own pod (its feature_store.yaml, its Redis and store), running
    the pipeline's steps instead of Feast's CLI, with the steps' identity."""
    spec = feature_pod_spec(replace(project, cpu=plan.step_cpu, cpu_limit=plan.step_cpu, memory=plan.step_memory),
                            [], [], {}, "Never")
    [container] = spec["containers"]
    container["name"] = "step"
    container["command"] = ["python", "-m", "workloads.pipeline"]
    container.pop("args", None)
    container.pop("ports", None)
    _tracking(plan, container, spec)
    return spec


def step_templates(plan: EnginePlan) -> dict[str, dict[str, Any]]:
    """Per image, the Job a step of that image runs as (the launcher adds its name and its
    arguments); `train`: the JobSet the train step runs as: the tenant's own job on a node of
    its GPU pool where it has one (the path `mlplat job` takes), else on the CPU pool. Each is
    labelled with the tenant's Kueue queue."""
    from components.features_spec import ROLE_LABEL as FEATURE_STORE

    templates = {"training": _job(plan, "training", _training_pod(plan), {})}
    if plan.canary is not None:
        templates["canary"] = _job(plan, "training", _canary_pod(plan), {})
    if plan.features is not None:
        templates["features"] = _job(plan, "features", _features_pod(plan, plan.features), {FEATURE_STORE: "true"})
    if plan.train_jobset is not None:
        templates["train"] = _train_jobset(plan, plan.train_jobset)
        return templates
    trainer = _job(plan, "training", _training_pod(plan), {})
    templates["train"] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"namespace": plan.tenant, "labels": trainer["metadata"]["labels"]},
        "spec": {"failurePolicy": {"maxRestarts": 0},
                 "replicatedJobs": [{"name": "trainer", "replicas": 1,
                                     "template": {"spec": trainer["spec"]}}]},
    }
    return templates


def config_map(plan: EnginePlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(plan, CONFIG_MAP),
            "data": {"params.yaml": yaml.safe_dump(plan.params, sort_keys=False),
                     "steps.json": json.dumps(step_templates(plan), indent=1, sort_keys=True)}}


# --- the engine's pods ----------------------------------------------------------------------


def _engine_env(plan: EnginePlan) -> dict[str, str]:
    env = {"MLPLAT_TENANT": plan.tenant, "MLPLAT_PIPELINE_PARAMS": PARAMS_FILE,
           "MLPLAT_PIPELINE_LAUNCHER": "cluster", "MLPLAT_PIPELINE_TEMPLATES": TEMPLATES_FILE,
           "MLPLAT_PIPELINE_MIN_INTERVAL_H": f"{plan.min_interval_h:g}", "HOME": "/tmp",
           "AIRFLOW_HOME": "/tmp/airflow", "PYTHONDONTWRITEBYTECODE": "1"}
    if plan.schedule:
        env["MLPLAT_PIPELINE_SCHEDULE"] = plan.schedule
    if plan.customer is not None:
        env["MLPLAT_DB_DSN_FILE"] = f"{DSN_DIR}/dsn"
    else:
        env.update({"MLPLAT_DB_HOST": plan.db_host, "MLPLAT_DB_PORT": str(DB_PORT),
                    "MLPLAT_DB_CA_BUNDLE": "/etc/ssl/rds/global-bundle.pem",
                    "MLPLAT_PIPELINE_DB_SECRET_ARN": plan.db_secret_arn,
                    "AWS_REGION": plan.region, "AWS_DEFAULT_REGION": plan.region})
    return env


def _engine_pod(plan: EnginePlan, component: str, probes: dict[str, Any], ports: list[dict[str, Any]],
                cpu: str, memory: str, restart: str | None = None) -> dict[str, Any]:
    mounts = [{"name": "pipeline", "mountPath": CONFIG_DIR, "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "pipeline", "configMap": {"name": CONFIG_MAP}},
                                     {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}]
    if plan.customer is not None:
        c = plan.customer
        mounts += [{"name": "database", "mountPath": DSN_DIR, "readOnly": True},
                   {"name": "ca", "mountPath": CA_DIR, "readOnly": True}]
        volumes += [{"name": "database", "secret": {"secretName": c.dsn_secret, "defaultMode": 0o440,
                                                    "items": [{"key": c.dsn_key, "path": "dsn"}]}},
                    {"name": "ca", "configMap": {"name": CA_CONFIG_MAP}}]
    spec: dict[str, Any] = {
        "serviceAccountName": ENGINE_ACCOUNT,
        "automountServiceAccountToken": component == "scheduler",  # the only API caller
        "securityContext": tenant_pod_security(plan.gid),
        "affinity": instance_type_affinity(plan.instance_types),
        "containers": [{
            "name": "airflow", "image": plan.image, "imagePullPolicy": "IfNotPresent",
            "args": ["engine", component],
            "env": [{"name": k, "value": v} for k, v in _engine_env(plan).items()],
            "ports": ports, **probes,
            "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
            "securityContext": CONTAINER_SECURITY, "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    if restart:
        spec["restartPolicy"] = restart
    return spec


def _awaited(plan: EnginePlan, meta: dict[str, Any]) -> dict[str, Any]:
    """On a customer's cluster the first deploy does not wait for the engine: its database
    DSN is the customer's Secret in the tenant's namespace, made once this layer made it."""
    if plan.customer is not None:
        meta["annotations"] = {"pulumi.com/skipAwait": "true"}
    return meta


def migrate_job(plan: EnginePlan) -> dict[str, Any]:
    name = f"airflow-migrate-{AIRFLOW_VERSION.replace('.', '-')}"
    labels = {**LABELS, "app.kubernetes.io/name": "airflow-migrate", ENGINE_LABEL: "true"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _awaited(plan, _meta(plan, name, {QUEUE_LABEL: LOCAL_QUEUE})),
            "spec": {"backoffLimit": 6, "activeDeadlineSeconds": 1800,
                     "template": {"metadata": {"labels": labels},
                                  "spec": _engine_pod(plan, "migrate", {}, [], "1", "2Gi", "OnFailure")}}}


def _deployment(plan: EnginePlan, name: str, component: str, probes: dict[str, Any],
                ports: list[dict[str, Any]], cpu: str, memory: str) -> dict[str, Any]:
    labels = {**LABELS, "app.kubernetes.io/name": name, ENGINE_LABEL: "true"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _awaited(plan, _meta(plan, name)),
            # One of each: the scheduler's local executor runs the tasks, and a second
            # scheduler would need a second executor's worth of quota for nothing.
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                     "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": _engine_pod(plan, component, probes, ports, cpu, memory)}}}


def deployments(plan: EnginePlan) -> list[dict[str, Any]]:
    api = {"httpGet": {"path": "/api/v2/monitor/health", "port": "http"}, "periodSeconds": 15, "timeoutSeconds": 5}
    health = {"httpGet": {"path": "/health", "port": "health"}, "periodSeconds": 30, "timeoutSeconds": 5}
    # The DAG processor serves nothing: its heartbeat in the database, checked by Airflow.
    beating = {"exec": {"command": ["python", "-m", "workloads.pipeline", "engine", "check-dag-processor"]},
               "periodSeconds": 60, "timeoutSeconds": 30}
    return [
        _deployment(plan, API_SERVER, "api-server",
                    {"readinessProbe": api, "livenessProbe": {**api, "initialDelaySeconds": 60, "failureThreshold": 6}},
                    [{"name": "http", "containerPort": API_PORT}], "1", "2Gi"),
        _deployment(plan, SCHEDULER, "scheduler",
                    {"readinessProbe": health,
                     "livenessProbe": {**health, "initialDelaySeconds": 120, "failureThreshold": 5}},
                    [{"name": "health", "containerPort": HEALTH_PORT}], "1", "2Gi"),
        _deployment(plan, DAG_PROCESSOR, "dag-processor",
                    {"readinessProbe": {**beating, "initialDelaySeconds": 60},
                     "livenessProbe": {**beating, "initialDelaySeconds": 180, "failureThreshold": 5}},
                    [], "500m", "1Gi"),
    ]


def service(plan: EnginePlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _awaited(plan, _meta(plan, API_SERVER)),
            "spec": {"type": "ClusterIP", "selector": {"app.kubernetes.io/name": API_SERVER},
                     "ports": [{"name": "http", "port": API_PORT, "targetPort": "http"}]}}


def engine_objects(plan: EnginePlan) -> list[dict[str, Any]]:
    """Fences, identities and configuration first; then the migration; then the engine."""
    first = [network_policy(plan), *service_accounts(plan), *rbac(plan), *canary_access(plan), config_map(plan)]
    if plan.customer is not None:
        first.append(ca_config_map(plan.tenant, plan.customer.ca_bundle, name=CA_CONFIG_MAP))
    return [*first, migrate_job(plan), *deployments(plan), service(plan)]


# --- the cloud layer's half: the engine's and the steps' Pod Identity roles -----------------


def engine_role_name(prefix: str, tenant: str) -> str:
    return f"{prefix}-{tenant}-pipeline-engine"[:64]


def steps_role_name(prefix: str, tenant: str) -> str:
    return f"{prefix}-{tenant}-pipeline-steps"[:64]


def engine_statements(secret_arn: str, tracking_key_arn: str, region: str) -> list[dict[str, Any]]:
    """The engine reads its database secret (under the tracking key), and nothing else of AWS."""
    from components.tracking_spec import tenant_statements

    return tenant_statements(secret_arn, tracking_key_arn, region, what="DatabaseSecret")


def repository_statements(models_arn: str, models_key_arn: str, prefix: str) -> list[dict[str, Any]]:
    """The export step publishes the served model's repository (the tenant whose pipeline
    names the stack's served model, and no other)."""
    return [
        {"Sid": "ListRepository", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [models_arn],
         "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}}},
        {"Sid": "PublishRepository", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
         "Resource": [f"{models_arn}/{prefix}/*"]},
        {"Sid": "ModelsKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
         "Resource": [models_key_arn]},
    ]
