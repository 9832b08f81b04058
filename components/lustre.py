"""`LustreScratch`: FSx for Lustre scratch space for training, next to the GPU nodes,
linked to the datasets bucket."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components import lustre_spec as spec

# FSx writes its logs only to groups whose name starts with this.
FSX_LOG_GROUP_PREFIX = "/aws/fsx/"


@dataclass(frozen=True)
class LustreArgs:
    prefix: str  # e.g. "mlplat-prod"
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]  # private subnet in the GPU pool's zone
    node_security_group_id: pulumi.Input[str]
    kms_key_arn: pulumi.Input[str]  # the datasets key: the file system holds copies of datasets
    datasets_bucket: str
    tenants: tuple[str, ...]  # each gets its own directory linked to its own prefix of the bucket
    storage_capacity_gib: int
    per_unit_storage_throughput: int
    logs_kms_key_arn: pulumi.Input[str]
    log_retention_days: int
    force_destroy: bool = False

    def __post_init__(self) -> None:
        # The stack config refuses these first; a direct caller gets the same line.
        for error in (spec.capacity_error(self.storage_capacity_gib),
                      spec.throughput_error(self.per_unit_storage_throughput), spec.tenants_error(len(self.tenants))):
            if error:
                raise ValueError(error)


class LustreScratch(pulumi.ComponentResource):
    file_system: aws.fsx.LustreFileSystem
    security_group: aws.ec2.SecurityGroup
    associations: dict[str, aws.fsx.DataRepositoryAssociation]  # per tenant

    def __init__(self, name: str, args: LustreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:storage:LustreScratch", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        stateful = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(protect=not args.force_destroy))

        self.security_group = aws.ec2.SecurityGroup(
            name,
            vpc_id=args.vpc_id,
            description="FSx for Lustre scratch: Lustre ports with cluster nodes and between its own servers",
            revoke_rules_on_delete=True,
            tags={"Name": f"{args.prefix}-lustre"},
            opts=child,
        )
        peers = {"nodes": args.node_security_group_id, "self": self.security_group.id}
        for rule in spec.file_system_rules():
            rule_class = aws.vpc.SecurityGroupIngressRule if rule.direction == "ingress" else aws.vpc.SecurityGroupEgressRule
            rule_class(
                f"{name}-{rule.direction}-{rule.peer}-{rule.from_port}",
                security_group_id=self.security_group.id,
                description=rule.description,
                ip_protocol="tcp",
                from_port=rule.from_port,
                to_port=rule.to_port,
                referenced_security_group_id=peers[rule.peer],
                opts=child,
            )
        for rule in spec.client_rules():
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-nodes-from-lustre-{rule.from_port}",
                security_group_id=args.node_security_group_id,
                description=rule.description,
                ip_protocol="tcp",
                from_port=rule.from_port,
                to_port=rule.to_port,
                referenced_security_group_id=self.security_group.id,
                opts=child,
            )

        self.log_group = aws.cloudwatch.LogGroup(
            name,
            name=f"{FSX_LOG_GROUP_PREFIX}{args.prefix}-lustre",
            kms_key_id=args.logs_kms_key_arn,
            retention_in_days=args.log_retention_days,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=not args.force_destroy),
        )
        self.file_system = aws.fsx.LustreFileSystem(
            name,
            deployment_type=spec.DEPLOYMENT_TYPE,
            storage_type="SSD",
            file_system_type_version=spec.LUSTRE_VERSION,
            storage_capacity=args.storage_capacity_gib,
            per_unit_storage_throughput=args.per_unit_storage_throughput,
            # A single subnet id, not a list, in pulumi-aws v7: FSx for Lustre lives in one subnet.
            subnet_ids=args.subnet_id,
            security_group_ids=[self.security_group.id],
            kms_key_id=args.kms_key_arn,
            data_compression_type="LZ4",
            log_configuration=aws.fsx.LustreFileSystemLogConfigurationArgs(
                level="WARN_ERROR", destination=self.log_group.arn
            ),
            # The datasets bucket is the durable copy (everything is exported back to it);
            # backups of scratch space would pay twice for the same bytes.
            automatic_backup_retention_days=0,
            tags={"Name": f"{args.prefix}-lustre"},
            opts=stateful,
        )
        # One link per tenant, its directory to its prefix: a link of the whole bucket would show
        # every tenant's datasets to every pod that mounts the file system, and export what any
        # of them writes there to any prefix.
        self.associations = {
            tenant: aws.fsx.DataRepositoryAssociation(
                f"{name}-{tenant}",
                file_system_id=self.file_system.id,
                file_system_path=spec.tenant_datasets_path(tenant),
                data_repository_path=spec.tenant_datasets_prefix(args.datasets_bucket, tenant),
                batch_import_meta_data_on_create=True,
                # Removing the link must never remove what the file system holds.
                delete_data_in_filesystem=False,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                        events=list(spec.IMPORT_EVENTS)),
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(
                        events=list(spec.EXPORT_EVENTS)),
                ),
                opts=child,
            )
            for tenant in args.tenants
        }
        self.register_outputs(
            {
                "fileSystemId": self.file_system.id,
                "dnsName": self.file_system.dns_name,
                "mountName": self.file_system.mount_name,
            }
        )
