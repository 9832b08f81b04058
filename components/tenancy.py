"""Tenancy: a fenced namespace per team (see components/tenancy_spec.py for the specs)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.objects import create
from components.tenancy_spec import Tenant, endpoint_policy, tenant_namespace, tenant_objects


@dataclass(frozen=True)
class TenancyArgs:
    tenants: tuple[Tenant, ...]
    # The EKS cluster the tenants' IAM roles get access entries in (with their groups).
    cluster_name: pulumi.Input[str] | None = None
    # Where pods may reach AWS APIs on 443: the VPC's CIDR (interface endpoints) and the S3
    # gateway endpoint's prefix-list CIDRs. None: no such allowance (egress stays denied).
    endpoint_cidrs: pulumi.Input[Sequence[str]] | None = None


class Tenancy(pulumi.ComponentResource):
    """Namespaces, quotas, limits, network policies, RBAC and access entries for each
    tenant. Kubernetes objects use the `kubernetes` provider of `opts.providers`, access
    entries the `aws` one."""

    namespaces: dict[str, k8s.core.v1.Namespace]

    def __init__(self, name: str, args: TenancyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:tenancy:Tenancy", name, None, opts)
        self.namespaces = {}
        for tenant in args.tenants:
            # Deleting a namespace deletes everything in it: a tenant dropped from the config
            # must not take the team's volumes and jobs with it.
            namespace = create(tenant_namespace(tenant), pulumi.ResourceOptions(parent=self, retain_on_delete=True))
            self.namespaces[tenant.name] = namespace
            inside = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
            for manifest in tenant_objects(tenant, args.tenants):
                create(manifest, inside)
            if args.endpoint_cidrs is not None:
                policy = endpoint_policy(tenant, [])
                policy["spec"] = pulumi.Output.from_input(args.endpoint_cidrs).apply(
                    lambda cidrs, t=tenant: endpoint_policy(t, list(cidrs))["spec"]
                )
                create(policy, inside)
            if args.cluster_name is not None:
                for arn in tenant.role_arns:
                    aws.eks.AccessEntry(
                        f"{name}-{tenant.name}-{hashlib.sha256(arn.encode()).hexdigest()[:8]}",
                        cluster_name=args.cluster_name,
                        principal_arn=arn,
                        kubernetes_groups=list(tenant.groups),
                        type="STANDARD",
                        opts=pulumi.ResourceOptions(parent=self),
                    )
        self.register_outputs({"namespaces": {n: ns.metadata.name for n, ns in self.namespaces.items()}})
