"""Key policies of the platform's customer-managed keys, as plain data.

Each key names the account's administrators (who manage the key but cannot use it) and,
for use, only the AWS services that store data under it, each pinned to the stack's
region with `kms:ViaService` or to the account and resource with `aws:SourceAccount` /
`aws:SourceArn`. Nothing here imports Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass

# What the account's administrators may do: manage the key, never encrypt or decrypt
# with it. `kms:CreateGrant` is missing on purpose: a grant is a way to use the key.
ADMIN_ACTIONS = (
    "kms:CancelKeyDeletion",
    "kms:CreateAlias",
    "kms:DeleteAlias",
    "kms:DescribeKey",
    "kms:DisableKey",
    "kms:DisableKeyRotation",
    "kms:EnableKey",
    "kms:EnableKeyRotation",
    "kms:GetKeyPolicy",
    "kms:GetKeyRotationStatus",
    "kms:ListGrants",
    "kms:ListKeyRotations",
    "kms:ListResourceTags",
    "kms:PutKeyPolicy",
    "kms:RevokeGrant",
    "kms:RotateKeyOnDemand",
    "kms:ScheduleKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:UpdateAlias",
    "kms:UpdateKeyDescription",
)

# Envelope encryption as storage services perform it.
USE_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*")

# Services that keep a long-lived grant on the key (EBS volumes, FSx, ECR, EKS) create it
# themselves; the caller may only create grants that a service asks for.
GRANT_ACTIONS = ("kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant")

# Service-linked roles that use keys directly. They are matched by `aws:PrincipalArn`
# instead of being named as principals: KMS refuses a policy naming a role that does not
# exist yet, and these roles appear only when the service is first used in the account.
AUTOSCALING_ROLE = "role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
FSX_S3_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"


@dataclass(frozen=True)
class KeyUse:
    """Who besides the administrators may use one key, and for what.

    Each data class of the platform gets one of these (see `data_class_uses`), so every
    grant of every key is reviewable in one place.
    """

    s3_buckets: tuple[str, ...] = ()  # buckets whose default encryption is this key
    s3_access_log_sources: tuple[str, ...] = ()  # buckets whose access logs S3 writes under it
    fsx: bool = False  # FSx for Lustre file systems encrypted with it
    fsx_repository_buckets: tuple[str, ...] = ()  # buckets FSx data repositories link to
    ecr: bool = False
    cloudwatch_logs: bool = False
    cloudtrail_trail: str = ""  # name of the trail that encrypts its logs with it
    ebs: bool = False  # EBS volumes, including node root volumes launched by Auto Scaling
    eks: bool = False  # Kubernetes secrets envelope encryption
    secretsmanager: bool = False  # Secrets Manager secrets (the deploy runner's GitHub token)
    codebuild: bool = False  # CodeBuild projects (the deploy runner's build data)
    rds: bool = False  # RDS storage, snapshots and Performance Insights
    elasticache: bool = False  # ElastiCache data at rest and its snapshots

    @property
    def services(self) -> tuple[str, ...]:
        """The AWS services this key serves, for descriptions and reports."""
        named = [
            ("s3", bool(self.s3_buckets or self.s3_access_log_sources or self.fsx_repository_buckets)),
            ("fsx", self.fsx),
            ("ecr", self.ecr),
            ("logs", self.cloudwatch_logs),
            ("cloudtrail", bool(self.cloudtrail_trail)),
            ("ec2", self.ebs),
            ("eks", self.eks),
            ("secretsmanager", self.secretsmanager),
            ("codebuild", self.codebuild),
            ("rds", self.rds),
            ("elasticache", self.elasticache),
        ]
        return tuple(name for name, used in named if used)


def _root(account: str, partition: str) -> dict:
    return {"AWS": f"arn:{partition}:iam::{account}:root"}


def _bucket_contexts(buckets: tuple[str, ...], partition: str) -> list[str]:
    # With S3 Bucket Keys the encryption context is the bucket ARN; objects written
    # without one carry the object ARN.
    return [arn for b in buckets for arn in (f"arn:{partition}:s3:::{b}", f"arn:{partition}:s3:::{b}/*")]


def _via(service: str, region: str, account: str) -> dict:
    return {"StringEquals": {"kms:ViaService": f"{service}.{region}.amazonaws.com", "kms:CallerAccount": account}}


def _through_service(sid: str, service: str, region: str, account: str, partition: str,
                     grants: bool = True) -> list[dict]:
    """Principals of the account may use the key only through `service` in `region`;
    their own IAM policies still have to allow it."""
    statements = [
        {
            "Sid": sid,
            "Effect": "Allow",
            "Principal": _root(account, partition),
            "Action": list(USE_ACTIONS),
            "Resource": "*",
            "Condition": _via(service, region, account),
        }
    ]
    if grants:
        condition = _via(service, region, account)
        condition["Bool"] = {"kms:GrantIsForAWSResource": "true"}
        statements.append(
            {
                "Sid": f"{sid}Grants",
                "Effect": "Allow",
                "Principal": _root(account, partition),
                "Action": list(GRANT_ACTIONS),
                "Resource": "*",
                "Condition": condition,
            }
        )
    return statements


def key_policy(account: str, region: str, use: KeyUse, partition: str = "aws") -> dict:
    """The key policy document for one key."""
    statements: list[dict] = [
        {
            "Sid": "KeyAdministration",
            "Effect": "Allow",
            "Principal": _root(account, partition),
            "Action": list(ADMIN_ACTIONS),
            "Resource": "*",
        }
    ]
    if use.s3_buckets:
        s3 = _through_service("UseThroughS3", "s3", region, account, partition, grants=False)[0]
        s3["Condition"]["StringLike"] = {"kms:EncryptionContext:aws:s3:arn": _bucket_contexts(use.s3_buckets, partition)}
        statements.append(s3)
    if use.s3_access_log_sources:
        statements.append(
            {
                "Sid": "S3ServerAccessLogDelivery",
                "Effect": "Allow",
                "Principal": {"Service": "logging.s3.amazonaws.com"},
                "Action": ["kms:GenerateDataKey*", "kms:Decrypt"],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": account},
                    "ArnLike": {"aws:SourceArn": [f"arn:{partition}:s3:::{b}" for b in use.s3_access_log_sources]},
                },
            }
        )
    if use.fsx:
        statements += _through_service("UseThroughFSx", "fsx", region, account, partition)
    if use.fsx_repository_buckets:
        # FSx reads and writes the linked bucket as its S3 service-linked role, whose name
        # carries the file system id; only that role, only through S3 in this region, and
        # only on the linked buckets.
        statements.append(
            {
                "Sid": "FSxDataRepositoryThroughS3",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": list(USE_ACTIONS),
                "Resource": "*",
                "Condition": {
                    **_via("s3", region, account),
                    "ArnLike": {"aws:PrincipalArn": f"arn:{partition}:iam::{account}:{FSX_S3_ROLE}"},
                    "StringLike": {
                        "kms:EncryptionContext:aws:s3:arn": _bucket_contexts(use.fsx_repository_buckets, partition)
                    },
                },
            }
        )
    if use.ecr:
        statements += _through_service("UseThroughECR", "ecr", region, account, partition)
    if use.cloudwatch_logs:
        statements.append(
            {
                "Sid": "CloudWatchLogs",
                "Effect": "Allow",
                "Principal": {"Service": f"logs.{region}.amazonaws.com"},
                "Action": ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                "Resource": "*",
                "Condition": {
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": f"arn:{partition}:logs:{region}:{account}:log-group:*"
                    }
                },
            }
        )
    if use.cloudtrail_trail:
        trail_arn = f"arn:{partition}:cloudtrail:{region}:{account}:trail/{use.cloudtrail_trail}"
        source = {"StringEquals": {"aws:SourceArn": trail_arn, "aws:SourceAccount": account}}
        statements += [
            {
                "Sid": "CloudTrailEncryptLogs",
                "Effect": "Allow",
                "Principal": {"Service": "cloudtrail.amazonaws.com"},
                "Action": "kms:GenerateDataKey*",
                "Resource": "*",
                "Condition": {
                    **source,
                    "StringLike": {"kms:EncryptionContext:aws:cloudtrail:arn": trail_arn},
                },
            },
            {
                "Sid": "CloudTrailDescribeKey",
                "Effect": "Allow",
                "Principal": {"Service": "cloudtrail.amazonaws.com"},
                "Action": "kms:DescribeKey",
                "Resource": "*",
                "Condition": source,
            },
            {
                # Reading the trail: principals of the account whose IAM policies allow it.
                "Sid": "CloudTrailDecryptLogs",
                "Effect": "Allow",
                "Principal": _root(account, partition),
                "Action": ["kms:Decrypt", "kms:ReEncryptFrom"],
                "Resource": "*",
                "Condition": {
                    "StringEquals": {"kms:CallerAccount": account},
                    "StringLike": {"kms:EncryptionContext:aws:cloudtrail:arn": trail_arn},
                },
            },
        ]
    if use.ebs:
        statements += _through_service("UseThroughEC2", "ec2", region, account, partition)
        # Managed node groups launch through Auto Scaling, whose service-linked role
        # attaches the CMK-encrypted root volumes; without this nodes never start.
        role = {
            "StringEquals": {"kms:CallerAccount": account},
            "ArnEquals": {"aws:PrincipalArn": f"arn:{partition}:iam::{account}:{AUTOSCALING_ROLE}"},
        }
        statements += [
            {
                "Sid": "AutoScalingVolumes",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": list(USE_ACTIONS),
                "Resource": "*",
                "Condition": role,
            },
            {
                "Sid": "AutoScalingVolumeGrants",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": "kms:CreateGrant",
                "Resource": "*",
                "Condition": {**role, "Bool": {"kms:GrantIsForAWSResource": "true"}},
            },
        ]
    if use.eks:
        statements += _through_service("UseThroughEKS", "eks", region, account, partition)
    if use.secretsmanager:
        statements += _through_service("UseThroughSecretsManager", "secretsmanager", region, account, partition)
    if use.codebuild:
        statements += _through_service("UseThroughCodeBuild", "codebuild", region, account, partition)
    if use.rds:
        statements += _through_service("UseThroughRDS", "rds", region, account, partition)
    if use.elasticache:
        statements += _through_service("UseThroughElastiCache", "elasticache", region, account, partition)
    return {"Version": "2012-10-17", "Id": "mlplat-key-policy", "Statement": statements}


@dataclass(frozen=True)
class StorageNames:
    """Names the key policies must know before anything exists."""

    buckets: dict[str, str]  # purpose -> bucket name (datasets, models, checkpoints, audit, access-logs)
    trail: str
    lustre: bool


# Buckets whose objects are data; the log buckets hold evidence about them.
DATA_BUCKETS = ("datasets", "models", "checkpoints")
LOG_BUCKETS = ("audit", "access-logs")


def data_class_uses(names: StorageNames) -> dict[str, KeyUse]:
    """What each data class's key serves.

    Merged classes and why: the audit trail, the S3 access logs and every CloudWatch log
    group share the "logs" key, because they are one class of data (evidence about the
    platform, read by the same security team). Container images get their own key.
    """
    buckets = names.buckets
    return {
        "datasets": KeyUse(
            s3_buckets=(buckets["datasets"],),
            # Lustre scratch holds copies of datasets and writes results back to them.
            fsx=names.lustre,
            fsx_repository_buckets=(buckets["datasets"],) if names.lustre else (),
        ),
        "models": KeyUse(s3_buckets=(buckets["models"],)),
        "checkpoints": KeyUse(s3_buckets=(buckets["checkpoints"],)),
        "logs": KeyUse(
            s3_buckets=tuple(buckets[p] for p in LOG_BUCKETS),
            s3_access_log_sources=tuple(buckets[p] for p in (*DATA_BUCKETS, "audit")),
            cloudwatch_logs=True,
            cloudtrail_trail=names.trail,
        ),
        # The cluster's secrets, and the deploy runner's (its GitHub token and build data).
        "cluster": KeyUse(eks=True, secretsmanager=True, codebuild=True),
        "volumes": KeyUse(ebs=True),
        "images": KeyUse(ecr=True),
        # The tracking database and its users' secrets (the RDS-managed password included):
        # one class, read by the tracking server alone.
        "tracking": KeyUse(rds=True, secretsmanager=True),
        # The feature store's online copy (ElastiCache) and its snapshots; the offline data
        # and registry are in the datasets bucket under that class's key.
        "features": KeyUse(elasticache=True),
    }
