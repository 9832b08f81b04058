"""`TrainingJob`: a distributed training run on a GPU pool, with the checks that prove the
pool's nodes are healthy (see components/training_spec.py for what each object holds)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.iam import PodIdentityRole, PodIdentityRoleArgs
from components.training_spec import (
    TrainingPlan,
    collectives_jobset,
    gpu_check_daemonset,
    gpu_check_service_account,
    s3_statements,
    service_account,
    training_jobset,
)


@dataclass(frozen=True)
class S3Access:
    """The buckets the job reads and writes through Pod Identity, and their keys."""

    datasets_arn: pulumi.Input[str]
    checkpoints_arn: pulumi.Input[str]
    models_arn: pulumi.Input[str]
    datasets_key_arn: pulumi.Input[str]
    checkpoints_key_arn: pulumi.Input[str]
    models_key_arn: pulumi.Input[str]


@dataclass(frozen=True)
class TrainingJobArgs:
    plan: TrainingPlan
    role_name: str  # the Pod Identity role's IAM name
    cluster_name: pulumi.Input[str] | None  # where the Pod Identity association is made
    s3: S3Access | None = None  # None: the job gets no AWS credentials
    collective_check: bool = False  # run the all-reduce check (multi-node EFA jobs)
    # The tenant's namespace, the queues, JobSet, the device plugins and the scratch claim.
    depends_on: tuple[pulumi.Resource, ...] = ()


class TrainingJob(pulumi.ComponentResource):
    """The trainer's JobSet (one pod per node, queued through the tenant's Kueue queue),
    the all-reduce bandwidth check's JobSet, the GPU node check's DaemonSet, and a service
    account with Pod Identity for S3. Kubernetes objects use the `kubernetes` provider of
    `opts.providers`, the IAM role the `aws` one."""

    jobset: k8s.apiextensions.CustomResource
    collectives: k8s.apiextensions.CustomResource | None
    gpu_check: k8s.apps.v1.DaemonSet
    role: PodIdentityRole | None

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:training:TrainingJob", name, None, opts)
        plan = args.plan
        child = pulumi.ResourceOptions(parent=self)
        after = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        account = service_account(plan)
        sa = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=account["metadata"],
                                        automount_service_account_token=False, opts=after)
        ready: list[pulumi.Resource] = [sa]
        self.role = None
        if args.s3 is not None:
            s3 = args.s3
            resolved = pulumi.Output.all(
                s3.datasets_arn, s3.checkpoints_arn, s3.models_arn,
                s3.datasets_key_arn, s3.checkpoints_key_arn, s3.models_key_arn,
            ).apply(lambda a: s3_statements(a[0], a[1], a[2], read_key_arns=[a[3]], write_key_arns=[a[4], a[5]]))
            # One Output per statement, as the role takes them; how many there are does not
            # depend on the ARNs.
            count = len(s3_statements("", "", "", [], []))
            statements = tuple(resolved.apply(lambda all_, i=i: all_[i]) for i in range(count))
            self.role = PodIdentityRole(
                f"{name}-identity",
                PodIdentityRoleArgs(role_name=args.role_name, namespace=plan.namespace,
                                    service_account=plan.service_account, cluster_name=args.cluster_name,
                                    statements=statements),
                opts=child,
            )
            if self.role.association is not None:
                ready.append(self.role.association)

        check_account = gpu_check_service_account(plan)
        check_sa = k8s.core.v1.ServiceAccount(f"{name}-gpu-check-sa", metadata=check_account["metadata"],
                                              automount_service_account_token=False, opts=after)
        daemon = gpu_check_daemonset(plan)
        self.gpu_check = k8s.apps.v1.DaemonSet(
            f"{name}-gpu-check", metadata=daemon["metadata"], spec=daemon["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, check_sa]),
        )

        # Credentials and the queue before the pods: a pod started before its Pod Identity
        # association gets no AWS credentials until it restarts.
        run = pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *ready])
        self.collectives = None
        if args.collective_check:
            check = collectives_jobset(plan)
            self.collectives = k8s.apiextensions.CustomResource(
                f"{name}-allreduce", api_version=check["apiVersion"], kind=check["kind"],
                metadata=check["metadata"], spec=check["spec"], opts=run,
            )
        job = training_jobset(plan)
        self.jobset = k8s.apiextensions.CustomResource(
            name, api_version=job["apiVersion"], kind=job["kind"], metadata=job["metadata"], spec=job["spec"],
            opts=run,
        )
        self.register_outputs({
            "jobset": job["metadata"]["name"],
            "namespace": plan.namespace,
            "roleArn": self.role.role.arn if self.role else None,
        })
