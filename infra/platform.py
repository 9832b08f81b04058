"""`build_platform`: wires the components of one stack, for the layer its config names.
The same function runs under the real engine (`pulumi up`) and under the offline
preview's mocks.

The cloud layer (stack `<env>`) holds every AWS resource and exports the cluster
descriptor; the cluster layer (stack `<env>-cluster`, infra/cluster_layer.py) holds every
Kubernetes object and reads the descriptor (docs/layers.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from components.cluster import Cluster
from components.deploy_runner import DeployRunner, DeployRunnerArgs
from components.iam import PodIdentityRole
from components.keys import PlatformKeys
from components.network import Network
from components.nodepool import GpuNodePool
from components.tenancy import TenantAccess
from components.features import FeatureOnlineStore
from components.tracking import TrackingDatabase
from infra.cluster_services import s3_prefix_list_cidrs, tenant_access
from infra.compute import build_compute
from infra.config import PROJECT, ClusterLayerConfig, LayerConfig, PlatformConfig, settings_for_descriptor
from infra.descriptor import OUTPUT as DESCRIPTOR_OUTPUT
from infra.descriptor import cluster_descriptor_output
from infra.inference import drift_identity, request_log_identity, serving_identity
from infra.preflight import preflight
from infra.storage import Storage, build_keys, build_storage, export_storage, lustre_output, storage_names
from infra.features import build_online_store, feature_identities, features_output
from infra.pipelines import pipeline_identities
from infra.tracking import build_tracking_database, tracking_identity, tracking_output
from infra.training import trainer_identities, training_identity
from infra.versions import registry_host


# One customer-managed key per class of data, so access to one class can be granted or
# revoked without touching the others (components/key_policy.py `data_class_uses` says
# which services use each, and why the log classes share one).
DATA_CLASSES = ("datasets", "models", "checkpoints", "logs", "cluster", "volumes", "images", "tracking", "features")


@dataclass(frozen=True)
class Platform:
    """The cloud layer."""

    aws_provider: aws.Provider
    account_id: str
    keys: PlatformKeys
    storage: Storage
    network: Network
    cluster: Cluster
    node_pools: dict[str, GpuNodePool]
    tenant_access: TenantAccess
    # The Pod Identity roles of the training job and of serving (None: the environment has none).
    training_identity: PodIdentityRole | None = None
    serving_identity: PodIdentityRole | None = None
    deploy_runner: DeployRunner | None = None  # None: the stack names no repository to deploy from
    tracking: TrackingDatabase | None = None  # the MLflow server's database and secrets
    tracking_identity: PodIdentityRole | None = None
    features: FeatureOnlineStore | None = None  # the feature store's online store and tenants' users
    feature_identities: dict[str, PodIdentityRole] = field(default_factory=dict)  # tenant -> role
    request_log_identity: PodIdentityRole | None = None  # the inference request logger's
    drift_identity: PodIdentityRole | None = None  # the served model's drift check's
    trainer_identities: dict[str, PodIdentityRole] = field(default_factory=dict)  # tenant -> self-service jobs' role
    # tenant -> its pipeline engine's role and its steps' role
    pipeline_identities: dict[str, tuple[PodIdentityRole, PodIdentityRole]] = field(default_factory=dict)


def region_provider(config: PlatformConfig) -> aws.Provider:
    """The one AWS provider: pinned to the stack's region, carrying the default tags.
    Default providers are disabled per stack, so a resource that forgets it fails."""
    return aws.Provider(
        f"aws-{config.region}",
        region=config.region,
        default_tags=aws.ProviderDefaultTagsArgs(tags=config.default_tags),
    )


def build_platform(config: LayerConfig) -> Any:
    """The layer the stack's config names: `Platform` for the cloud layer, `ClusterLayer`
    for the cluster layer."""
    if isinstance(config, ClusterLayerConfig):
        from infra.cluster_layer import build_cluster_layer

        return build_cluster_layer(config)
    return build_cloud_layer(config)


def build_cloud_layer(config: PlatformConfig) -> Platform:
    provider = region_provider(config)
    aws_opts = pulumi.ResourceOptions(providers={"aws": provider})
    invoke_opts = pulumi.InvokeOptions(provider=provider)
    account_id = aws.get_caller_identity(opts=invoke_opts).account_id
    prefix = f"{PROJECT}-{pulumi.get_stack()}"  # also the EKS cluster's name
    # Before any other resource: what the region, the account's quotas or the reservations
    # would refuse stops here (infra/preflight.py).
    zones_by_pool = preflight(config, invoke_opts)

    names = storage_names(config, pulumi.get_stack(), account_id)
    keys = build_keys(config, prefix, names, account_id, aws_opts)

    compute = build_compute(config, prefix, keys.keys, zones_by_pool, provider, account_id)
    storage = build_storage(config, prefix, names, account_id, keys, compute.network, aws_opts)
    cluster_name = compute.cluster.eks.name
    access = tenant_access(config, cluster_name, provider)
    tracking = build_tracking_database(config, prefix, compute, keys.keys, aws_opts)
    tracker_role = None if tracking is None else tracking_identity(prefix, account_id, cluster_name, storage,
                                                                    keys.keys, tracking, provider)
    features = build_online_store(config, prefix, compute, keys.keys, aws_opts)
    feature_roles = feature_identities(config, prefix, account_id, cluster_name, storage, keys.keys, features, provider)
    training = training_identity(config, prefix, account_id, cluster_name, storage, keys.keys, provider, tracking)
    serving = serving_identity(config, prefix, account_id, cluster_name, storage, keys.keys, provider)
    request_log = request_log_identity(config, prefix, account_id, cluster_name, storage, keys.keys, provider)
    drift = drift_identity(config, prefix, account_id, cluster_name, storage, keys.keys, provider, tracking)
    trainers = trainer_identities(config, prefix, account_id, cluster_name, storage, keys.keys, provider, tracking)
    pipelines = pipeline_identities(config, prefix, account_id, cluster_name, storage, keys.keys, tracking, features,
                                    provider)
    runner = None
    if config.deploy_runner is not None:
        subnets = list(compute.network.subnets.values())
        runner = DeployRunner("deploy-runner", DeployRunnerArgs(
            prefix=prefix, account_id=account_id, region=config.region, repository=config.deploy_runner.repository,
            actor_ids=config.deploy_runner.actor_ids, token_stored=config.deploy_runner.token_stored,
            vpc_id=compute.network.vpc.id, subnet_ids=[s.id for s in subnets], subnet_arns=[s.arn for s in subnets],
            cluster_security_group_id=compute.cluster.cluster_security_group_id,
            secrets_key_arn=keys.keys["cluster"].arn, logs_key_arn=keys.keys["logs"].arn,
            log_retention_days=config.storage.log_retention_days), opts=aws_opts)
        pulumi.export("deployRunner", runner.project.name)

    pulumi.export("region", config.region)
    export_storage(keys, storage)
    pulumi.export("cluster", cluster_name)
    pulumi.export(DESCRIPTOR_OUTPUT, cluster_descriptor_output(
        environment=config.environment, region=config.region, account_id=account_id, cluster=compute.cluster,
        vpc_cidr=config.network.vpc_cidr,
        endpoint_cidrs=[config.network.vpc_cidr, *s3_prefix_list_cidrs(config.region, provider)],
        registry_host=registry_host(account_id, config.region),
        buckets={p: b.bucket.bucket for p, b in storage.buckets.items()},
        keys={c: k.arn for c, k in keys.keys.items()}, lustre=lustre_output(storage),
        settings=settings_for_descriptor(config), tracking=tracking_output(tracking),
        features=features_output(features)))
    return Platform(provider, account_id, keys, storage, compute.network, compute.cluster, compute.node_pools,
                    access, training, serving, runner, tracking, tracker_role, features, feature_roles,
                    request_log_identity=request_log, drift_identity=drift, pipeline_identities=pipelines,
                    trainer_identities=trainers)
