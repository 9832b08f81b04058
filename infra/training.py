"""The stack's training job and GPU checks: `mlplat:training` (resolved by
infra/training_plan.py) turned into a `TrainingJob`, wired after the cluster services."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pulumi
import pulumi_aws as aws

from components.addons.queues import LOCAL_QUEUE
from components.addons.volumes import SCRATCH_CLAIM
from components.training import S3Access, TrainingJob, TrainingJobArgs
from components.training_spec import TrainingPlan, training_args
from infra.config import PlatformConfig
from infra.training_plan import ResolvedTraining, resolve_training
from infra.versions import image_uri

# Synthetic shards when no data path is given: enough tokens that a smoke run of a few
# hundred steps does not repeat its data much, small enough to write in seconds.
SYNTHETIC_TOKENS = 20_000_000


def training_plan(config: PlatformConfig, job: ResolvedTraining, account_id: str) -> TrainingPlan:
    s = job.settings
    instance = job.instance
    plan = TrainingPlan(
        name=s.name,
        namespace=job.tenant.name,
        queue=LOCAL_QUEUE,
        pool=job.pool.name,
        instance=instance,
        efa=job.pool.efa,
        nodes=job.nodes,
        min_nodes=job.min_nodes,
        image=image_uri("training", account_id, config.region),
        checks_image=image_uri("checks", account_id, config.region),
        service_account=s.name,
        lustre_claim=SCRATCH_CLAIM if job.lustre else None,
        min_busbw_gbps=job.min_busbw_gbps,
    )
    # The global batch is fixed from the full node count, so a job that shrinks to
    # min_nodes raises its gradient accumulation instead of changing the optimisation.
    global_batch = s.micro_batch * instance.gpus * job.nodes
    args = training_args(s.name, plan.work_dir, model=s.model, strategy=s.strategy, precision=s.precision,
                         compile=s.compile, max_steps=s.max_steps, micro_batch=s.micro_batch,
                         global_batch=global_batch, checkpoint_every=s.checkpoint_every, data_path=s.data_path,
                         synthetic_tokens=SYNTHETIC_TOKENS)
    return replace(plan, train_args=args)


def build_training(
    config: PlatformConfig,
    account_id: str,
    prefix: str,
    cluster: Any,  # components.cluster.Cluster
    storage: Any,  # infra.storage.Storage
    keys: dict[str, aws.kms.Key],
    services: Any,  # infra.cluster_services.ClusterServices
    aws_provider: aws.Provider,
) -> TrainingJob | None:
    job = resolve_training(config)
    if job is None:
        return None
    plan = training_plan(config, job, account_id)
    buckets = storage.buckets
    s3 = S3Access(
        datasets_arn=buckets["datasets"].bucket.arn,
        checkpoints_arn=buckets["checkpoints"].bucket.arn,
        models_arn=buckets["models"].bucket.arn,
        datasets_key_arn=keys["datasets"].arn,
        checkpoints_key_arn=keys["checkpoints"].arn,
        models_key_arn=keys["models"].arn,
    )
    namespace = services.tenancy.namespaces.get(plan.namespace)
    return TrainingJob(
        f"training-{plan.name}",
        TrainingJobArgs(
            plan=plan,
            role_name=f"{prefix}-{plan.namespace}-{plan.name}"[:64],
            cluster_name=cluster.eks.name,
            s3=s3,
            collective_check=job.collective_check,
            depends_on=(*([namespace] if namespace is not None else []), *services.addons.workload_dependencies),
        ),
        opts=pulumi.ResourceOptions(providers={"aws": aws_provider, "kubernetes": cluster.k8s_provider}),
    )
