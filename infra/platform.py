"""`build_platform`: wires the components for one stack. The same function runs under
the real engine (`pulumi up`) and under the offline preview's mocks."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.cluster import Cluster
from components.inference import InferenceService
from components.keys import PlatformKeys
from components.network import Network
from components.nodepool import GpuNodePool
from components.training import TrainingJob
from infra.cluster_services import ClusterServices, build_cluster_services, lustre_volume
from infra.compute import build_compute
from infra.config import PROJECT, PlatformConfig
from infra.descriptor import OUTPUT as DESCRIPTOR_OUTPUT
from infra.descriptor import cluster_descriptor_output
from infra.inference import build_inference
from infra.preflight import pool_zones
from infra.storage import Storage, build_keys, build_storage, export_storage, lustre_output, storage_names
from infra.training import build_training
from infra.versions import registry_host


# One customer-managed key per class of data, so access to one class can be granted or
# revoked without touching the others (components/key_policy.py `data_class_uses` says
# which services use each, and why the log classes share one).
DATA_CLASSES = ("datasets", "models", "checkpoints", "logs", "cluster", "volumes", "images")


@dataclass(frozen=True)
class Platform:
    aws_provider: aws.Provider
    account_id: str
    keys: PlatformKeys
    storage: Storage
    network: Network
    cluster: Cluster
    node_pools: dict[str, GpuNodePool]
    # Tenancy and add-ons; workloads depend on services.addons.workload_dependencies.
    services: ClusterServices
    # The training job and the GPU checks (None: the stack has no GPU pool to train on).
    training: TrainingJob | None = None
    # The Triton service (None: the stack serves no model).
    inference: InferenceService | None = None


def region_provider(config: PlatformConfig) -> aws.Provider:
    """The one AWS provider: pinned to the stack's region, carrying the default tags.
    Default providers are disabled per stack, so a resource that forgets it fails."""
    return aws.Provider(
        f"aws-{config.region}",
        region=config.region,
        default_tags=aws.ProviderDefaultTagsArgs(tags=config.default_tags),
    )


def build_platform(config: PlatformConfig) -> Platform:
    provider = region_provider(config)
    aws_opts = pulumi.ResourceOptions(providers={"aws": provider})
    invoke_opts = pulumi.InvokeOptions(provider=provider)
    account_id = aws.get_caller_identity(opts=invoke_opts).account_id
    prefix = f"{PROJECT}-{pulumi.get_stack()}"  # also the EKS cluster's name
    # Before any other resource: a pool whose type its zone does not offer stops here.
    zones_by_pool = pool_zones(config, invoke_opts)

    names = storage_names(config, pulumi.get_stack(), account_id)
    keys = build_keys(config, prefix, names, account_id, aws_opts)

    compute = build_compute(config, prefix, keys.keys, zones_by_pool, provider, account_id)
    storage = build_storage(config, prefix, names, account_id, keys, compute.network, aws_opts)
    services = build_cluster_services(config, account_id, compute, provider, lustre_volume(config, storage))
    training = build_training(config, account_id, prefix, compute.cluster, storage, keys.keys, services, provider)
    inference = build_inference(config, account_id, prefix, names.buckets["models"], compute.cluster, storage,
                                keys.keys, services, provider)

    pulumi.export("region", config.region)
    export_storage(keys, storage)
    pulumi.export("cluster", compute.cluster.eks.name)
    pulumi.export(DESCRIPTOR_OUTPUT, cluster_descriptor_output(
        environment=pulumi.get_stack(), region=config.region, account_id=account_id, cluster=compute.cluster,
        vpc_cidr=config.network.vpc_cidr, registry_host=registry_host(account_id, config.region),
        buckets={p: b.bucket.bucket for p, b in storage.buckets.items()},
        keys={c: k.arn for c, k in keys.keys.items()}, lustre=lustre_output(storage)))
    return Platform(provider, account_id, keys, storage, compute.network, compute.cluster, compute.node_pools,
                    services, training, inference)
