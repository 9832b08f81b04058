"""`WorkloadLogs`: the CloudWatch log group workloads on the cluster write to (the network
and the cluster create their own groups, with the same key)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


def workload_log_group_name(prefix: str) -> str:
    """`/mlplat/<stack>/workloads`, e.g. for Fluent Bit's `log_group_name`."""
    project, _, stack = prefix.partition("-")
    return f"/{project}/{stack}/workloads"


@dataclass(frozen=True)
class WorkloadLogsArgs:
    prefix: str  # e.g. "mlplat-prod"
    kms_key_arn: pulumi.Input[str]
    retention_days: int
    force_destroy: bool = False


class WorkloadLogs(pulumi.ComponentResource):
    log_group: aws.cloudwatch.LogGroup

    def __init__(self, name: str, args: WorkloadLogsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:logs:WorkloadLogs", name, None, opts)
        self.log_group = aws.cloudwatch.LogGroup(
            name,
            name=workload_log_group_name(args.prefix),
            kms_key_id=args.kms_key_arn,
            retention_in_days=args.retention_days,
            deletion_protection_enabled=not args.force_destroy,
            # Logs are evidence: they outlive the stack unless it is a throwaway one.
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=not args.force_destroy),
        )
        self.register_outputs({"logGroup": self.log_group.name})
