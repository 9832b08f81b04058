"""Self-service training jobs: a tenant renders the platform's JobSet for a run of its own and
submits it, as many as it likes, with no stack change (`mlplat job render|submit`,
docs/training.md).

The cluster layer writes two things into each namespace of a tenant with a GPU quota:
- the `trainer` service account (no API token). On AWS its Pod Identity role (the cloud
  layer's `trainer_identities`) reads the tenant's datasets, reads and writes its runs, and
  reads its tracking user, as the stack's own training role does;
- the ConfigMap `training-jobs`: for each GPU pool the tenant may use, the plan the stack's
  job would get there (the images by digest, the fabric, the scratch claim, the tracking
  environment, the GPU checks), and the settings a job is checked against (those pools, the
  tenant and its cohort, whether Lustre is there).

A job is a file of the `mlplat:training` keys (name and tenant come from the command line).
It is checked as the stack's own job is (infra/training_plan.py resolve_training: the pool,
the quota with the cohort, the parallel layout at every node count) and rendered by the
same code (components/training_spec.py), so it gets the tenant's queue, its group, its
fabric, its tracking user and the preflight checks, and nothing a tenant could not ask of
the API server itself: the namespace's admission policies and quota still judge it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from components.fabric_spec import NodeFabric
from components.training_spec import SecretFile, TrainingPlan, training_config_maps, training_jobset
from infra.catalog import Gpu, InstanceType

CONFIG_MAP = "training-jobs"
TRAINER_ACCOUNT = "trainer"
DATA_KEY = "jobs.json"
JOB_FILE_LIMIT = 1 << 20
_TUPLES = ("train_args", "command")
_PAIRS = ("tracking_env", "tracking_secret_env")


class JobError(ValueError):
    """A job the platform would not run, or a cluster that has no template: one line, exit 2."""


# --- plans as data: written by the cluster layer, read back by the command line -----------------


def plan_data(plan: TrainingPlan) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(plan)))


def plan_from_data(data: dict[str, Any]) -> TrainingPlan:
    values = dict(data)
    instance = dict(values["instance"])
    instance["gpu"] = Gpu(**instance["gpu"]) if instance.get("gpu") else None
    values["instance"] = InstanceType(**instance)
    values["fabric"] = NodeFabric(**values["fabric"]) if values.get("fabric") else None
    values["secret_files"] = tuple(SecretFile(**f) for f in values.get("secret_files") or ())
    for name in _TUPLES:
        values[name] = tuple(values.get(name) or ())
    for name in _PAIRS:
        values[name] = tuple(tuple(p) for p in values.get(name) or ())
    known = {f.name for f in fields(TrainingPlan)}
    return TrainingPlan(**{k: v for k, v in values.items() if k in known})


# --- the cluster layer's half ---------------------------------------------------------------


def tenant_data(config: Any, descriptor: Any, built: Any, tenant: Any) -> dict[str, Any] | None:
    """What the tenant's `training-jobs` ConfigMap holds; None for a tenant with no GPU pool."""
    from infra.training import cluster_plan, self_service_jobs

    plans = {job.pool.name: plan_data(replace(cluster_plan(config, descriptor, job, built),
                                              service_account=TRAINER_ACCOUNT))
             for job in self_service_jobs(config, tenant)}
    if not plans:
        return None
    cohort = [t for t in config.tenants if t.name == tenant.name or (tenant.cohort and t.cohort == tenant.cohort)]
    return {
        "tenant": tenant.name, "lustre": bool(config.storage.lustre.enabled),
        "pools": [p.model_dump(mode="json", by_alias=True) for p in config.node_pools if p.name in plans],
        "tenants": [t.model_dump(mode="json", by_alias=True) for t in cohort],
        "plans": plans,
    }


def tenant_objects(config: Any, descriptor: Any, built: Any) -> list[dict[str, Any]]:
    """Per tenant with a GPU quota: its `trainer` service account and its `training-jobs`
    ConfigMap (one plan per GPU pool it may use); on a customer's cluster the customer's CA
    too, which the jobs mount, unless the stack's own job has put it there."""
    from components.specs.cluster import ca_config_map
    from infra.training_plan import resolve_training

    objects = []
    stack_job = resolve_training(config)
    for tenant in config.tenants:
        data = tenant_data(config, descriptor, built, tenant)
        if data is None:
            continue
        meta = {"namespace": tenant.name, "labels": {"app.kubernetes.io/part-of": "mlplat"}}
        objects += [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": TRAINER_ACCOUNT, **meta},
             "automountServiceAccountToken": False},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, **meta},
             "data": {DATA_KEY: json.dumps(data, indent=1, sort_keys=True)}},
        ]
        ca = next(iter(data["plans"].values()))["ca_bundle"]
        if ca and (stack_job is None or stack_job.tenant.name != tenant.name):
            objects.append(ca_config_map(tenant.name, ca))
    return objects


# --- the command line's half ----------------------------------------------------------------


def read_job(path: str) -> dict[str, Any]:
    """A job file: a mapping of `mlplat:training` keys, bounded and checked as any user file."""
    from workloads import inputs

    try:
        text = inputs.read_text(path, "job file", JOB_FILE_LIMIT)
        data = inputs.load_yaml(text, inputs.shown(path), string_keys=True)
    except inputs.InputError as err:
        raise JobError(str(err)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise JobError(f"{inputs.shown(path)}: a job is a mapping of mlplat:training keys (model, nodes, maxSteps, "
                       "...)")
    for key in ("name", "tenant", "enabled"):
        if key in data:
            raise JobError(f"{inputs.shown(path)}: {key}: given on the command line (--name, --tenant), not in the "
                           "job file")
    return data


def render(data: dict[str, Any], tenant: str, name: str, job: dict[str, Any], where: str = "job") \
        -> list[dict[str, Any]]:
    """The objects of one job (the JobSet last) from a `training-jobs` ConfigMap's data."""
    from pydantic import ValidationError

    from infra import catalog
    from infra.config import NodePoolConfig, TenantConfig, TrainingConfig
    from infra.training import with_settings
    from infra.training_plan import TrainingConfigError, resolve_training

    if data.get("tenant") != tenant:
        raise JobError(f"the {CONFIG_MAP} ConfigMap is tenant {data.get('tenant')!r}'s, not {tenant!r}'s")
    plans = {pool: plan_from_data(plan) for pool, plan in data["plans"].items()}
    for plan in plans.values():
        if plan.instance.customer_node_class:
            try:
                catalog.register_node_class(plan.instance)  # a customer's node class, as its descriptor states it
            except catalog.NodeClassError as err:
                raise JobError(str(err)) from None
    try:
        settings = TrainingConfig.model_validate({**job, "name": name, "tenant": tenant, "enabled": True})
    except ValidationError as err:
        first = err.errors()[0]
        raise JobError(f"{where}: {'.'.join(str(p) for p in first['loc']) or name}: "
                       f"{first['msg'].removeprefix('Value error, ')}") from None
    environment = SimpleNamespace(
        training=settings, node_pools=tuple(NodePoolConfig.model_validate(p) for p in data["pools"]),
        tenants=tuple(TenantConfig.model_validate(t) for t in data["tenants"]),
        storage=SimpleNamespace(lustre=SimpleNamespace(enabled=data["lustre"])))
    try:
        resolved = resolve_training(environment)
    except TrainingConfigError as err:
        raise JobError(f"{where}: {err.key}: {err}") from None
    if resolved is None:
        raise JobError(f"tenant {tenant!r} has no GPU pool to train on")
    base = plans[resolved.pool.name]
    experiment = f"{tenant}/{name}"
    plan = replace(base, name=name, nodes=resolved.nodes, min_nodes=resolved.min_nodes,
                   min_busbw_gbps=resolved.min_busbw_gbps,
                   tracking_env=tuple((k, experiment if k == "MLPLAT_EXPERIMENT" else v) for k, v in base.tracking_env))
    plan = with_settings(plan, settings, resolved.global_batch, base.image.split("/", 1)[0])
    return [*training_config_maps(plan), training_jobset(plan)]


def read_config_map(tenant: str, context: str | None = None) -> dict[str, Any]:
    """The tenant's `training-jobs` data, read with the caller's own kubeconfig."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    config.load_kube_config(context=context)
    try:
        found = client.CoreV1Api().read_namespaced_config_map(CONFIG_MAP, tenant)
    except ApiException as err:
        if err.status == 404:
            raise JobError(f"namespace {tenant!r} has no {CONFIG_MAP} ConfigMap: the tenant has no GPU quota, or "
                           "the cluster layer predates self-service jobs") from None
        raise JobError(f"reading {tenant}/{CONFIG_MAP}: {err.status} {err.reason}") from None
    return json.loads(found.data[DATA_KEY])


def submit(objects: list[dict[str, Any]], tenant: str, context: str | None = None) -> str:
    """Create the job's objects; the JobSet's name. A ConfigMap that exists (the customer's
    CA, shared by the tenant's jobs) is left as it is; a JobSet that exists is refused."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    config.load_kube_config(context=context)
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    *maps, jobset = objects
    for item in maps:
        try:
            core.create_namespaced_config_map(tenant, item)
        except ApiException as err:
            if err.status != 409:
                raise JobError(f"creating ConfigMap {tenant}/{item['metadata']['name']}: {err.status} "
                               f"{err.reason}") from None
    group, version = jobset["apiVersion"].split("/")
    try:
        custom.create_namespaced_custom_object(group, version, tenant, "jobsets", jobset)
    except ApiException as err:
        if err.status == 409:
            raise JobError(f"a job named {jobset['metadata']['name']!r} exists in {tenant}; pick another --name, or "
                           f"delete it (kubectl delete jobset -n {tenant} {jobset['metadata']['name']})") from None
        reason = json.loads(err.body).get("message", err.reason) if err.body else err.reason
        raise JobError(f"the API server refused the job: {reason}") from None
    return jobset["metadata"]["name"]


def load_data(path: str) -> dict[str, Any]:
    """A `training-jobs` ConfigMap saved as JSON or YAML (`kubectl get configmap -o yaml`),
    or its `jobs.json` alone, for rendering without a cluster."""
    from workloads import inputs

    try:
        loaded = inputs.load_yaml(inputs.read_text(path, "ConfigMap file", 16 << 20), inputs.shown(path),
                                  string_keys=True)
    except inputs.InputError as err:
        raise JobError(str(err)) from None
    if isinstance(loaded, dict) and isinstance(loaded.get("data"), dict) and DATA_KEY in loaded["data"]:
        loaded = json.loads(loaded["data"][DATA_KEY])
    if not isinstance(loaded, dict) or not isinstance(loaded.get("plans"), dict):
        raise JobError(f"{inputs.shown(Path(path))}: not a {CONFIG_MAP} ConfigMap (kubectl get configmap -n <tenant> "
                       f"{CONFIG_MAP} -o yaml)")
    return loaded


def build_self_service(config: Any, descriptor: Any, services: Any, k8s_provider: Any, built: Any) -> list[Any]:
    """The cluster layer's objects, after the tenants' namespaces and the add-ons."""
    import pulumi

    from components.addons.objects import create

    opts = pulumi.ResourceOptions(provider=k8s_provider, depends_on=[services.addons])
    return [create(o, opts) for o in tenant_objects(config, descriptor, built)]
