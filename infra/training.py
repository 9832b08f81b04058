"""The environment's training job and GPU checks: `mlplat:training` (resolved by
infra/training_plan.py) turned into its Pod Identity role in the cloud layer and a
`TrainingJob` in the cluster layer, wired after the cluster services."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.queues import LOCAL_QUEUE
from components.addons.volumes import SCRATCH_CLAIM, SHARED_SCRATCH_CLAIM
from components.fabric_spec import NodeFabric
from components.iam import PodIdentityRole, PodIdentityRoleArgs
from components.training import TrainingJob, TrainingJobArgs
from components.specs.cluster import CA_FILE
from components.tenant_paths import checkpoints_prefix
from components.tracking_spec import SERVER_URI, STORE_CREDENTIALS_DIR, STORE_CREDENTIALS_KEY, tenant_statements
from components.training_spec import SecretFile, TrainingPlan, role_name, s3_statements, training_args
from infra.config import PlatformConfig
from infra.descriptor import ClusterDescriptor, CustomerClusterDescriptor
from infra.training_plan import ResolvedTraining, resolve_training
from infra.versions import image_ref, registry_host

# Synthetic shards when no data path is given: enough tokens that a smoke run of a few
# hundred steps does not repeat its data much, small enough to write in seconds.
SYNTHETIC_TOKENS = 20_000_000

# On a customer's cluster, the Secrets the customer makes in the training tenant's namespace
# (docs/onprem.md): the tenant's MLflow password (the value of `tenant.<name>` in the
# mlflow namespace's mlflow-users), and the object store's keys for training (read the
# datasets bucket, read and write the checkpoints bucket) as an AWS shared-credentials file
# under STORE_CREDENTIALS_KEY: a Secret of its own, so the feature store's keys in the same
# namespace (objectStorage.credentialsSecret, its prefix only) stay narrower.
TENANT_TRACKING_CREDENTIALS = "mlflow-tracking"
TENANT_TRACKING_KEY = "password"
TRAINING_STORE_CREDENTIALS = "training-object-store"


def with_fabric(plan: TrainingPlan, fabric: NodeFabric | None) -> TrainingPlan:
    """The plan on a customer's RDMA fabric: its JobSets request the fabric's RDMA resource
    and carry NCCL's InfiniBand (or RoCE) settings (components/training_spec.py)."""
    if fabric is None or "fabric" not in {f.name for f in fields(TrainingPlan)}:
        return plan
    return replace(plan, fabric=fabric)  # type: ignore[call-arg]


def training_plan(config: PlatformConfig, job: ResolvedTraining, account_id: str,
                  built: Mapping[str, str], *, registry: str = "", fabric: NodeFabric | None = None,
                  scratch_claim: str = SCRATCH_CLAIM) -> TrainingPlan:
    """`built`: the platform images' digests as CI recorded them (mlplat:platformImages).
    `registry`: the environment's registry host (default: the account's in-region ECR);
    `fabric`: the pool's RDMA fabric on a customer's cluster; `scratch_claim`: each
    tenant's shared scratch claim (Lustre on AWS)."""
    s = job.settings
    instance = job.instance
    host = registry or registry_host(account_id, config.region)
    plan = TrainingPlan(
        name=s.name,
        namespace=job.tenant.name,
        queue=LOCAL_QUEUE,
        pool=job.pool.name,
        instance=instance,
        efa=job.pool.efa,
        nodes=job.nodes,
        min_nodes=job.min_nodes,
        image=image_ref("training", host, config.environment, built),
        checks_image=image_ref("checks", host, config.environment, built),
        service_account=s.name,
        lustre_claim=scratch_claim if job.lustre else None,
        min_busbw_gbps=job.min_busbw_gbps,
        gid=job.tenant.group,
    )
    return with_settings(with_fabric(plan, fabric), s, job.global_batch, host)


def with_settings(plan: TrainingPlan, s: Any, global_batch: int, host: str) -> TrainingPlan:
    """What the pods launch, from the job's settings (a TrainingConfig): the platform's
    trainer with its arguments, or the tenant's image and command. The same global batch at
    every node count from min_nodes to nodes: a job that shrinks raises its gradient
    accumulation instead of changing the optimisation (or stopping)."""
    if s.framework != "torchrun":
        # The tenant's image from the environment's in-region registry, as every image here.
        return replace(plan, framework=s.framework, command=tuple(s.command or ()),
                       user_image=f"{host}/{s.image}")
    p = s.parallel
    args = training_args(plan.name, plan.work_dir, model=s.model, strategy=s.strategy, precision=s.precision,
                         compile=s.compile, max_steps=s.max_steps, micro_batch=s.micro_batch,
                         global_batch=global_batch, checkpoint_every=s.checkpoint_every, data_path=s.data_path,
                         synthetic_tokens=SYNTHETIC_TOKENS, tp=p.tp, pp=p.pp, dp_replicate=p.dp_replicate,
                         pp_schedule=p.pp_schedule, activation_checkpoint=s.activation_checkpoint)
    return replace(plan, train_args=args)


def tracking_env(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                 plan: TrainingPlan) -> tuple[tuple[str, str], ...]:
    """The trainer's MLflow run as its tenant's user (the password read from the tenant's
    secret with the job's own role), and the checkpoints bucket rank 0 copies to. On a
    customer's cluster, the plain half of `customer_tracking` (its Secrets are in the plan)."""
    if isinstance(descriptor, CustomerClusterDescriptor):
        return customer_tracking(config, descriptor, plan).tracking_env
    if descriptor.tracking is None or not config.tracking.enabled:
        return ()
    return (
        ("MLFLOW_TRACKING_URI", SERVER_URI),
        ("MLFLOW_TRACKING_USERNAME", plan.namespace),
        ("MLPLAT_TRACKING_SECRET_ARN", descriptor.tracking.tenant_secret_arns[plan.namespace]),
        ("MLPLAT_EXPERIMENT", f"{plan.namespace}/{plan.name}"),
        ("MLPLAT_CHECKPOINT_UPLOAD", checkpoint_upload(descriptor.buckets["checkpoints"], plan.namespace)),
        ("MLPLAT_IMAGE", plan.user_image or plan.image),  # the image that trains
        ("AWS_REGION", config.region),
    )


def checkpoint_upload(bucket: str, tenant: str) -> str:
    """Where rank 0 copies checkpoints: the tenant's own prefix (components/tenant_paths.py)."""
    return f"s3://{bucket}/{checkpoints_prefix(tenant).rstrip('/')}"


def customer_tracking(config: PlatformConfig, descriptor: CustomerClusterDescriptor,
                      plan: TrainingPlan) -> TrainingPlan:
    """The plan on a customer's cluster, tracked as on AWS when the tracking server runs
    there (infra/tracking.py: on the descriptor's PostgreSQL): the server's in-cluster URI
    and the tenant's user, its password from the tenant's Secret (MLflow's own variable);
    checkpoints copied to the customer's store at its https endpoint, verified against its
    CA, with the keys of the tenant's Secret mounted as a shared-credentials file."""
    if descriptor.services.postgres is None or not config.tracking.enabled:
        return plan  # no tracking server: the run is not tracked
    store = descriptor.object_storage
    credentials = SecretFile("object-store", TRAINING_STORE_CREDENTIALS, STORE_CREDENTIALS_KEY, STORE_CREDENTIALS_DIR)
    env = (
        ("MLFLOW_TRACKING_URI", SERVER_URI),
        ("MLFLOW_TRACKING_USERNAME", plan.namespace),
        ("MLPLAT_EXPERIMENT", f"{plan.namespace}/{plan.name}"),
        ("MLPLAT_CHECKPOINT_UPLOAD", checkpoint_upload(descriptor.buckets["checkpoints"], plan.namespace)),
        ("MLPLAT_IMAGE", plan.user_image or plan.image),  # the image that trains
        # boto3 (workloads/tracking/store.py): the customer's store, never AWS S3.
        ("AWS_ENDPOINT_URL_S3", store.endpoint),
        ("AWS_CA_BUNDLE", CA_FILE),
        ("AWS_REGION", store.region),
        ("AWS_DEFAULT_REGION", store.region),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.path),
    )
    return replace(plan, tracking_env=env, ca_bundle=store.ca_bundle, secret_files=(credentials,),
                   tracking_secret_env=(("MLFLOW_TRACKING_PASSWORD", TENANT_TRACKING_CREDENTIALS,
                                         TENANT_TRACKING_KEY),))


def training_identity(
    config: PlatformConfig,
    prefix: str,
    account_id: str,
    cluster_name: pulumi.Input[str],
    storage: Any,  # infra.storage.Storage
    keys: dict[str, aws.kms.Key],
    aws_provider: aws.Provider,
    tracking: Any = None,  # components.tracking.TrackingDatabase
) -> PodIdentityRole | None:
    """The cloud layer's half of the training job: the Pod Identity role its service
    account gets, reading its tenant's datasets and writing its tenant's checkpoints, and
    reading its tenant's tracking user."""
    job = resolve_training(config)
    if job is None:
        return None
    statements = _training_statements(config, storage, keys, job.tenant.name, tracking)
    s = job.settings
    # Named, and at the stack's root, as a stack made before the layers split holds it
    # once migrated (docs/layers.md).
    return PodIdentityRole(
        f"training-{s.name}-identity",
        PodIdentityRoleArgs(role_name=role_name(prefix, job.tenant.name, s.name), account_id=account_id,
                            namespace=job.tenant.name,
                            service_account=s.name, cluster_name=cluster_name,
                            statements=statements),
        opts=pulumi.ResourceOptions(providers={"aws": aws_provider}),
    )


def _training_statements(config: PlatformConfig, storage: Any, keys: dict[str, aws.kms.Key], tenant: str,
                         tracking: Any) -> pulumi.Output[list[dict[str, Any]]]:
    """A training role's policy: the tenant's datasets (read) and runs (read and write), and,
    where the tracking server runs, the tenant's tracking user."""
    buckets = storage.buckets
    user_secret = tracking.secrets[tenant].arn if tracking is not None else ""
    return pulumi.Output.all(
        buckets["datasets"].bucket.arn, buckets["checkpoints"].bucket.arn,
        keys["datasets"].arn, keys["checkpoints"].arn, keys["tracking"].arn, user_secret,
    ).apply(lambda a: s3_statements(a[0], a[1], tenant, read_key_arns=[a[2]], write_key_arns=[a[3]])
            + (tenant_statements(a[5], a[4], config.region) if a[5] else []))


def cluster_plan(config: PlatformConfig, descriptor: ClusterDescriptor | CustomerClusterDescriptor,
                 job: ResolvedTraining, built: Mapping[str, str]) -> TrainingPlan:
    """The job's plan as the cluster layer deploys it: on AWS, or on a customer's cluster
    (its registry, fabric, shared scratch class, and its Secrets for tracking)."""
    if isinstance(descriptor, CustomerClusterDescriptor):
        plan = training_plan(config, job, "", built, registry=descriptor.registry_host,
                             fabric=descriptor.fabrics.get(job.pool.name), scratch_claim=SHARED_SCRATCH_CLAIM)
        return customer_tracking(config, descriptor, plan)
    plan = training_plan(config, job, descriptor.account_id, built, registry=descriptor.registry_host)
    return replace(plan, tracking_env=tracking_env(config, descriptor, plan))


def build_training(
    config: PlatformConfig,
    descriptor: ClusterDescriptor | CustomerClusterDescriptor,
    services: Any,  # infra.cluster_services.ClusterServices
    k8s_provider: k8s.Provider,
    built: Mapping[str, str],
) -> TrainingJob | None:
    """The cluster layer's half: the JobSets, the GPU checks and the service account."""
    job = resolve_training(config)
    if job is None:
        return None
    plan = cluster_plan(config, descriptor, job, built)
    namespace = services.tenancy.namespaces.get(plan.namespace)
    return TrainingJob(
        f"training-{plan.name}",
        TrainingJobArgs(
            plan=plan,
            collective_check=job.collective_check,
            depends_on=(*([namespace] if namespace is not None else []), *services.addons.workload_dependencies),
        ),
        opts=pulumi.ResourceOptions(providers={"kubernetes": k8s_provider}),
    )


def self_service_jobs(config: PlatformConfig, tenant: Any) -> list[ResolvedTraining]:
    """Per GPU pool the tenant may use, a one-node job of the trainer's defaults there (what a
    self-service job changes is applied when it is rendered: infra/jobs.py); none where even
    one node is more than the tenant can ever be admitted."""
    from infra.config import TrainingConfig
    from infra.training_plan import TrainingConfigError, _tenant_allows

    jobs = []
    for pool in config.node_pools:
        if pool.role != "gpu" or not _tenant_allows(tenant, pool.instance_type):
            continue
        settings = TrainingConfig(name="job", tenant=tenant.name, pool=pool.name, nodes=1)
        try:
            job = resolve_training(config.model_copy(update={"training": settings}))
        except TrainingConfigError:
            continue
        if job is not None:
            jobs.append(job)
    return jobs


def self_service_tenants(config: PlatformConfig) -> list[str]:
    """The tenants that may submit their own jobs (the cluster layer gives each a template)."""
    return [t.name for t in config.tenants if self_service_jobs(config, t)]


def trainer_role_name(prefix: str, tenant: str) -> str:
    """The IAM name of a tenant's self-service jobs' role; '_' keeps it apart from any
    stack job's (`<prefix>-<tenant>-<job>`: a job's name has none)."""
    return f"{prefix}-{tenant}-jobs_trainer"[:64]


def trainer_identities(config: PlatformConfig, prefix: str, account_id: str, cluster_name: pulumi.Input[str],
                       storage: Any, keys: dict[str, aws.kms.Key], aws_provider: aws.Provider,
                       tracking: Any = None) -> dict[str, PodIdentityRole]:
    """Per self-service tenant, the role of its `trainer` service account (infra/jobs.py):
    what the stack's training role gets, for the tenant's own prefixes and tracking user."""
    from infra.jobs import TRAINER_ACCOUNT

    roles = {}
    for tenant in self_service_tenants(config):
        statements = _training_statements(config, storage, keys, tenant, tracking)
        roles[tenant] = PodIdentityRole(
            f"training-{tenant}-trainer", PodIdentityRoleArgs(
                role_name=trainer_role_name(prefix, tenant), account_id=account_id, namespace=tenant,
                service_account=TRAINER_ACCOUNT, cluster_name=cluster_name, statements=statements),
            opts=pulumi.ResourceOptions(providers={"aws": aws_provider}))
    return roles
