"""Keys, buckets, Lustre scratch, registries, volumes, logs and the audit trail for one
stack: the storage half of `build_platform`.

Keys come first (the network and the cluster encrypt with them); everything else after
the network exists, because Lustre and the optional VPC-endpoint restriction need it.
Every name a key or bucket policy mentions is computed up front by `storage_names`, so
the policies never wait on a resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.audit import AuditTrail, AuditTrailArgs
from components.bucket import BucketArgs, ObjectLock, RegionPinnedBucket
from components.bucket_policy import TrailDelivery, bucket_name
from components.features_spec import owned_prefixes
from components.pipelines_spec import steps_role_name
from components.inference_spec import role_name as serving_role
from components.tenant_paths import checkpoints_prefix
from components.tracking_spec import ARTIFACTS_PREFIX
from components.tracking_spec import role_name as tracking_role
from components.training_spec import role_name as training_role
from components.drift_spec import role_name as drift_role
from components.request_log_spec import key_prefix
from components.request_log_spec import role_name as log_role
from components.key_policy import DATA_BUCKETS, StorageNames, data_class_uses
from components.keys import KeysArgs, PlatformKeys
from components.logs import WorkloadLogs, WorkloadLogsArgs
from components.lustre import LustreArgs, LustreScratch
from components.lustre_spec import DATASETS_PATH
from components.network import Network
from components.registry import ImageRegistry, RegistryArgs
from components.volumes import VolumeEncryption, VolumeEncryptionArgs
from infra.config import PROJECT, PlatformConfig
from infra.versions import plan_charts, plan_images

# Which key encrypts which bucket.
BUCKET_KEYS = {"datasets": "datasets", "models": "models", "checkpoints": "checkpoints",
               "audit": "logs", "access-logs": "logs"}


def storage_names(config: PlatformConfig, stack: str, account_id: str) -> StorageNames:
    return StorageNames(
        buckets={p: bucket_name(PROJECT, stack, p, account_id, config.region) for p in BUCKET_KEYS},
        trail=f"{PROJECT}-{stack}-audit",
        lustre=config.storage.lustre.enabled,
    )


def build_keys(config: PlatformConfig, prefix: str, names: StorageNames, account_id: str,
               opts: pulumi.ResourceOptions) -> PlatformKeys:
    return PlatformKeys(
        "keys",
        KeysArgs(prefix=prefix, account_id=account_id, region=config.region, uses=data_class_uses(names)),
        opts=opts,
    )


@dataclass(frozen=True)
class Storage:
    buckets: dict[str, RegionPinnedBucket]
    registry: ImageRegistry
    trail: AuditTrail
    volumes: VolumeEncryption | None  # only in the stack that owns the account's EBS defaults
    workload_logs: WorkloadLogs
    lustre: LustreScratch | None


def model_and_run_owners(config: PlatformConfig, prefix: str,
                         account_id: str) -> dict[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """Who alone may touch the shared prefixes of the models and checkpoints buckets (the
    bucket policy denies everyone else): the tracking server its artifacts; the publishers
    (the deployer and break-glass roles: publishing and rollback are CI's) and the serving
    pods, reading, the model repository; each tenant's training role and the publishers,
    reading what they export, the tenant's runs."""
    from infra.inference_plan import resolve_inference
    from infra.pipelines import publishing_tenant
    from infra.training import self_service_tenants, trainer_role_name
    from infra.training_plan import resolve_training

    def arn(role: str) -> str:
        return config.cluster.role_arn(role, account_id)

    publishers = tuple(arn(r) for r in (config.cluster.deployer_role, config.cluster.break_glass_role) if r)
    models: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if config.tracking.enabled:
        models += ((f"{ARTIFACTS_PREFIX}/", (arn(tracking_role(prefix)),)),)
    serving = resolve_inference(config)
    if serving is not None:
        readers = (arn(serving_role(prefix, serving.settings.model_name)),)
        models += ((f"{serving.settings.repository_prefix}/", publishers + readers),)
    job = resolve_training(config)
    self_service = self_service_tenants(config)  # their jobs' role (infra/jobs.py)
    if serving is not None and (publisher := publishing_tenant(config)) is not None:
        # The tenant whose golden path publishes the served model (infra/pipelines.py).
        repository = f"{serving.settings.repository_prefix}/"
        publishing = arn(steps_role_name(prefix, publisher))
        models = tuple((p, (*who, publishing) if p == repository else who) for p, who in models)
    runs = tuple(
        (checkpoints_prefix(t.name), publishers + ((arn(training_role(prefix, t.name, job.settings.name)),)
                                                   if job is not None and job.tenant.name == t.name else ())
         + ((arn(steps_role_name(prefix, t.name)),) if t.name in config.pipelines.tenants else ())
         + ((arn(trainer_role_name(prefix, t.name)),) if t.name in self_service else ()))
        for t in config.tenants)
    return {"models": models, "checkpoints": runs}


def request_logging(config: PlatformConfig) -> tuple[str, int, str | None] | None:
    """(model, retention days, the drift check's tenant or None) where the stack keeps a
    sample of its inference requests."""
    from infra.inference_plan import drift_tenant, resolve_inference

    job = resolve_inference(config)
    if job is None or not job.settings.request_logging.enabled:
        return None
    return job.settings.model_name, job.settings.request_logging.retention_days, drift_tenant(job.settings)


def build_storage(
    config: PlatformConfig,
    prefix: str,
    names: StorageNames,
    account_id: str,
    keys: PlatformKeys,
    network: Network,
    opts: pulumi.ResourceOptions,
) -> Storage:
    storage = config.storage
    key = {c: k.arn for c, k in keys.keys.items()}
    trail_arn = f"arn:aws:cloudtrail:{config.region}:{account_id}:trail/{names.trail}"

    def bucket(purpose: str, **extra) -> RegionPinnedBucket:
        return RegionPinnedBucket(
            purpose,
            BucketArgs(
                bucket_name=names.buckets[purpose],
                kms_key_arn=key[BUCKET_KEYS[purpose]],
                account_id=account_id,
                force_destroy=storage.force_destroy,
                noncurrent_version_days=storage.dataset_version_days if purpose == "datasets"
                else storage.noncurrent_version_days,
                **extra,
            ),
            opts=opts,
        )

    # S3 refuses to deliver access logs into an Object Lock bucket, so they get a bucket
    # of their own, kept as long as the CloudWatch logs.
    access_logs = bucket(
        "access-logs",
        expire_after_days=storage.log_retention_days,
        log_delivery_sources=tuple(names.buckets[p] for p in (*DATA_BUCKETS, "audit")),
    )
    lock = storage.audit_object_lock
    audit = bucket(
        "audit",
        object_lock=ObjectLock(mode=lock.mode, days=lock.days),
        trail=TrailDelivery(trail_arn=trail_arn, account=account_id),
        access_log_bucket=access_logs,
        access_log_prefix="audit/",
    )
    endpoint = network.s3_endpoint.id if storage.vpc_endpoint_only else None
    # Each tenant's feature store (infra/features.py) owns its prefix of the datasets bucket,
    # and the request logger its model's request logs, kept only as long as the stack says.
    owned = {"datasets": owned_prefixes(prefix, account_id, tuple(config.feature_projects))}
    # A tenant's golden path materializes and builds datasets there too (infra/pipelines.py).
    owned["datasets"] = tuple(
        (p, (role, f"arn:aws:iam::{account_id}:role/{steps_role_name(prefix, tenant)}"))
        if (tenant := p.split("/")[1]) in config.pipelines.tenants else (p, role)
        for p, role in owned["datasets"])
    retained: dict[str, tuple[tuple[str, int], ...]] = {}
    logging = request_logging(config)
    if logging is not None:
        model, days, drift_tenant = logging
        # The logger writes there; the drift check, where there is one, reads.
        owners = tuple(f"arn:aws:iam::{account_id}:role/{name}" for name in (
            log_role(prefix, model), *([drift_role(prefix, drift_tenant, model)] if drift_tenant else [])))
        owned["datasets"] += ((key_prefix(model), owners),)
        retained["datasets"] = ((key_prefix(model), days),)
    owned.update(model_and_run_owners(config, prefix, account_id))
    buckets = {
        purpose: bucket(purpose, access_log_bucket=access_logs, access_log_prefix=f"{purpose}/",
                        vpc_endpoint_id=endpoint, owned_prefixes=owned.get(purpose, ()),
                        retained=retained.get(purpose, ()))
        for purpose in DATA_BUCKETS
    }
    buckets.update({"audit": audit, "access-logs": access_logs})

    trail = AuditTrail(
        "audit",
        AuditTrailArgs(
            trail_name=names.trail,
            bucket_name=audit.bucket.bucket,
            kms_key_arn=key["logs"],
            data_buckets=tuple(names.buckets[p] for p in DATA_BUCKETS),
            bucket_policy=audit.policy,
        ),
        opts=opts,
    )
    registry = ImageRegistry(
        "registry", RegistryArgs(environment=config.environment, images=plan_images("aws"), charts=plan_charts("aws"),
                                 kms_key_arn=key["images"], force_delete=storage.force_destroy),
        opts=opts,
    )
    volumes = VolumeEncryption("ebs", VolumeEncryptionArgs(kms_key_arn=key["volumes"]), opts=opts) \
        if storage.ebs_account_defaults else None
    workload_logs = WorkloadLogs(
        "workload-logs",
        WorkloadLogsArgs(prefix=prefix, kms_key_arn=key["logs"], retention_days=storage.log_retention_days,
                         force_destroy=storage.force_destroy),
        opts=opts,
    )
    lustre = None
    zone = config.lustre_zone_id
    if storage.lustre.enabled and zone is not None:
        lustre = LustreScratch(
            "lustre",
            LustreArgs(
                prefix=prefix,
                vpc_id=network.vpc.id,
                subnet_id=network.subnets[zone].id,
                node_security_group_id=network.node_security_group.id,
                kms_key_arn=key["datasets"],
                datasets_bucket=names.buckets["datasets"],
                tenants=tuple(t.name for t in config.tenants),
                storage_capacity_gib=storage.lustre.storage_capacity_gib,
                per_unit_storage_throughput=storage.lustre.per_unit_storage_throughput,
                logs_kms_key_arn=key["logs"],
                log_retention_days=storage.log_retention_days,
                force_destroy=storage.force_destroy,
            ),
            # The associations read the bucket under its key policy and bucket policy.
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[buckets["datasets"]])),
        )
    return Storage(buckets, registry, trail, volumes, workload_logs, lustre)


def export_storage(keys: PlatformKeys, storage: Storage) -> None:
    """Stack outputs, so workloads and people can find every key, bucket, file system,
    repository and log group."""
    pulumi.export("keys", {c: k.arn for c, k in keys.keys.items()})
    pulumi.export("keyAliases", {c: a.name for c, a in keys.aliases.items()})
    pulumi.export("buckets", {p: b.bucket.bucket for p, b in storage.buckets.items()})
    pulumi.export("repositories", {n: r.repository_url for n, r in storage.registry.repositories.items()})
    pulumi.export("auditTrail", storage.trail.trail.arn)
    pulumi.export("workloadLogGroup", storage.workload_logs.log_group.name)
    if storage.volumes is not None:
        pulumi.export("ebsDefaultKey", storage.volumes.default_key.key_arn)
    if storage.lustre is not None:
        pulumi.export("lustre", lustre_output(storage))


def lustre_output(storage: Storage) -> dict[str, Any] | None:
    """Where the Lustre scratch file system is, as stack outputs name it."""
    if storage.lustre is None:
        return None
    fs = storage.lustre.file_system
    return {"fileSystemId": fs.id, "dnsName": fs.dns_name, "mountName": fs.mount_name, "path": DATASETS_PATH}
