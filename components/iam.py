"""IAM roles: the node role every pool shares, and Pod Identity roles for workloads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from components.specs import iam as spec


@dataclass(frozen=True)
class NodeRoleArgs:
    role_name: str  # e.g. "mlplat-prod-node"


class NodeRole(pulumi.ComponentResource):
    """The EC2 role of managed node group instances: join the cluster, pull images."""

    role: aws.iam.Role

    def __init__(self, name: str, args: NodeRoleArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:iam:NodeRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.role = aws.iam.Role(
            name,
            name=args.role_name,
            description="EKS managed node group instances",
            assume_role_policy=json.dumps(spec.trust_policy("ec2.amazonaws.com")),
            opts=child,
        )
        for arn in spec.NODE_POLICIES:
            aws.iam.RolePolicyAttachment(
                f"{name}-{arn.rsplit('/', 1)[-1]}", role=self.role.name, policy_arn=arn, opts=child
            )
        self.register_outputs({"arn": self.role.arn})


@dataclass(frozen=True)
class PodIdentityRoleArgs:
    role_name: str
    account_id: str  # the only account whose clusters may have the role assumed
    namespace: str
    service_account: str
    # The association is made here, unless an EKS add-on owns it (the add-on's own
    # `pod_identity_associations` then names this role): set cluster_name to None.
    cluster_name: pulumi.Input[str] | None
    # IAM policy statements: a tuple (whose items may be Outputs), or one Output of the
    # whole list where the statements are built from other resources' outputs.
    statements: tuple[Any, ...] | pulumi.Output[list[Any]] = ()
    managed_policy_arns: tuple[str, ...] = field(default_factory=tuple)


class PodIdentityRole(pulumi.ComponentResource):
    """A role that only EKS Pod Identity can assume, for one service account, with the
    given statements and managed policies."""

    role: aws.iam.Role
    association: aws.eks.PodIdentityAssociation | None

    def __init__(self, name: str, args: PodIdentityRoleArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:iam:PodIdentityRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.role = aws.iam.Role(
            name,
            name=args.role_name,
            description=f"Pod Identity: {args.namespace}/{args.service_account}",
            assume_role_policy=json.dumps(spec.pod_identity_trust_policy(args.account_id, args.namespace,
                                                                       args.service_account)),
            opts=child,
        )
        if args.statements:
            aws.iam.RolePolicy(
                name,
                role=self.role.name,
                policy=pulumi.Output.from_input(args.statements).apply(
                    lambda statements: json.dumps(spec.policy(list(statements)))
                ),
                opts=child,
            )
        for arn in args.managed_policy_arns:
            aws.iam.RolePolicyAttachment(
                f"{name}-{arn.rsplit('/', 1)[-1]}", role=self.role.name, policy_arn=arn, opts=child
            )
        self.association = None
        if args.cluster_name is not None:
            self.association = aws.eks.PodIdentityAssociation(
                name,
                cluster_name=args.cluster_name,
                namespace=args.namespace,
                service_account=args.service_account,
                role_arn=self.role.arn,
                opts=child,
            )
        self.register_outputs({"arn": self.role.arn})
