"""The environment's pipeline engines (docs/pipelines.md): `mlplat:pipelines` turned into,
per tenant named there, the engine's and the steps' Pod Identity roles in the cloud layer
(the database role and its secret are the tracking server's: infra/tracking.py), and the
tenant's Airflow in the cluster layer (components/pipelines_spec.py)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.objects import create
from components.addons.volumes import SCRATCH_CLAIM, SHARED_SCRATCH_CLAIM
from components.features_spec import tenant_statements as feature_statements
from components.iam import PodIdentityRole, PodIdentityRoleArgs
from components.pipelines_spec import (
    ENGINE_ACCOUNT,
    CanaryAccess,
    STEPS_ACCOUNT,
    CustomerDatabase,
    EnginePlan,
    engine_objects,
    engine_role_name,
    engine_statements,
    repository_statements,
    steps_role_name,
)
from components.tracking_spec import tenant_statements as tracking_statements
from components.training_spec import GPU_RESOURCE
from components.training_spec import s3_statements as run_statements
from infra.config import ConfigError, PlatformConfig
from infra.descriptor import ClusterDescriptor, CustomerClusterDescriptor
from infra.versions import image_ref, image_uri


def publishing_tenant(config: PlatformConfig) -> str | None:
    """The pipeline tenant whose golden path publishes the stack's served model (its params
    name that model), or None."""
    from infra.inference_plan import resolve_inference

    serving = resolve_inference(config)
    if serving is None:
        return None
    return next((t for t, p in config.pipelines.tenants.items()
                 if p.get("serving", {}).get("model_name") == serving.settings.model_name), None)


def pipeline_identities(config: PlatformConfig, prefix: str, account_id: str, cluster_name: pulumi.Input[str],
                        storage: Any, keys: dict[str, aws.kms.Key], tracking: Any, store: Any,
                        aws_provider: aws.Provider) -> dict[str, tuple[PodIdentityRole, PodIdentityRole]]:
    """Per pipeline tenant: the engine's role (its database secret) and the steps' role: the
    tenant's feature prefix and online-store user (materialize, dataset), its datasets and
    runs (tokens, train, evaluate), its tracking user, and the served model's repository
    when its pipeline publishes that model."""
    if tracking is None or store is None:
        return {}
    from infra.inference_plan import resolve_inference

    publisher = publishing_tenant(config)
    serving = resolve_inference(config)
    buckets = storage.buckets
    roles = {}
    opts = pulumi.ResourceOptions(providers={"aws": aws_provider})
    for tenant in config.pipelines.tenants:
        engine = pulumi.Output.all(tracking.pipeline_secrets[tenant].arn, keys["tracking"].arn).apply(
            lambda a: engine_statements(a[0], a[1], config.region))
        steps = pulumi.Output.all(
            buckets["datasets"].bucket.arn, buckets["checkpoints"].bucket.arn, buckets["models"].bucket.arn,
            keys["datasets"].arn, keys["checkpoints"].arn, keys["models"].arn, keys["tracking"].arn,
            store.group.arn, store.users[tenant].arn, tracking.secrets[tenant].arn,
        ).apply(lambda a, t=tenant: [
            *feature_statements(datasets_arn=a[0], datasets_key_arn=a[3], replication_group_arn=a[7],
                                user_arn=a[8], tenant=t),
            *run_statements(a[0], a[1], t, read_key_arns=[a[3]], write_key_arns=[a[4]]),
            *tracking_statements(a[9], a[6], config.region),
            *(repository_statements(a[2], a[5], serving.settings.repository_prefix)
              if t == publisher and serving is not None else []),
        ])
        roles[tenant] = tuple(
            PodIdentityRole(f"pipelines-{tenant}-{who}", PodIdentityRoleArgs(
                role_name=name, account_id=account_id, namespace=tenant, service_account=account,
                cluster_name=cluster_name, statements=statements), opts=opts)
            for who, name, account, statements in (
                ("engine", engine_role_name(prefix, tenant), ENGINE_ACCOUNT, engine),
                ("steps", steps_role_name(prefix, tenant), STEPS_ACCOUNT, steps)))
    return roles


def _feature_plan(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                  built: dict[str, str], tenant: str):
    from infra.features import project_plans

    return next((p for p in project_plans(config, descriptor, built) if p.tenant == tenant), None)


def with_buckets(value: Any, buckets: dict[str, str]) -> Any:
    """The parameters with `{datasets}`, `{checkpoints}` and `{models}` in their strings
    replaced by the environment's bucket names (known to the descriptor, not the stack file)."""
    if isinstance(value, dict):
        return {k: with_buckets(v, buckets) for k, v in value.items()}
    if isinstance(value, list):
        return [with_buckets(v, buckets) for v in value]
    if isinstance(value, str):
        for purpose in ("datasets", "checkpoints", "models"):
            value = value.replace(f"{{{purpose}}}", buckets.get(purpose, f"{{{purpose}}}"))
    return value


def _train_jobset(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                  built: dict[str, str], tenant: str) -> dict[str, Any] | None:
    """The train step's JobSet by the self-service path: the tenant's own one-node job."""
    from infra.jobs import render, tenant_data

    data = tenant_data(config, descriptor, built, next(t for t in config.tenants if t.name == tenant))
    if data is None:
        return None
    jobset = render(data, tenant, "golden-path", {"nodes": 1})[-1]
    main = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    gpus = int(main["resources"]["limits"].get(GPU_RESOURCE, 0))
    nproc = config.pipelines.tenants[tenant].get("training", {}).get("nproc", 1)
    if isinstance(nproc, int) and nproc > gpus:
        raise ConfigError(f"pipelines.tenants.{tenant}.training.nproc: {nproc} processes, but the train step runs "
                          f"on one node of {gpus} GPUs; use at most {gpus}")
    return jobset


def canary_target(config: PlatformConfig, tenant: str, params: dict[str, Any],
                  buckets: dict[str, str]) -> CanaryAccess | None:
    """What the tenant's canary step may read: the stack's served Rollout, when its golden path
    publishes that model, into the repository the stack serves from, with `serving.canary`;
    a canary of anything else is refused by name. `params` has its buckets filled in."""
    from components.inference_spec import SERVICE_ACCOUNT, repository_uri
    from infra.inference_plan import resolve_inference
    from workloads.pipeline.params import Params

    parsed = Params.model_validate(params)
    canary = parsed.serving.canary
    if canary is None:
        return None
    where = f"pipelines.tenants.{tenant}.serving.canary"
    serving = resolve_inference(config)
    if serving is None or publishing_tenant(config) != tenant:
        served = "no model" if serving is None else f"{serving.settings.model_name!r}"
        raise ConfigError(f"{where}: this stack serves {served}, not the pipeline's serving.model_name; a canary "
                          "goes through the Rollout of the model the stack serves")
    if canary.stack != config.environment:
        raise ConfigError(f"{where}: stack {canary.stack!r} is not this environment's ({config.environment!r}): "
                          "the canary changes the served version of the stack whose Rollout it reads")
    if (canary.namespace, canary.rollout) != (serving.settings.namespace, SERVICE_ACCOUNT):
        raise ConfigError(f"{where}: {canary.namespace}/{canary.rollout} is not the served Rollout "
                          f"{serving.settings.namespace}/{SERVICE_ACCOUNT}")
    served_from = repository_uri(buckets.get("models", "{models}"), serving.settings.repository_prefix)
    if parsed.serving.repository.rstrip("/") != served_from:
        raise ConfigError(f"pipelines.tenants.{tenant}.serving.repository: {parsed.serving.repository} is not the "
                          f"repository the stack serves from ({served_from}); a canary of a version exported "
                          "elsewhere would serve another model under its number")
    return CanaryAccess(serving.settings.namespace, SERVICE_ACCOUNT)


def engine_plans(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                 built: dict[str, str]) -> list[EnginePlan]:
    p = config.pipelines
    if not p.tenants:
        return []
    pool = config.service_pool(p.pool, "pipelines")
    plans = []
    for tenant, params in p.tenants.items():
        where = f"pipelines.tenants.{tenant}"
        filled = with_buckets({"tenant": tenant, **params}, dict(descriptor.buckets))
        common = dict(tenant=tenant, gid=config.tenant_group(tenant), params=filled,
                      instance_types=(pool.instance_type,), features=_feature_plan(config, descriptor, built, tenant),
                      schedule=p.schedule, min_interval_h=p.min_interval_hours,
                      train_jobset=_train_jobset(config, descriptor, built, tenant),
                      canary=canary_target(config, tenant, filled, dict(descriptor.buckets)))
        if isinstance(descriptor, CustomerClusterDescriptor):
            postgres, cluster = descriptor.services.postgres, descriptor.cluster
            if postgres is None or postgres.pipelines_dsn_secret is None:
                raise ConfigError(f"{where}: the descriptor's services.postgres.pipelinesDsnSecret names no Secret "
                                  "with the tenant's engine database DSN (docs/onprem.md)")
            if not cluster.api_server_cidrs:
                raise ConfigError(f"{where}: the descriptor's cluster.apiServerCidrs is empty; the engine submits "
                                  "its steps to the API server, which its egress policy must name")
            if descriptor.storage_classes.shared is None:
                raise ConfigError(f"{where}: the steps share files through the tenant's scratch; the descriptor "
                                  "names no storageClasses.shared")
            store = descriptor.object_storage
            plans.append(EnginePlan(
                **common, image=image_ref("pipelines", descriptor.registry_host, config.environment, built),
                training_image=image_ref("training", descriptor.registry_host, config.environment, built),
                scratch_claim=SHARED_SCRATCH_CLAIM, region=store.region,
                customer=CustomerDatabase(
                    dsn_secret=postgres.pipelines_dsn_secret.name, dsn_key=postgres.pipelines_dsn_secret.key,
                    cidrs=tuple(postgres.cidrs), port=postgres.port, api_server_cidrs=tuple(cluster.api_server_cidrs),
                    api_server_port=cluster.api_server_port, store_endpoint=store.endpoint,
                    store_region=store.region, ca_bundle=store.ca_bundle)))
            continue
        t = descriptor.tracking
        if t is None or tenant not in t.pipeline_secret_arns:
            raise ConfigError(f"{where}: the cloud layer has no engine database secret for {tenant!r}; run the "
                              "cloud layer's `pulumi up` with this pipelines setting first")
        if descriptor.lustre is None:
            raise ConfigError(f"{where}: the steps share files through the tenant's Lustre scratch; set "
                              "storage.lustre.enabled: true")
        plans.append(EnginePlan(
            **common, image=image_uri("pipelines", descriptor.account_id, config.region, config.environment, built),
            training_image=image_uri("training", descriptor.account_id, config.region, config.environment, built),
            scratch_claim=SCRATCH_CLAIM, region=config.region, db_host=t.db_host,
            db_secret_arn=t.pipeline_secret_arns[tenant], tracking_secret_arn=t.tenant_secret_arns[tenant],
            vpc_cidr=config.network.vpc_cidr))
    return plans


def build_pipeline_engines(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                           services: Any, tracking: Any, k8s_provider: k8s.Provider,
                           built: dict[str, str]) -> list[pulumi.Resource]:
    """Each tenant's engine, after the tracking server (which makes its database) and the
    add-ons (Kueue's queues, JobSet); fences before anything that runs."""
    made = []
    after = [services.addons, *([tracking] if tracking is not None else [])]
    for plan in engine_plans(config, descriptor, built):
        objects = engine_objects(plan)
        fences = sum(1 for o in objects if o["kind"] in ("NetworkPolicy", "ServiceAccount", "Role", "RoleBinding",
                                                         "ConfigMap"))
        opts = pulumi.ResourceOptions(provider=k8s_provider, depends_on=after)
        first = [create(o, opts) for o in objects[:fences]]
        migrate = create(objects[fences], pulumi.ResourceOptions(provider=k8s_provider, depends_on=[*after, *first]))
        run = pulumi.ResourceOptions(provider=k8s_provider, depends_on=[*after, *first, migrate])
        made += [*first, migrate, *(create(o, run) for o in objects[fences + 1:])]
    return made
