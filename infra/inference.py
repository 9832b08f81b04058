"""The stack's inference service: `mlplat:inference` (resolved by infra/inference_plan.py)
turned into an `InferenceService`, wired after the cluster services."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from components.addons.plan import chart_mirror
from components.inference import InferenceService, InferenceServiceArgs, MetricsAdapter
from components.inference_spec import LoadBalancerPlan, ServingPlan, repository_uri, source_cidrs
from infra.config import PlatformConfig
from infra.inference_plan import ResolvedInference, resolve_inference
from infra.versions import IMAGES, image_uri, registry_host


def serving_plan(config: PlatformConfig, job: ResolvedInference, account_id: str, models_bucket: str,
                 endpoint_cidrs: tuple[str, ...] = ()) -> ServingPlan:
    s = job.settings
    balancer = s.load_balancer
    return ServingPlan(
        namespace=s.namespace,
        model=s.model_name,
        device=s.device,
        pool=job.pool.name,
        image=image_uri("tritonserver", account_id, config.region),
        fetch_image=image_uri("aws-cli", account_id, config.region),
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
    )


def metrics_adapter(config: PlatformConfig, job: ResolvedInference, account_id: str) -> MetricsAdapter:
    image = IMAGES["prometheus-adapter"]
    return MetricsAdapter(
        image_repository=f"{registry_host(account_id, config.region)}/{image.repository}",
        image_tag=image.tag,
        # CPU replicas scale on CPU use: EKS has no metrics-server, the adapter serves it.
        resource_metrics=job.device == "cpu",
        chart_mirror=chart_mirror(config.addons.chart_mirror, account_id, config.region),
    )


def build_inference(
    config: PlatformConfig,
    account_id: str,
    prefix: str,
    models_bucket: str,
    cluster: Any,  # components.cluster.Cluster
    storage: Any,  # infra.storage.Storage
    keys: dict[str, aws.kms.Key],
    services: Any,  # infra.cluster_services.ClusterServices
    aws_provider: aws.Provider,
) -> InferenceService | None:
    job = resolve_inference(config)
    if job is None:
        return None
    from infra.cluster_services import s3_prefix_list_cidrs

    plan = serving_plan(config, job, account_id, models_bucket,
                        tuple(s3_prefix_list_cidrs(config.region, aws_provider)))
    return InferenceService(
        f"inference-{plan.model}",
        InferenceServiceArgs(
            plan=plan,
            role_name=f"{prefix}-inference-{plan.model}"[:64],
            cluster_name=cluster.eks.name,
            bucket_arn=storage.buckets["models"].bucket.arn,
            key_arn=keys["models"].arn,
            repository_prefix=job.settings.repository_prefix,
            adapter=metrics_adapter(config, job, account_id),
            # The Prometheus stack (PodMonitor CRD, the adapter's source) and the device plugins.
            depends_on=(services.addons,),
        ),
        opts=pulumi.ResourceOptions(providers={"aws": aws_provider, "kubernetes": cluster.k8s_provider}),
    )
