"""Residency: copies of data that would land outside the allowed regions.

S3 ARNs carry no region, so an S3 replication destination is allowed only when the
stack's policy config declares that bucket in-region. Everything else names its
destination region, which must be on the allow-list.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import (
    REGIONS_PROPERTY,
    UNKNOWN,
    Settings,
    arn_region,
    aws_types,
    flag,
    get,
    items,
    resource_rule,
)
from .controls import CROSS_BORDER_TRANSFER, pdpl
from .residency import effective_region

S3_REPLICATION = aws_types("s3/bucketReplicationConfig:BucketReplicationConfig")
S3_BUCKETS = aws_types("s3/bucket:Bucket", "s3/bucketV2:BucketV2")
DYNAMODB = aws_types("dynamodb/table:Table", "dynamodb/globalTable:GlobalTable")
DYNAMODB_REPLICA = aws_types("dynamodb/tableReplica:TableReplica")
SECRETS = aws_types("secretsmanager/secret:Secret")
ECR_REPLICATION = aws_types("ecr/replicationConfiguration:ReplicationConfiguration")
RDS_BACKUP_REPLICATION = aws_types("rds/instanceAutomatedBackupsReplication:InstanceAutomatedBackupsReplication")
EFS_REPLICATION = aws_types("efs/replicationConfiguration:ReplicationConfiguration")
# A read replica (instance) or a replica cluster names its source; an ARN carries its region.
RDS_DATABASES = {"aws:rds/instance:Instance": "replicateSourceDb", "aws:rds/cluster:Cluster": "replicationSourceIdentifier"}
RDS_GLOBAL = aws_types("rds/globalCluster:GlobalCluster")
RDS_SNAPSHOT_COPIES = {"aws:rds/snapshotCopy:SnapshotCopy": "sourceDbSnapshotIdentifier",
                       "aws:rds/clusterSnapshotCopy:ClusterSnapshotCopy": "sourceDbClusterSnapshotIdentifier"}

REPLICATION_TYPES = (
    S3_REPLICATION | S3_BUCKETS | DYNAMODB | DYNAMODB_REPLICA | SECRETS | ECR_REPLICATION | RDS_BACKUP_REPLICATION
    | EFS_REPLICATION | frozenset(RDS_DATABASES) | RDS_GLOBAL | frozenset(RDS_SNAPSHOT_COPIES)
)

REPLICATION_SCHEMA = {
    "allowedRegions": REGIONS_PROPERTY,
    "inRegionDestinationBuckets": {
        "type": "array",
        "items": {"type": "string"},
        "default": [],
        "description": "S3 replication destinations (bucket ARNs or names) a reviewer confirmed are in an allowed "
        "region; S3 ARNs carry no region, so no other destination is accepted.",
    },
}


def _bucket_name(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value.split(":::", 1)[1] if value.startswith("arn:") and ":::" in value else value


def _s3_destinations(args: ResourceValidationArgs) -> list[tuple[str, Any]] | None:
    """(path, destination bucket) of every S3 replication rule; None if the resource
    replicates nothing."""
    props = args.props
    if args.resource_type in S3_REPLICATION:
        rules = items(get(props, "rules"))
        return [(f"rules[{i}].destination.bucket", get(r, "destination", "bucket")) for i, r in enumerate(rules)]
    # Inline replication on the bucket itself (deprecated inputs, still honoured by AWS).
    configs = get(props, "replicationConfiguration")
    found: list[tuple[str, Any]] = []
    if configs is not None:
        for i, rule in enumerate(items(get(configs, "rules"))):
            found.append((f"replicationConfiguration.rules[{i}].destination.bucket", get(rule, "destination", "bucket")))
    for c, config in enumerate(items(get(props, "replicationConfigurations"))):
        for i, rule in enumerate(items(get(config, "rules"))):
            for d, dest in enumerate(items(get(rule, "destinations"))):
                found.append((f"replicationConfigurations[{c}].rules[{i}].destinations[{d}].bucket",
                              get(dest, "bucket")))
    return found if configs is not None or found else None


def _check_replication(args: ResourceValidationArgs, report_violation: ReportViolation, settings: Settings) -> None:
    allowed = list(settings["allowedRegions"])
    kind = args.resource_type
    where = f"{kind} '{args.name}'"

    def outside(region: Any, path: str) -> None:
        if region is UNKNOWN:
            return
        if not isinstance(region, str) or region not in allowed:
            report_violation(f"{where}: {path} replicates data to {region!r}, outside the allowed regions {allowed}")

    if kind in S3_REPLICATION or kind in S3_BUCKETS:
        destinations = _s3_destinations(args)
        if destinations is None:
            args.not_applicable("bucket without inline replication")
        declared = {_bucket_name(b) for b in settings["inRegionDestinationBuckets"]}
        for path, bucket in destinations:
            if bucket is UNKNOWN or _bucket_name(bucket) not in declared:
                shown = "a bucket created in this stack" if bucket is UNKNOWN else repr(bucket)
                report_violation(
                    f"{where}: {path} replicates objects to {shown}; S3 ARNs carry no region, so only destinations "
                    f"listed in inRegionDestinationBuckets are allowed"
                )
        return
    if kind in DYNAMODB:
        replicas = items(get(args.props, "replicas"))
        if not replicas:
            args.not_applicable("table without replicas")
        for i, replica in enumerate(replicas):
            outside(get(replica, "regionName"), f"replicas[{i}].regionName")
        return
    if kind in DYNAMODB_REPLICA:
        outside(effective_region(args), "the replica's region")
        return
    if kind in SECRETS:
        replicas = items(get(args.props, "replicas"))
        if not replicas:
            args.not_applicable("secret without replicas")
        for i, replica in enumerate(replicas):
            outside(get(replica, "region"), f"replicas[{i}].region")
        return
    if kind in ECR_REPLICATION:
        rules = items(get(args.props, "replicationConfiguration", "rules"))
        for i, rule in enumerate(rules):
            for d, dest in enumerate(items(get(rule, "destinations"))):
                outside(get(dest, "region"), f"replicationConfiguration.rules[{i}].destinations[{d}].region")
        return
    if kind in RDS_BACKUP_REPLICATION:
        # Created in the destination region from a source instance elsewhere: both ends count.
        outside(effective_region(args), "the backup replica's region")
        source = get(args.props, "sourceDbInstanceArn")
        if source is not UNKNOWN:
            outside(arn_region(source), "sourceDbInstanceArn")
        return
    if kind in RDS_DATABASES:
        path = RDS_DATABASES[kind]
        source = get(args.props, path)
        if source is None:
            args.not_applicable("a database that replicates from nothing")
        if isinstance(source, str) and source.startswith("arn:"):
            outside(arn_region(source), path)  # a bare identifier is in the replica's own region
        return
    if kind in RDS_GLOBAL:
        report_violation(f"{where}: an Aurora global database replicates its clusters across regions by design; "
                         "keep one regional cluster")
        return
    if kind in RDS_SNAPSHOT_COPIES:
        destination = get(args.props, "destinationRegion")
        if destination is not None:
            outside(destination, "destinationRegion")
        source = get(args.props, RDS_SNAPSHOT_COPIES[kind])
        if isinstance(source, str) and source.startswith("arn:"):
            outside(arn_region(source), RDS_SNAPSHOT_COPIES[kind])
        return
    if kind in EFS_REPLICATION:
        destination = get(args.props, "destination", "region")
        if destination is None:
            args.not_applicable("replica in the source file system's own region")
        outside(destination, "destination.region")


no_cross_region_replication = resource_rule(
    name="no-cross-region-replication",
    description="No replication of data out of the allowed regions: S3 replication (unless the destination is "
    "declared in-region), DynamoDB and Secrets Manager replicas, ECR replication rules, RDS read replicas, replica "
    "clusters, global databases, snapshot copies and automated-backup replication, and EFS replication.",
    applies=REPLICATION_TYPES,
    check=_check_replication,
    config=REPLICATION_SCHEMA,
    framework=CROSS_BORDER_TRANSFER,
    remediation="Remove the replica or replication rule, or point it at an allowed region; declare an in-region S3 "
    "destination bucket in policies/config/<env>.json (inRegionDestinationBuckets).",
    tags=["residency"],
)


# --- DynamoDB: one table in one region ------------------------------------------------

GLOBAL_TABLES = aws_types("dynamodb/globalTable:GlobalTable")
TABLES = aws_types("dynamodb/table:Table")


def _check_tables(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    if args.resource_type in GLOBAL_TABLES:
        report(f"{where}: a global table copies every item to each of its regions; use a regional table")
        return
    if args.resource_type in DYNAMODB_REPLICA:
        report(f"{where}: a table replica makes its table a global table; remove it")
        return
    replicas = items(get(args.props, "replicas"))
    if not replicas:
        return  # a regional table: judged, and passes
    regions = ", ".join(str(get(r, "regionName")) for r in replicas)
    report(f"{where}: replicas ({regions}) make it a global table, which copies every item to other regions and "
           "is managed outside this stack's region; remove replicas")


dynamodb_single_region_tables = resource_rule(
    name="dynamodb-single-region-tables",
    description="DynamoDB tables have no replicas and no global tables exist, even to regions the allow-list "
    "holds: a global table's items leave the stack's region, where its keys and backups are governed.",
    applies=TABLES | GLOBAL_TABLES | DYNAMODB_REPLICA,
    check=_check_tables,
    framework=CROSS_BORDER_TRANSFER,
    remediation="Remove `replicas` from the table and any GlobalTable or TableReplica; one regional table per "
    "environment, restored from its in-region backups.",
    tags=["residency"],
)


# --- Multi-region KMS keys ----------------------------------------------------------

KEYS = aws_types("kms/key:Key")
REPLICA_KEYS = aws_types("kms/replicaKey:ReplicaKey", "kms/replicaExternalKey:ReplicaExternalKey")


def _check_single_region_key(args: ResourceValidationArgs, report_violation: ReportViolation,
                             settings: Settings) -> None:
    if args.resource_type in REPLICA_KEYS:
        report_violation(
            f"{args.resource_type} '{args.name}' replicates a multi-region key's material to another region"
        )
        return
    multi_region = flag(get(args.props, "multiRegion"))
    if multi_region is True or multi_region is UNKNOWN:
        report_violation(
            f"{args.resource_type} '{args.name}' is a multi-region key: its material can be replicated to any "
            "region; set multiRegion=false"
        )


kms_keys_single_region = resource_rule(
    name="kms-keys-single-region",
    description="KMS keys are single-region: no multi-region primary keys and no replica keys.",
    applies=KEYS | REPLICA_KEYS,
    check=_check_single_region_key,
    framework=pdpl("Article 22", "Key material that decrypts personal data does not leave the State."),
    remediation="Create the key with multiRegion=false (the default) and remove kms.ReplicaKey resources.",
    tags=["residency", "encryption"],
)
