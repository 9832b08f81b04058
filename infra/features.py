"""The environment's Feast feature store: `mlplat:features` turned into the online store
and each tenant's Pod Identity role in the cloud layer, and into each tenant's project
(server, materialization CronJob) plus the freshness alerts in the cluster layer."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.objects import create
from components.features import FeatureOnlineStore, FeatureOnlineStoreArgs, FeatureProject, FeatureProjectArgs
from components.features_spec import (
    SERVICE_ACCOUNT,
    CustomerFeatureStores,
    ProjectPlan,
    cache_plan,
    freshness_rules,
    role_name,
    tenant_statements,
    user_id,
)
from components.iam import PodIdentityRole, PodIdentityRoleArgs
from infra.config import PROJECT, PlatformConfig
from infra.descriptor import ClusterDescriptor, CustomerClusterDescriptor
from infra.versions import image_ref, image_uri


def build_online_store(config: PlatformConfig, prefix: str, compute: Any, keys: dict[str, aws.kms.Key],
                       aws_opts: pulumi.ResourceOptions) -> FeatureOnlineStore | None:
    projects = config.feature_projects
    if not projects:
        return None
    config.service_pool(config.features.pool, "features")  # nowhere to run the servers stops here
    plan = cache_plan(prefix, config.features, config.storage.log_retention_days, projects)
    network = compute.network
    return FeatureOnlineStore("features", FeatureOnlineStoreArgs(
        plan=plan,
        subnet_ids=[s.id for s in network.subnets.values()], vpc_id=network.vpc.id,
        client_security_group_id=compute.cluster.cluster_security_group_id,
        key_arn=keys["features"].arn, logs_key_arn=keys["logs"].arn,
    ), opts=aws_opts)


def feature_identities(config: PlatformConfig, prefix: str, account_id: str, cluster_name: pulumi.Input[str],
                       storage: Any, keys: dict[str, aws.kms.Key], store: FeatureOnlineStore | None,
                       aws_provider: aws.Provider) -> dict[str, PodIdentityRole]:
    """Each tenant's role for its project's ServiceAccount: its own prefix, its own user."""
    if store is None:
        return {}
    roles = {}
    for tenant, user in store.users.items():
        statements = pulumi.Output.all(
            storage.buckets["datasets"].bucket.arn, keys["datasets"].arn, store.group.arn, user.arn,
        ).apply(lambda a, t=tenant: tenant_statements(datasets_arn=a[0], datasets_key_arn=a[1],
                                                      replication_group_arn=a[2], user_arn=a[3], tenant=t))
        roles[tenant] = PodIdentityRole(f"features-{tenant}-identity", PodIdentityRoleArgs(
            role_name=role_name(prefix, tenant), account_id=account_id, namespace=tenant,
            service_account=SERVICE_ACCOUNT, cluster_name=cluster_name, statements=statements,
        ), opts=pulumi.ResourceOptions(providers={"aws": aws_provider}))
    return roles


def features_output(store: FeatureOnlineStore | None) -> pulumi.Output[dict[str, Any]] | None:
    """The descriptor's `features`: the endpoint, and each tenant's user and project."""
    if store is None:
        return None
    plan = store.plan
    return pulumi.Output.all(host=store.group.primary_endpoint_address, group=store.group.replication_group_id).apply(
        lambda v: {"host": v["host"], "replicationGroupId": v["group"], "users": dict(plan.users),
                   "projects": dict(plan.projects)})


def customer_project_plans(config: PlatformConfig, descriptor: CustomerClusterDescriptor,
                           built: dict[str, str]) -> list[ProjectPlan]:
    """On a customer's cluster: its Redis (services.redis; each tenant's user is
    `mlplat-<environment>-features-<tenant>`, its password in the customer's Secret) and its
    object store (the datasets bucket, its endpoint and CA)."""
    redis = descriptor.services.redis
    if redis is None or not config.feature_projects:
        return []
    pool = config.service_pool(config.features.pool, "features")
    store = descriptor.object_storage
    stores = CustomerFeatureStores(
        redis_port=redis.port, password_secret=redis.password_secret.name, password_key=redis.password_secret.key,
        redis_cidrs=tuple(redis.cidrs), endpoint=store.endpoint, credentials_secret=store.credentials_secret,
        store_cidrs=tuple(store.cidrs), ca_bundle=store.ca_bundle)
    image = image_ref("features", descriptor.registry_host, config.environment, built)
    prefix = f"{PROJECT}-{config.environment}"
    return [
        ProjectPlan(tenant=tenant, project=project, image=image, datasets_bucket=descriptor.buckets["datasets"],
                    redis_host=redis.host, replication_group_id="", user=user_id(prefix, tenant),
                    region=store.region, vpc_cidr="", instance_types=(pool.instance_type,),
                    replicas=config.features.server_replicas,
                    materialize_every_minutes=config.features.materialize_every_minutes, customer=stores,
                    gid=config.tenant_group(tenant))
        for tenant, project in config.feature_projects.items()
    ]


def project_plans(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                  built: dict[str, str]) -> list[ProjectPlan]:
    if isinstance(descriptor, CustomerClusterDescriptor):
        return customer_project_plans(config, descriptor, built)
    f = descriptor.features
    if f is None or not config.feature_projects:
        return []
    pool = config.service_pool(config.features.pool, "features")
    image = image_uri("features", descriptor.account_id, config.region, config.environment, built)
    return [
        ProjectPlan(tenant=tenant, project=f.projects[tenant], image=image,
                    datasets_bucket=descriptor.buckets["datasets"], redis_host=f.host,
                    replication_group_id=f.replication_group_id, user=f.users[tenant], region=config.region,
                    vpc_cidr=config.network.vpc_cidr, instance_types=(pool.instance_type,),
                    replicas=config.features.server_replicas,
                    materialize_every_minutes=config.features.materialize_every_minutes,
                    gid=config.tenant_group(tenant))
        for tenant in config.feature_projects if tenant in f.users
    ]


def build_feature_projects(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                           services: Any,
                           k8s_provider: k8s.Provider, built: dict[str, str]) -> list[FeatureProject]:
    plans = project_plans(config, descriptor, built)
    if not plans:
        return []
    opts = pulumi.ResourceOptions(providers={"kubernetes": k8s_provider})
    projects = []
    for plan in plans:
        namespace = services.tenancy.namespaces.get(plan.tenant)
        depends = (*([namespace] if namespace is not None else []), *services.addons.workload_dependencies)
        projects.append(FeatureProject(f"features-{plan.tenant}", FeatureProjectArgs(plan, depends), opts=opts))
    # The PrometheusRule is the Prometheus stack's CRD: it exists once the stack is in.
    create(freshness_rules(config.features.late_after), pulumi.ResourceOptions(
        provider=k8s_provider, depends_on=list(services.addons.workload_dependencies)))
    return projects
