"""`build_cluster_layer`: every Kubernetes object of one environment, built from its
cluster descriptor (infra/descriptor.py), with no AWS resource and no AWS provider.

The descriptor comes from the cloud layer's `clusterDescriptor` output through a
StackReference (stack `<env>-cluster` names `<env>` in `mlplat:cloudStack`), or from the
stack's own config for a cluster the customer runs (`mlplat:descriptor`). It carries the
environment's settings too, so the stack file of `<env>` is the one place an environment
is described, and this layer builds what the deployed cloud layer was built for."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.inference import InferenceService
from components.addons.objects import create, create_fenced
from components.specs.cluster import PLATFORM_NAMESPACE, default_storage_class, kubeconfig, platform_config_map
from components.system_network_spec import ingress_policies
from components.tenancy_spec import SYSTEM_NAMESPACES, system_namespace
from components.features import FeatureProject
from components.tracking import TrackingServer
from components.training import TrainingJob
from infra.cluster_services import ClusterServices, build_cluster_services, build_customer_services
from infra.config import PROJECT, ClusterLayerConfig, ConfigError, PlatformConfig, site_of
from infra.descriptor import (OUTPUT, ClusterDescriptor, CustomerClusterDescriptor, descriptor_config,
                              from_stack_reference, parse_descriptor)
from infra.inference import build_customer_inference, build_inference
from infra.features import build_feature_projects
from infra.jobs import build_self_service
from infra.pipelines import build_pipeline_engines
from infra.tracking import build_tracking_server
from infra.training import build_training
from infra.versions import IMAGES, unpinned

# Named as a stack made before the layers split holds them once migrated: the provider
# copied to the root by `pulumi state move`, the StorageClass moved out of CoreAddons.
PROVIDER_NAME = "cluster-k8s"
STORAGE_CLASS_NAME = "core-addons-gp3-encrypted"


@dataclass(frozen=True)
class ClusterLayer:
    descriptor: ClusterDescriptor | CustomerClusterDescriptor
    config: PlatformConfig  # the environment's settings, from the descriptor
    k8s_provider: k8s.Provider
    storage_class: k8s.storage.v1.StorageClass | None  # None: a customer's cluster has its own
    services: ClusterServices
    training: TrainingJob | None = None
    inference: InferenceService | None = None
    tracking: TrackingServer | None = None
    features: tuple[FeatureProject, ...] = ()  # one per tenant with a project


def read_descriptor(layer: ClusterLayerConfig,
                    stack: str) -> tuple[ClusterDescriptor | CustomerClusterDescriptor, PlatformConfig]:
    """The descriptor and the settings it carries, checked against this layer: a missing
    field, or a cloud layer of another environment or region, is a ConfigError (one line,
    exit 2) before anything is registered."""
    if layer.cloud_stack is not None:
        source = f"StackReference {layer.cloud_stack}"
        data = from_stack_reference(layer.cloud_stack)
        if data is None:
            raise ConfigError(f"cluster layer {stack}: {source} has no `{OUTPUT}` output; run the cloud layer's "
                              f"`pulumi up --stack {layer.cloud_stack}` first")
    else:
        source, data = f"{PROJECT}:descriptor", layer.descriptor
    descriptor = parse_descriptor(data, layer=stack, source=source, environment=layer.environment,
                                  region=layer.region)
    config = descriptor_config(descriptor, f"cluster layer {stack}: {source}")
    if config.environment != layer.environment or config.region != layer.region:
        raise ConfigError(f"cluster layer {stack}: {source}: settings describe {config.environment} in "
                          f"{config.region}, but the descriptor {descriptor.environment} in {descriptor.region}")
    return descriptor, config


def check_supply(layer: ClusterLayerConfig, stack: str) -> None:
    """Every image by digest, before anything is registered: the mirror's pins from the
    plan, the platform's own images from what CI recorded when it built them. A preview
    shows a mirror not yet pinned by its tag; an update refuses it."""
    missing = unpinned(site_of(layer.environment))
    if missing and not pulumi.runtime.is_dry_run():
        raise ConfigError(f"cluster layer {stack}: {', '.join(missing)} in infra/versions.py without a digest; pin "
                          "them (images are referenced by digest only, and `mlplat mirror` copies by digest)")
    built = [name for name, image in IMAGES.items() if image.built_here and name not in layer.platform_images]
    if built:
        raise ConfigError(f"cluster layer {stack}: {PROJECT}:platformImages lacks {', '.join(built)}: the digests "
                          "CI records when it builds and pushes the platform's images (deploy-environment.yml); set "
                          f"each with `pulumi config set --path '{PROJECT}:platformImages.<name>' sha256:...`")


def build_cluster_layer(layer: ClusterLayerConfig) -> ClusterLayer:
    check_supply(layer, pulumi.get_stack())
    descriptor, config = read_descriptor(layer, pulumi.get_stack())
    if isinstance(descriptor, CustomerClusterDescriptor):
        return build_customer_cluster_layer(layer, descriptor, config)
    provider = k8s.Provider(
        PROVIDER_NAME,
        # The same kubeconfig the cloud layer's cluster would give: tokens from
        # `aws eks get-token` as whoever runs the deploy (the deployer role, in the VPC).
        kubeconfig=json.dumps(kubeconfig(descriptor.cluster_name, descriptor.endpoint,
                                         descriptor.certificate_authority, descriptor.region)),
        enable_server_side_apply=True,
    )
    sc = default_storage_class(descriptor.keys["volumes"])
    storage_class = k8s.storage.v1.StorageClass(
        STORAGE_CLASS_NAME,
        metadata=k8s.meta.v1.ObjectMetaArgs(**sc["metadata"]),
        provisioner=sc["provisioner"],
        parameters=sc["parameters"],
        reclaim_policy=sc["reclaim_policy"],
        volume_binding_mode=sc["volume_binding_mode"],
        allow_volume_expansion=sc["allow_volume_expansion"],
        opts=pulumi.ResourceOptions(provider=provider),
    )
    services = build_cluster_services(config, descriptor, provider, storage_class)
    tracking = build_tracking_server(config, descriptor, services, provider, layer.platform_images)
    features = build_feature_projects(config, descriptor, services, provider, layer.platform_images)
    build_pipeline_engines(config, descriptor, services, tracking, provider, layer.platform_images)
    training = build_training(config, descriptor, services, provider, layer.platform_images)
    build_self_service(config, descriptor, services, provider, layer.platform_images)
    inference = build_inference(config, descriptor, services, provider, layer.platform_images)
    pulumi.export("environment", config.environment)
    pulumi.export("cluster", descriptor.cluster_name)
    return ClusterLayer(descriptor, config, provider, storage_class, services, training, inference, tracking,
                        tuple(features))


def build_customer_cluster_layer(layer: ClusterLayerConfig, descriptor: CustomerClusterDescriptor,
                                 config: PlatformConfig) -> ClusterLayer:
    """The same layer on a cluster the customer runs, on any conformant Kubernetes: the
    provider from the descriptor's kubeconfig context (the kubeconfig of whoever runs the
    deploy, inside the customer's network), the customer's own storage classes, and no AWS
    resource, provider or invoke at all."""
    provider = k8s.Provider(PROVIDER_NAME, context=descriptor.cluster.context, enable_server_side_apply=True)
    platform_record(descriptor, provider)
    services = build_customer_services(config, descriptor, provider)
    tracking = build_tracking_server(config, descriptor, services, provider, layer.platform_images)
    features = build_feature_projects(config, descriptor, services, provider, layer.platform_images)
    build_pipeline_engines(config, descriptor, services, tracking, provider, layer.platform_images)
    training = build_training(config, descriptor, services, provider, layer.platform_images)
    build_self_service(config, descriptor, services, provider, layer.platform_images)
    inference = build_customer_inference(config, descriptor, services, provider, layer.platform_images)
    pulumi.export("environment", config.environment)
    pulumi.export("cluster", descriptor.cluster.context)
    return ClusterLayer(descriptor, config, provider, None, services, training, inference, tracking,
                        tuple(features))


def platform_facts(descriptor: CustomerClusterDescriptor) -> dict[str, str]:
    """What the descriptor says about the customer's infrastructure, as the platform
    ConfigMap records it: flat keys, nothing secret."""
    store = descriptor.object_storage
    facts = {
        "cluster.context": descriptor.cluster.context,
        "cluster.kubernetesVersion": descriptor.cluster.kubernetes_version,
        "registry.host": descriptor.registry.host,
        "objectStore.endpoint": store.endpoint,
        "objectStore.region": store.region,
        "objectStore.encryptionAtRest": store.encryption_at_rest,
        **{f"objectStore.buckets.{c}": b for c, b in store.buckets.items()},
        "storageClasses.default": descriptor.storage_classes.default,
    }
    if descriptor.storage_classes.shared:
        facts["storageClasses.shared"] = descriptor.storage_classes.shared
    for group in descriptor.nodes:
        facts[f"nodes.{group.name}"] = (f"{group.count} x {group.instance_type}"
                                        + (f", {group.gpus} x {group.gpu_model}" if group.gpus else ""))
        if group.fabric is not None:
            f = group.fabric
            facts[f"nodes.{group.name}.fabric"] = f"{f.kind}, {len(f.hcas)} x {f.port_rate_gbps} Gb/s ({','.join(f.hcas)})"
    return facts


def platform_record(descriptor: CustomerClusterDescriptor, provider: k8s.Provider) -> pulumi.Resource:
    """The mlplat-system namespace and its ConfigMap of the descriptor's facts, where the
    policy pack reads the object store's encryption at rest and people read the rest."""
    opts = pulumi.ResourceOptions(provider=provider)
    namespace = create_fenced(system_namespace(SYSTEM_NAMESPACES[PLATFORM_NAMESPACE]),
                              ingress_policies(PLATFORM_NAMESPACE), opts)
    return create(platform_config_map(platform_facts(descriptor)),
                  pulumi.ResourceOptions(provider=provider, depends_on=namespace))
