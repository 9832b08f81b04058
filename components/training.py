"""`TrainingJob`: a distributed training run on a GPU pool, with the checks that prove the
pool's nodes are healthy (see components/training_spec.py for what each object holds)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.training_spec import (
    TrainingPlan,
    collectives_jobset,
    gpu_check_daemonset,
    gpu_check_service_account,
    service_account,
    training_config_maps,
    training_jobset,
)


@dataclass(frozen=True)
class TrainingJobArgs:
    plan: TrainingPlan
    collective_check: bool = False  # run the all-reduce check (multi-node jobs on EFA or an RDMA fabric)
    # The tenant's namespace, the queues, JobSet, the device plugins and the scratch claim.
    depends_on: tuple[pulumi.Resource, ...] = ()


class TrainingJob(pulumi.ComponentResource):
    """The trainer's JobSet (one pod per node, queued through the tenant's Kueue queue),
    the all-reduce bandwidth check's JobSet, the GPU node check's DaemonSet, and the
    service account the cloud layer's Pod Identity association names (its role:
    `training_identity`, infra/training.py)."""

    jobset: k8s.apiextensions.CustomResource
    collectives: k8s.apiextensions.CustomResource | None
    config_maps: list[k8s.core.v1.ConfigMap]
    gpu_check: k8s.apps.v1.DaemonSet

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:training:TrainingJob", name, None, opts)
        plan = args.plan
        after = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        account = service_account(plan)
        sa = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=account["metadata"],
                                        automount_service_account_token=False, opts=after)
        ready: list[pulumi.Resource] = [sa]

        check_account = gpu_check_service_account(plan)
        check_sa = k8s.core.v1.ServiceAccount(f"{name}-gpu-check-sa", metadata=check_account["metadata"],
                                              automount_service_account_token=False, opts=after)
        daemon = gpu_check_daemonset(plan)
        self.gpu_check = k8s.apps.v1.DaemonSet(
            f"{name}-gpu-check", metadata=daemon["metadata"], spec=daemon["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, check_sa]),
        )

        # The service account and the queue before the pods (the Pod Identity association
        # is the cloud layer's, applied before this layer).
        run = pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *ready])
        self.collectives = None
        if args.collective_check:
            check = collectives_jobset(plan)
            self.collectives = k8s.apiextensions.CustomResource(
                f"{name}-allreduce", api_version=check["apiVersion"], kind=check["kind"],
                metadata=check["metadata"], spec=check["spec"], opts=run,
            )
        # What the pods mount (horovod's hostfile and sshd_config) before the pods.
        self.config_maps = [
            k8s.core.v1.ConfigMap(f"{name}-{cm['metadata']['name'].removeprefix(plan.name + '-')}",
                                  metadata=cm["metadata"], data=cm["data"], opts=after)
            for cm in training_config_maps(plan)
        ]
        job = training_jobset(plan)
        self.jobset = k8s.apiextensions.CustomResource(
            name, api_version=job["apiVersion"], kind=job["kind"], metadata=job["metadata"], spec=job["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *ready, *self.config_maps]),
        )
        self.register_outputs({
            "jobset": job["metadata"]["name"],
            "namespace": plan.namespace,
        })
