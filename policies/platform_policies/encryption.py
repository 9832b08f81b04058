"""Encryption at rest with customer-managed KMS keys, service by service.

AWS encrypts most storage by default with keys it owns or manages; those do not count.
Only a key of our own (a key id or ARN, an alias of ours, or a reference to a key created
in the stack) lets the data's owner revoke access and see every use in CloudTrail.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import UNKNOWN, Settings, aws_types, flag, get, items, key_problem, resource_rule
from .controls import cis_eks, iso, pdpl

ENCRYPTION_CONTROL = pdpl("Article 20(1)(a)", "Encryption of personal data as a technical security measure.")
CRYPTO_REMEDIATION = "Pass one of the stack's customer-managed keys (components/keys.py, one per data class) " \
    "as the resource's KMS key; never rely on the AWS-managed or AWS-owned default."


def _require_key(report_violation: ReportViolation, where: str, path: str, value: Any) -> None:
    problem = key_problem(value, path)
    if problem:
        report_violation(f"{where}: {problem}")


def _require_true(report_violation: ReportViolation, where: str, path: str, value: Any, why: str) -> None:
    state = flag(value)
    if state is not True and state is not UNKNOWN:
        report_violation(f"{where}: {path} is {value!r}; {why}")


# --- Block storage: EBS volumes, launch templates, instances, node groups -------------

VOLUMES = aws_types("ebs/volume:Volume")
LAUNCH_TEMPLATES = aws_types("ec2/launchTemplate:LaunchTemplate")
INSTANCES = aws_types("ec2/instance:Instance")
NODE_GROUPS = aws_types("eks/nodeGroup:NodeGroup")
EBS_DEFAULTS = aws_types("ebs/encryptionByDefault:EncryptionByDefault")


def _check_block_storage(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind, props = args.resource_type, args.props
    where = f"{kind} '{args.name}'"
    if kind in VOLUMES:
        _require_true(report, where, "encrypted", get(props, "encrypted"), "set encrypted=true")
        _require_key(report, where, "kmsKeyId", get(props, "kmsKeyId"))
    elif kind in LAUNCH_TEMPLATES:
        mappings = items(get(props, "blockDeviceMappings"))
        ebs = [(i, get(m, "ebs")) for i, m in enumerate(mappings) if get(m, "ebs") is not None]
        if not ebs:
            report(f"{where}: no EBS block device mapping, so the root volume takes the AMI's unencrypted "
                   "snapshot settings; map the root device with encrypted=\"true\" and a kmsKeyId")
        for i, device in ebs:
            path = f"blockDeviceMappings[{i}].ebs"
            _require_true(report, where, f"{path}.encrypted", get(device, "encrypted"), 'set it to "true"')
            _require_key(report, where, f"{path}.kmsKeyId", get(device, "kmsKeyId"))
    elif kind in INSTANCES:
        root = get(props, "rootBlockDevice")
        if root is None and get(props, "launchTemplate") is None:
            report(f"{where}: no rootBlockDevice and no launch template, so the root volume is not encrypted "
                   "with a customer-managed key")
        devices = ([("rootBlockDevice", root)] if root is not None else []) + [
            (f"ebsBlockDevices[{i}]", d) for i, d in enumerate(items(get(props, "ebsBlockDevices")))
        ]
        for path, device in devices:
            _require_true(report, where, f"{path}.encrypted", get(device, "encrypted"), "set encrypted=true")
            _require_key(report, where, f"{path}.kmsKeyId", get(device, "kmsKeyId"))
    elif kind in NODE_GROUPS:
        if get(props, "launchTemplate") is None:
            report(f"{where}: no launch template, so node root volumes are not encrypted with a customer-managed "
                   "key; attach a launch template whose block device mapping sets one")
    elif kind in EBS_DEFAULTS:
        _require_true(report, where, "enabled", get(props, "enabled"), "account-wide EBS encryption must stay on")


block_storage_encrypted_with_cmk = resource_rule(
    name="block-storage-encrypted-with-cmk",
    description="EBS volumes, launch-template and instance block devices are encrypted with a customer-managed "
    "KMS key; node groups use a launch template that says so.",
    applies=VOLUMES | LAUNCH_TEMPLATES | INSTANCES | NODE_GROUPS | EBS_DEFAULTS,
    check=_check_block_storage,
    framework=ENCRYPTION_CONTROL,
    remediation=CRYPTO_REMEDIATION + " On launch templates `encrypted` is the string \"true\".",
    tags=["encryption"],
)


# --- File systems: EFS and FSx -------------------------------------------------------

EFS = aws_types("efs/fileSystem:FileSystem")
LUSTRE = aws_types("fsx/lustreFileSystem:LustreFileSystem")
OTHER_FSX = aws_types(
    "fsx/ontapFileSystem:OntapFileSystem",
    "fsx/openZfsFileSystem:OpenZfsFileSystem",
    "fsx/windowsFileSystem:WindowsFileSystem",
)


def _check_file_systems(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind, props = args.resource_type, args.props
    where = f"{kind} '{args.name}'"
    if kind in EFS:
        _require_true(report, where, "encrypted", get(props, "encrypted"), "set encrypted=true")
        _require_key(report, where, "kmsKeyId", get(props, "kmsKeyId"))
    elif kind in LUSTRE:
        deployment = get(props, "deploymentType")
        if deployment is not UNKNOWN and not str(deployment or "SCRATCH_1").startswith("PERSISTENT"):
            report(f"{where}: deploymentType {deployment or 'SCRATCH_1 (default)'} is always encrypted with an "
                   "FSx-managed key; use PERSISTENT_2 with a kmsKeyId")
            return
        _require_key(report, where, "kmsKeyId", get(props, "kmsKeyId"))
    else:
        _require_key(report, where, "kmsKeyId", get(props, "kmsKeyId"))


file_systems_encrypted_with_cmk = resource_rule(
    name="file-systems-encrypted-with-cmk",
    description="EFS and FSx file systems are encrypted with a customer-managed KMS key (FSx for Lustre: a "
    "PERSISTENT deployment, since scratch file systems only take FSx-managed keys).",
    applies=EFS | LUSTRE | OTHER_FSX,
    check=_check_file_systems,
    framework=ENCRYPTION_CONTROL,
    remediation=CRYPTO_REMEDIATION,
    tags=["encryption"],
)


# --- EKS secrets ----------------------------------------------------------------------

EKS_CLUSTERS = aws_types("eks/cluster:Cluster")


def _check_eks_secrets(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    config = get(args.props, "encryptionConfig")
    if config is None:
        report(f"{where}: no encryptionConfig, so Kubernetes Secrets sit in etcd without envelope encryption")
        return
    resources = get(config, "resources")
    if resources is not UNKNOWN and "secrets" not in items(resources):
        report(f"{where}: encryptionConfig.resources is {list(items(resources))!r}; it must include \"secrets\"")
    _require_key(report, where, "encryptionConfig.provider.keyArn", get(config, "provider", "keyArn"))


eks_secrets_encrypted_with_cmk = resource_rule(
    name="eks-secrets-encrypted-with-cmk",
    description="EKS clusters envelope-encrypt Kubernetes Secrets with a customer-managed KMS key.",
    applies=EKS_CLUSTERS,
    check=_check_eks_secrets,
    framework=cis_eks("5.3.1", "Ensure Kubernetes Secrets are encrypted using Customer Master Keys (CMKs) managed "
                      "in AWS KMS"),
    remediation="Set encryptionConfig {resources: [\"secrets\"], provider.keyArn: <the cluster CMK>} when the "
    "cluster is created.",
    tags=["encryption", "kubernetes"],
)


# --- Logs -------------------------------------------------------------------------------

LOG_GROUPS = aws_types("cloudwatch/logGroup:LogGroup")
TRAILS = aws_types("cloudtrail/trail:Trail")


def _check_logs(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    _require_key(report, f"{args.resource_type} '{args.name}'", "kmsKeyId", get(args.props, "kmsKeyId"))


logs_encrypted_with_cmk = resource_rule(
    name="logs-encrypted-with-cmk",
    description="CloudWatch log groups and CloudTrail trails are encrypted with a customer-managed KMS key.",
    applies=LOG_GROUPS | TRAILS,
    check=_check_logs,
    framework=iso("A.8.15", "Logging: logs are protected against unauthorized access."),
    remediation=CRYPTO_REMEDIATION + " The logs key's policy must allow the logs.<region>.amazonaws.com and "
    "cloudtrail.amazonaws.com principals.",
    tags=["encryption"],
)


# --- Container registries --------------------------------------------------------------

REPOSITORIES = aws_types("ecr/repository:Repository")


def _check_registries(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    configs = items(get(args.props, "encryptionConfigurations"))
    if not configs:
        report(f"{where}: no encryptionConfigurations, so images are encrypted with an AWS-owned key (AES256)")
        return
    for i, config in enumerate(configs):
        kind = get(config, "encryptionType")
        if kind is not UNKNOWN and kind not in ("KMS", "KMS_DSSE"):
            report(f"{where}: encryptionConfigurations[{i}].encryptionType is {kind!r}; use \"KMS\" with a kmsKey")
            continue
        _require_key(report, where, f"encryptionConfigurations[{i}].kmsKey", get(config, "kmsKey"))


registries_encrypted_with_cmk = resource_rule(
    name="registries-encrypted-with-cmk",
    description="ECR repositories encrypt images with a customer-managed KMS key.",
    applies=REPOSITORIES,
    check=_check_registries,
    framework=ENCRYPTION_CONTROL,
    remediation=CRYPTO_REMEDIATION + " ECR fixes encryption at creation: set encryptionConfigurations "
    "[{encryptionType: KMS, kmsKey: <key ARN>}].",
    tags=["encryption"],
)


# --- Databases and caches -------------------------------------------------------------

RDS = aws_types("rds/instance:Instance", "rds/cluster:Cluster")
CACHE_GROUPS = aws_types("elasticache/replicationGroup:ReplicationGroup")
CACHE_CLUSTERS = aws_types("elasticache/cluster:Cluster")
SERVERLESS_CACHES = aws_types("elasticache/serverlessCache:ServerlessCache")
DYNAMODB = aws_types("dynamodb/table:Table")


def _check_databases(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind, props = args.resource_type, args.props
    where = f"{kind} '{args.name}'"
    if kind in RDS:
        _require_true(report, where, "storageEncrypted", get(props, "storageEncrypted"), "set storageEncrypted=true")
        _require_key(report, where, "kmsKeyId", get(props, "kmsKeyId"))
    elif kind in CACHE_GROUPS:
        _require_true(report, where, "atRestEncryptionEnabled", get(props, "atRestEncryptionEnabled"),
                      "set atRestEncryptionEnabled=true")
        _require_key(report, where, "kmsKeyId", get(props, "kmsKeyId"))
    elif kind in CACHE_CLUSTERS:
        if get(props, "replicationGroupId") is None:
            report(f"{where}: a stand-alone cache cluster cannot be encrypted at rest with a customer-managed key; "
                   "use a ReplicationGroup or ServerlessCache with a kmsKeyId")
    elif kind in SERVERLESS_CACHES:
        _require_key(report, where, "kmsKeyId", get(props, "kmsKeyId"))
    elif kind in DYNAMODB:
        sse = get(props, "serverSideEncryption")
        if sse is UNKNOWN:
            return
        _require_true(report, where, "serverSideEncryption.enabled", get(sse, "enabled") if sse else None,
                      "without it the table uses an AWS-owned key")
        _require_key(report, where, "serverSideEncryption.kmsKeyArn", get(sse, "kmsKeyArn") if sse else None)


databases_encrypted_with_cmk = resource_rule(
    name="databases-encrypted-with-cmk",
    description="RDS instances and clusters, ElastiCache and DynamoDB tables are encrypted at rest with a "
    "customer-managed KMS key.",
    applies=RDS | CACHE_GROUPS | CACHE_CLUSTERS | SERVERLESS_CACHES | DYNAMODB,
    check=_check_databases,
    framework=ENCRYPTION_CONTROL,
    remediation=CRYPTO_REMEDIATION,
    tags=["encryption"],
)


# --- Secrets --------------------------------------------------------------------------

SECRETS = aws_types("secretsmanager/secret:Secret")


def _check_secrets(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    _require_key(report, f"{args.resource_type} '{args.name}'", "kmsKeyId", get(args.props, "kmsKeyId"))


secrets_encrypted_with_cmk = resource_rule(
    name="secrets-encrypted-with-cmk",
    description="Secrets Manager secrets are encrypted with a customer-managed KMS key, not aws/secretsmanager.",
    applies=SECRETS,
    check=_check_secrets,
    framework=ENCRYPTION_CONTROL,
    remediation=CRYPTO_REMEDIATION,
    tags=["encryption"],
)


# --- Queues and topics ----------------------------------------------------------------

TOPICS = aws_types("sns/topic:Topic")
QUEUES = aws_types("sqs/queue:Queue")


def _check_messaging(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    if args.resource_type in QUEUES and flag(get(args.props, "sqsManagedSseEnabled")) is True:
        report(f"{where}: sqsManagedSseEnabled uses an SQS-owned key; set kmsMasterKeyId instead")
        return
    _require_key(report, where, "kmsMasterKeyId", get(args.props, "kmsMasterKeyId"))


messaging_encrypted_with_cmk = resource_rule(
    name="messaging-encrypted-with-cmk",
    description="SNS topics and SQS queues are encrypted with a customer-managed KMS key.",
    applies=TOPICS | QUEUES,
    check=_check_messaging,
    framework=ENCRYPTION_CONTROL,
    remediation=CRYPTO_REMEDIATION,
    tags=["encryption"],
)


# --- Key rotation ---------------------------------------------------------------------

KEYS = aws_types("kms/key:Key")
EXTERNAL_KEYS = aws_types("kms/externalKey:ExternalKey")


def _check_rotation(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    if args.resource_type in EXTERNAL_KEYS:
        report(f"{where}: imported key material cannot rotate automatically; use a KMS-generated key, or exempt "
               "it in policy config with the manual rotation procedure as the reason")
        return
    spec = get(args.props, "customerMasterKeySpec")
    usage = get(args.props, "keyUsage")
    if spec not in (None, "SYMMETRIC_DEFAULT", UNKNOWN) or usage not in (None, "ENCRYPT_DECRYPT", UNKNOWN):
        args.not_applicable(f"KMS rotates only symmetric encryption keys ({spec or usage})")
    _require_true(report, where, "enableKeyRotation", get(args.props, "enableKeyRotation"),
                  "set enableKeyRotation=true")


kms_keys_rotate = resource_rule(
    name="kms-keys-rotate",
    description="Customer-managed symmetric KMS keys rotate their key material automatically.",
    applies=KEYS | EXTERNAL_KEYS,
    check=_check_rotation,
    framework=iso("A.8.24", "Use of cryptography: cryptographic keys are managed through their life cycle."),
    remediation="Create keys with enableKeyRotation=true (rotationPeriodInDays defaults to 365).",
    tags=["encryption"],
)


__all__ = [
    "block_storage_encrypted_with_cmk",
    "databases_encrypted_with_cmk",
    "eks_secrets_encrypted_with_cmk",
    "file_systems_encrypted_with_cmk",
    "kms_keys_rotate",
    "logs_encrypted_with_cmk",
    "messaging_encrypted_with_cmk",
    "registries_encrypted_with_cmk",
    "secrets_encrypted_with_cmk",
]
