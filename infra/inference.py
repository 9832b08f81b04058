"""The environment's inference service: `mlplat:inference` (resolved by
infra/inference_plan.py) turned into its Pod Identity role in the cloud layer and an
`InferenceService` in the cluster layer, wired after the cluster services."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.plan import chart_mirror
from components.addons.values import mirror_image
from components.iam import PodIdentityRole, PodIdentityRoleArgs
from components.inference import InferenceService, InferenceServiceArgs, MetricsAdapter, RolloutControllers
from components.inference_spec import (
    SERVICE_ACCOUNT,
    CustomerModelStore,
    LoadBalancerPlan,
    ServingPlan,
    repository_uri,
    s3_statements,
    source_cidrs,
)
from components.inference_spec import role_name as serving_role
from components.drift_spec import DriftPlan, drift_name, logs_uri
from components.lustre_spec import DATASETS_PATH
from components.training_spec import SCRATCH_MOUNT
from components.drift_spec import role_name as drift_role
from components.drift_spec import s3_statements as drift_statements
from components.request_log_spec import NAME as LOGGER
from components.request_log_spec import RequestLogPlan
from components.request_log_spec import role_name as log_role
from components.request_log_spec import s3_statements as log_statements
from components.rollout_spec import AbortRule, AuthPlan, RolloutPlan
from infra.config import PlatformConfig
from infra.descriptor import ClusterDescriptor, CustomerClusterDescriptor
from components.tracking_spec import SERVER_URI as TRACKING_URI
from components.tracking_spec import tenant_statements as tracking_statements
from infra.inference_plan import ResolvedInference, drift_tenant, resolve_inference
from infra.versions import image_ref, image_uri


def serving_plan(config: PlatformConfig, job: ResolvedInference, account_id: str, models_bucket: str,
                 endpoint_cidrs: tuple[str, ...] = ()) -> ServingPlan:
    s = job.settings
    balancer = s.load_balancer
    return ServingPlan(
        namespace=s.namespace,
        model=s.model_name,
        device=s.device,
        pool=job.pool.name,
        image=image_uri("tritonserver", account_id, config.region, config.environment),
        fetch_image=image_uri("aws-cli", account_id, config.region, config.environment),
        model_repository=repository_uri(models_bucket, s.repository_prefix),
        region=config.region,
        cpu=job.cpu,
        memory_gi=job.memory_gi,
        gpus=job.gpus,
        repository_gi=job.repository_gi,
        min_replicas=s.min_replicas,
        max_replicas=s.max_replicas,
        target_queue_us=s.target_queue_microseconds,
        target_cpu_percent=s.target_cpu_percent,
        vpc_cidr=config.network.vpc_cidr,
        endpoint_cidrs=endpoint_cidrs,
        load_balancer=LoadBalancerPlan(balancer.certificate_arn, source_cidrs(balancer.allowed_cidrs,
                                                                                config.network.vpc_cidr))
        if balancer.enabled else None,
        version=s.version,
    )


def rollout_plan(serving: ServingPlan, settings: Any, request_log: RequestLogPlan | None = None) -> RolloutPlan:
    """How the stack's `rollout` and `auth` settings shape the rollout and the gateway."""
    rollout, auth, abort = settings.rollout, settings.auth, settings.rollout.abort
    ab = rollout.strategy == "ab"
    return RolloutPlan(
        serving=serving,
        steps=(rollout.weights["canary"],) if ab else tuple(rollout.steps),
        step_minutes=rollout.step_minutes,
        hold_last_step=ab,
        abort=AbortRule(error_ratio=abort.error_ratio, error_floor=abort.error_floor, p99_ratio=abort.p99_ratio,
                        window_minutes=abort.window_minutes,
                        min_requests_per_second=abort.min_requests_per_second),
        auth=AuthPlan(issuer=auth.issuer, audiences=tuple(auth.audiences), jwks_uri=auth.jwks_uri,
                      tenant_claim=auth.tenant_claim, tenants=tuple(auth.tenants)) if auth else None,
        request_log=request_log,
    )


def rollout_controllers(config: PlatformConfig, account_id: str, platform_images: Any) -> RolloutControllers:
    env, region = config.environment, config.region
    return RolloutControllers(
        envoy_gateway=mirror_image("envoy-gateway", account_id, region, env),
        envoy=image_uri("envoy", account_id, region, env),
        pushgateway=image_uri("pushgateway", account_id, region, env),
        argo_rollouts=mirror_image("argo-rollouts", account_id, region, env),
        plugin=image_uri("rollouts-gatewayapi-plugin", account_id, region, env, platform_images),
        chart_mirror=chart_mirror(config.addons.chart_mirror, account_id, region, env),
    )


def metrics_adapter(config: PlatformConfig, job: ResolvedInference, account_id: str) -> MetricsAdapter:
    image = mirror_image("prometheus-adapter", account_id, config.region, config.environment)
    return MetricsAdapter(
        image_repository=image.full_repository,
        image_tag=image.tag,
        # CPU replicas scale on CPU use: EKS has no metrics-server, the adapter serves it.
        resource_metrics=job.device == "cpu",
        chart_mirror=chart_mirror(config.addons.chart_mirror, account_id, config.region, config.environment),
    )


def serving_identity(
    config: PlatformConfig,
    prefix: str,
    account_id: str,
    cluster_name: pulumi.Input[str],
    storage: Any,  # infra.storage.Storage
    keys: dict[str, aws.kms.Key],
    aws_provider: aws.Provider,
) -> PodIdentityRole | None:
    """The cloud layer's half of serving: the Pod Identity role Triton's service account
    gets, reading (and, for the publish step's pods, nothing more than) the model
    repository."""
    job = resolve_inference(config)
    if job is None:
        return None
    s = job.settings
    statements = pulumi.Output.all(storage.buckets["models"].bucket.arn, keys["models"].arn).apply(
        lambda a: s3_statements(a[0], s.repository_prefix, a[1]))
    # Named, and at the stack's root, as a stack made before the layers split holds it
    # once migrated (docs/layers.md).
    return PodIdentityRole(
        f"inference-{s.model_name}-identity",
        PodIdentityRoleArgs(
            role_name=serving_role(prefix, s.model_name), account_id=account_id, namespace=s.namespace,
            service_account=SERVICE_ACCOUNT, cluster_name=cluster_name,
            statements=statements,
        ),
        opts=pulumi.ResourceOptions(providers={"aws": aws_provider}),
    )


def request_log_identity(
    config: PlatformConfig,
    prefix: str,
    account_id: str,
    cluster_name: pulumi.Input[str],
    storage: Any,  # infra.storage.Storage
    keys: dict[str, aws.kms.Key],
    aws_provider: aws.Provider,
) -> PodIdentityRole | None:
    """The request logger's role: write its model's request logs, encrypt with the
    datasets key; nothing else (the datasets bucket lets no one else at that prefix)."""
    job = resolve_inference(config)
    if job is None or not job.settings.request_logging.enabled:
        return None
    s = job.settings
    statements = pulumi.Output.all(storage.buckets["datasets"].bucket.arn, keys["datasets"].arn).apply(
        lambda a: log_statements(a[0], s.model_name, a[1]))
    return PodIdentityRole(
        f"inference-{s.model_name}-requests",
        PodIdentityRoleArgs(
            role_name=log_role(prefix, s.model_name), account_id=account_id, namespace=s.namespace,
            service_account=LOGGER, cluster_name=cluster_name, statements=statements,
        ),
        opts=pulumi.ResourceOptions(providers={"aws": aws_provider}),
    )


def drift_identity(
    config: PlatformConfig,
    prefix: str,
    account_id: str,
    cluster_name: pulumi.Input[str],
    storage: Any,  # infra.storage.Storage
    keys: dict[str, aws.kms.Key],
    aws_provider: aws.Provider,
    tracking: Any = None,  # components.tracking.TrackingDatabase
) -> PodIdentityRole | None:
    """The drift check's role: read its tenant's datasets (the reference) and the model's
    request logs, and its tenant's tracking user (to follow the lineage). Assumed from the
    serving namespace, where the check runs and no tenant may run a pod."""
    job = resolve_inference(config)
    tenant = drift_tenant(job.settings) if job is not None else None
    if tenant is None or tracking is None:
        return None
    s = job.settings
    statements = pulumi.Output.all(storage.buckets["datasets"].bucket.arn, keys["datasets"].arn,
                                   tracking.secrets[tenant].arn, keys["tracking"].arn).apply(
        lambda a: drift_statements(a[0], a[1], tenant, s.model_name) + tracking_statements(a[2], a[3], config.region))
    return PodIdentityRole(
        f"inference-{s.model_name}-drift",
        PodIdentityRoleArgs(
            role_name=drift_role(prefix, tenant, s.model_name), account_id=account_id, namespace=s.namespace,
            service_account=drift_name(s.model_name),
            cluster_name=cluster_name, statements=statements,
        ),
        opts=pulumi.ResourceOptions(providers={"aws": aws_provider}),
    )


def drift_plan(config: PlatformConfig, settings: Any, descriptor: ClusterDescriptor,
               platform_images: dict[str, str] | None) -> DriftPlan | None:
    tenant = drift_tenant(settings)
    if tenant is None or descriptor.tracking is None:
        return None
    drift = settings.drift
    return DriftPlan(
        model=settings.model_name, version=settings.version, registered_model=drift.registered_model, tenant=tenant,
        namespace=settings.namespace,
        image=image_uri("serving", descriptor.account_id, config.region, config.environment, platform_images),
        logs=logs_uri(descriptor.buckets["datasets"], settings.model_name), region=config.region,
        aws_cidrs=(config.network.vpc_cidr, *(c for c in descriptor.endpoint_cidrs if c != config.network.vpc_cidr)),
        every_hours=drift.every_hours, days=drift.days, min_rows=drift.min_rows,
        # The tenant's own datasets directory mirrors its own prefix (components/lustre_spec.py).
        lustre_datasets=(f"{SCRATCH_MOUNT}{DATASETS_PATH}/", f"s3://{descriptor.buckets['datasets']}/{tenant}/")
        if descriptor.lustre is not None else None,
        tracking_env=(("MLFLOW_TRACKING_URI", TRACKING_URI), ("MLFLOW_TRACKING_USERNAME", tenant),
                      ("MLPLAT_TRACKING_SECRET_ARN", descriptor.tracking.tenant_secret_arns[tenant])),
    )


def request_log_plan(config: PlatformConfig, serving: ServingPlan, settings: Any, descriptor: ClusterDescriptor,
                     platform_images: dict[str, str] | None) -> RequestLogPlan | None:
    logging = settings.request_logging
    if not logging.enabled:
        return None
    return RequestLogPlan(
        serving=serving,
        image=image_uri("serving", descriptor.account_id, config.region, config.environment, platform_images),
        bucket=descriptor.buckets["datasets"], kms_key_arn=descriptor.keys["datasets"],
        sample_percent=logging.sample_percent, fields=tuple(sorted(logging.fields.items())),
        allow_personal=logging.allow_personal, log_outputs=logging.log_outputs,
    )


def customer_serving_plan(config: PlatformConfig, job: ResolvedInference,
                          descriptor: CustomerClusterDescriptor) -> ServingPlan:
    """On a customer's cluster: the images from its registry, the model repository on its
    object store (the customer's Secret in the serving namespace, its CA), no load balancer
    (the gateway is reached in-cluster; the descriptor's settings refuse one)."""
    s = job.settings
    store = descriptor.object_storage
    registry, env = descriptor.registry_host, config.environment
    return ServingPlan(
        namespace=s.namespace, model=s.model_name, device=s.device, pool=job.pool.name,
        image=image_ref("tritonserver", registry, env), fetch_image=image_ref("aws-cli", registry, env),
        model_repository=repository_uri(descriptor.buckets["models"], s.repository_prefix), region=store.region,
        cpu=job.cpu, memory_gi=job.memory_gi, gpus=job.gpus, repository_gi=job.repository_gi,
        min_replicas=s.min_replicas, max_replicas=s.max_replicas, target_queue_us=s.target_queue_microseconds,
        target_cpu_percent=s.target_cpu_percent, vpc_cidr="", version=s.version,
        customer=CustomerModelStore(endpoint=store.endpoint, region=store.region,
                                    credentials_secret=store.credentials_secret, cidrs=tuple(store.cidrs),
                                    ca_bundle=store.ca_bundle),
    )


def customer_controllers(config: PlatformConfig, descriptor: CustomerClusterDescriptor,
                         platform_images: Any) -> RolloutControllers:
    registry, env, region = descriptor.registry_host, config.environment, config.region
    return RolloutControllers(
        envoy_gateway=mirror_image("envoy-gateway", "", region, env, registry),
        envoy=image_ref("envoy", registry, env),
        pushgateway=image_ref("pushgateway", registry, env),
        argo_rollouts=mirror_image("argo-rollouts", "", region, env, registry),
        plugin=image_ref("rollouts-gatewayapi-plugin", registry, env, platform_images),
        chart_mirror=descriptor.chart_mirror,
    )


def build_customer_inference(config: PlatformConfig, descriptor: CustomerClusterDescriptor, services: Any,
                             k8s_provider: k8s.Provider,
                             platform_images: dict[str, str] | None = None) -> InferenceService | None:
    """Serving on a customer's cluster: Triton, the gateway, Argo Rollouts and the
    autoscaler as on AWS; request logging and the drift check are refused by the
    descriptor's settings (infra/descriptor.py) until they are built here."""
    job = resolve_inference(config)
    if job is None:
        return None
    plan = customer_serving_plan(config, job, descriptor)
    registry = descriptor.registry_host
    image = mirror_image("prometheus-adapter", "", config.region, config.environment, registry)
    return InferenceService(
        f"inference-{plan.model}",
        InferenceServiceArgs(
            plan=rollout_plan(plan, job.settings),
            controllers=customer_controllers(config, descriptor, platform_images),
            drift=None,
            adapter=MetricsAdapter(image_repository=image.full_repository, image_tag=image.tag,
                                   resource_metrics=job.device == "cpu", chart_mirror=descriptor.chart_mirror),
            depends_on=(services.addons,),
        ),
        opts=pulumi.ResourceOptions(providers={"kubernetes": k8s_provider}),
    )


def build_inference(
    config: PlatformConfig,
    descriptor: ClusterDescriptor,
    services: Any,  # infra.cluster_services.ClusterServices
    k8s_provider: k8s.Provider,
    platform_images: dict[str, str] | None = None,  # mlplat:platformImages, as CI recorded them
) -> InferenceService | None:
    """The cluster layer's half: Triton, what serves and scales it, and the gateway and
    controllers that roll it out."""
    job = resolve_inference(config)
    if job is None:
        return None
    drift = drift_plan(config, job.settings, descriptor, platform_images)
    plan = serving_plan(config, job, descriptor.account_id, descriptor.buckets["models"],
                        tuple(c for c in descriptor.endpoint_cidrs if c != config.network.vpc_cidr))
    return InferenceService(
        f"inference-{plan.model}",
        InferenceServiceArgs(
            plan=rollout_plan(plan, job.settings, request_log_plan(config, plan, job.settings, descriptor,
                                                                   platform_images)),
            controllers=rollout_controllers(config, descriptor.account_id, platform_images),
            drift=drift,
            adapter=metrics_adapter(config, job, descriptor.account_id),
            # The Prometheus stack (PodMonitor CRD, the adapter's source) and the device plugins.
            depends_on=(services.addons,),
        ),
        opts=pulumi.ResourceOptions(providers={"kubernetes": k8s_provider}),
    )
