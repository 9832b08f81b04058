"""Tags: storage and compute carry their data classification and owner, so an inventory
of what holds which class of data, and who answers for it, can be drawn from the account."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import UNKNOWN, Settings, aws_types, get, items, provider_default_tags, resource_rule
from .controls import iso

STORAGE = aws_types(
    "s3/bucket:Bucket",
    "s3/bucketV2:BucketV2",
    "ebs/volume:Volume",
    "efs/fileSystem:FileSystem",
    "fsx/lustreFileSystem:LustreFileSystem",
    "fsx/ontapFileSystem:OntapFileSystem",
    "fsx/openZfsFileSystem:OpenZfsFileSystem",
    "fsx/windowsFileSystem:WindowsFileSystem",
    "ecr/repository:Repository",
    "cloudwatch/logGroup:LogGroup",
    "cloudtrail/trail:Trail",
    "dynamodb/table:Table",
    "rds/instance:Instance",
    "rds/cluster:Cluster",
    "elasticache/replicationGroup:ReplicationGroup",
    "elasticache/serverlessCache:ServerlessCache",
    "sns/topic:Topic",
    "sqs/queue:Queue",
    "kms/key:Key",
)
COMPUTE = aws_types(
    "eks/cluster:Cluster",
    "eks/nodeGroup:NodeGroup",
    "ec2/instance:Instance",
    "ec2/launchTemplate:LaunchTemplate",
)
# The provider's default tags are not applied to Auto Scaling groups, and reach the
# instances and volumes a launch template starts only through its tag specifications.
AUTOSCALING = aws_types("autoscaling/group:Group")
LAUNCH_TEMPLATES = aws_types("ec2/launchTemplate:LaunchTemplate")

TAGS_SCHEMA = {
    "requiredTags": {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "default": ["data-classification", "owner"],
        "description": "Tag keys every storage and compute resource carries (own tags or the provider's default "
        "tags).",
    },
}


def _tag_map(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _missing(tags: Mapping[str, Any], required: list[str]) -> list[str]:
    return [k for k in required if k not in tags or tags[k] in (None, "")]


def _check_tags(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    required = list(settings["requiredTags"])
    if args.resource_type in AUTOSCALING:
        own = {get(t, "key"): get(t, "value") for t in items(get(args.props, "tags"))}
        missing = _missing(own, required)
        if missing:
            report(f"{where} lacks tags {missing} (the provider's default tags do not reach Auto Scaling groups)")
        return
    own_tags = get(args.props, "tags")
    if own_tags is UNKNOWN:
        return
    tags = {**provider_default_tags(args), **_tag_map(own_tags)}
    missing = _missing(tags, required)
    if missing:
        report(f"{where} lacks tags {missing}, on the resource or in its provider's default tags")
    if args.resource_type in LAUNCH_TEMPLATES:
        specs = {get(s, "resourceType"): _tag_map(get(s, "tags")) for s in items(get(args.props, "tagSpecifications"))}
        for launched in ("instance", "volume"):
            gaps = _missing(specs.get(launched, {}), required)
            if gaps:
                report(f"{where}: tagSpecifications for {launched} lack {gaps}; nodes it launches would carry no "
                       "data classification or owner")


storage_and_compute_tagged = resource_rule(
    name="storage-and-compute-tagged",
    description="Storage and compute resources carry the data-classification and owner tags, from the resource or "
    "the provider's default tags; launch templates pass them on to the instances and volumes they start.",
    applies=STORAGE | COMPUTE | AUTOSCALING,
    check=_check_tags,
    config=TAGS_SCHEMA,
    framework=iso("A.5.12", "Classification of information: information is classified and labelled by its owner."),
    remediation="Keep data-classification and owner in the aws.Provider's default_tags (infra/platform.py); give "
    "launch templates tag_specifications for instance and volume with the same tags.",
    tags=["tagging"],
)
