"""The environment's MLflow tracking server: `mlplat:tracking` turned into its database,
secrets and Pod Identity role in the cloud layer and a `TrackingServer` in the cluster
layer. Tenants reach it at `SERVER_URI` as their own user (workloads/tracking)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.drift_spec import pod_labels
from components.iam import PodIdentityRole, PodIdentityRoleArgs
from components.tracking import TrackingDatabase, TrackingDatabaseArgs, TrackingServer, TrackingServerArgs
from components.tracking_spec import (
    ARTIFACTS_PREFIX,
    NAMESPACE,
    SERVICE_ACCOUNT,
    CustomerStores,
    DatabasePlan,
    ServerPlan,
    role_name,
    secret_names,
    server_statements,
)
from infra.config import NodePoolConfig, PlatformConfig
from infra.descriptor import ClusterDescriptor, CustomerClusterDescriptor
from infra.inference_plan import drift_tenant, resolve_inference
from infra.versions import image_ref, image_uri


def tracking_pool(config: PlatformConfig) -> NodePoolConfig:
    return config.service_pool(config.tracking.pool, "tracking")


def build_tracking_database(config: PlatformConfig, prefix: str, compute: Any, keys: dict[str, aws.kms.Key],
                            aws_opts: pulumi.ResourceOptions) -> TrackingDatabase | None:
    if not config.tracking.enabled:
        return None
    tracking_pool(config)  # a stack with nowhere to run the server stops here
    t = config.tracking
    plan = DatabasePlan(identifier=f"{prefix}-tracking", instance_class=t.instance_class, storage_gib=t.storage_gib,
                        max_storage_gib=t.max_storage_gib, multi_az=t.multi_az, backup_days=t.backup_days,
                        log_retention_days=config.storage.log_retention_days)
    network = compute.network
    return TrackingDatabase("tracking", TrackingDatabaseArgs(
        plan=plan, subnet_ids=[s.id for s in network.subnets.values()], vpc_id=network.vpc.id,
        client_security_group_id=compute.cluster.cluster_security_group_id, key_arn=keys["tracking"].arn,
        logs_key_arn=keys["logs"].arn, secret_names=secret_names(prefix, tuple(x.name for x in config.tenants),
                                                              tuple(config.pipelines.tenants)),
    ), opts=aws_opts)


def tracking_identity(prefix: str, account_id: str, cluster_name: pulumi.Input[str], storage: Any,
                      keys: dict[str, aws.kms.Key], database: TrackingDatabase,
                      aws_provider: aws.Provider) -> PodIdentityRole:
    """The server's role: artifacts in the models bucket, its secrets."""
    statements = pulumi.Output.all(
        storage.buckets["models"].bucket.arn, keys["models"].arn, keys["tracking"].arn, database.master_secret_arn,
        database.admin_secret.arn, *[s.arn for s in database.secrets.values()],
        *[s.arn for s in database.pipeline_secrets.values()],
    ).apply(lambda a: server_statements(a[0], a[1], a[2], a[3], list(a[4:])))
    return PodIdentityRole("tracking-identity", PodIdentityRoleArgs(
        role_name=role_name(prefix), account_id=account_id, namespace=NAMESPACE,
        service_account=SERVICE_ACCOUNT, cluster_name=cluster_name, statements=statements,
    ), opts=pulumi.ResourceOptions(providers={"aws": aws_provider}))


def tracking_output(database: TrackingDatabase | None) -> pulumi.Output[dict[str, Any]] | None:
    """The descriptor's `tracking`: where the database is and which secrets the server reads."""
    if database is None:
        return None
    return pulumi.Output.all(
        host=database.instance.address, master=database.master_secret_arn, admin=database.admin_secret.arn,
        tenants=pulumi.Output.all(**{tenant: s.arn for tenant, s in database.secrets.items()}),
        pipelines=pulumi.Output.all(**{tenant: s.arn for tenant, s in database.pipeline_secrets.items()}),
    ).apply(lambda v: {"dbHost": v["host"], "masterSecretArn": v["master"], "adminSecretArn": v["admin"],
                       "tenantSecretArns": dict(v["tenants"]), "pipelineSecretArns": dict(v["pipelines"])})


def customer_server_plan(config: PlatformConfig, descriptor: CustomerClusterDescriptor,
                         built: dict[str, str]) -> ServerPlan | None:
    """On a customer's cluster: its PostgreSQL (the DSN in its Secret) and its object store."""
    postgres = descriptor.services.postgres
    if postgres is None or not config.tracking.enabled:
        return None
    pool = tracking_pool(config)
    store = descriptor.object_storage
    return ServerPlan(
        image=image_ref("tracking", descriptor.registry_host, config.environment, built),
        replicas=config.tracking.replicas, instance_types=(pool.instance_type,),
        # No RDS host and no Secrets Manager secrets: the customer's Secrets, mounted (customer).
        **dict.fromkeys(("db_host", "master_secret_arn", "admin_secret_arn"), ""), tenant_secret_arns={},
        artifacts=f"s3://{descriptor.buckets['models']}/{ARTIFACTS_PREFIX}",
        region=store.region, vpc_cidr="", endpoint_cidrs=(), tenants=tuple(x.name for x in config.tenants),
        customer=CustomerStores(
            database_secret=postgres.dsn_secret.name, database_key=postgres.dsn_secret.key,
            database_port=postgres.port, database_cidrs=tuple(postgres.cidrs), endpoint=store.endpoint,
            region=store.region, credentials_secret=store.credentials_secret, store_cidrs=tuple(store.cidrs),
            ca_bundle=store.ca_bundle),
    )


def server_plan(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                built: dict[str, str]) -> ServerPlan | None:
    if isinstance(descriptor, CustomerClusterDescriptor):
        return customer_server_plan(config, descriptor, built)
    t = descriptor.tracking
    if t is None or not config.tracking.enabled:
        return None
    pool = tracking_pool(config)
    return ServerPlan(
        image=image_uri("tracking", descriptor.account_id, config.region, config.environment, built),
        replicas=config.tracking.replicas,
        instance_types=(pool.instance_type,),
        db_host=t.db_host, master_secret_arn=t.master_secret_arn, admin_secret_arn=t.admin_secret_arn,
        tenant_secret_arns=dict(t.tenant_secret_arns),
        pipeline_secret_arns={k: v for k, v in t.pipeline_secret_arns.items() if k in config.pipelines.tenants},
        artifacts=f"s3://{descriptor.buckets['models']}/{ARTIFACTS_PREFIX}",
        region=config.region, vpc_cidr=config.network.vpc_cidr,
        endpoint_cidrs=tuple(descriptor.endpoint_cidrs), tenants=tuple(x.name for x in config.tenants),
        monitors=drift_monitors(config),
    )


def drift_monitors(config: PlatformConfig) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """The drift check signs in as its model's tenant from the serving namespace."""
    job = resolve_inference(config)
    if job is None or drift_tenant(job.settings) is None:
        return ()
    return ((job.settings.namespace, tuple(pod_labels(job.settings.model_name).items())),)


def build_tracking_server(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                          services: Any,
                          k8s_provider: k8s.Provider, built: dict[str, str]) -> TrackingServer | None:
    plan = server_plan(config, descriptor, built)
    if plan is None:
        return None
    return TrackingServer("tracking", TrackingServerArgs(plan=plan, depends_on=(services.addons,)),
                          opts=pulumi.ResourceOptions(providers={"kubernetes": k8s_provider}))
