"""Tenancy: a fenced namespace per team (see components/tenancy_spec.py for the specs)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.addons.objects import create
from components.admission_spec import admission_objects
from components.tenancy_spec import Tenant, endpoint_policy, tenant_namespace, tenant_objects


@dataclass(frozen=True)
class TenancyArgs:
    tenants: tuple[Tenant, ...]
    # Where pods may reach AWS APIs on 443: the VPC's CIDR (interface endpoints) and the S3
    # gateway endpoint's prefix-list CIDRs. None: no such allowance (egress stays denied).
    endpoint_cidrs: pulumi.Input[Sequence[str]] | None = None
    # The cluster's GPU pools, (name, instance type): each tenant may pin its GPU pods to
    # those its queue has flavors for.
    gpu_pools: tuple[tuple[str, str], ...] = ()
    # The size of the scratch claim the platform makes in each tenant's namespace (Lustre,
    # or a customer's shared scratch): the storage quota leaves room for it.
    scratch_gi: int = 0


class Tenancy(pulumi.ComponentResource):
    """Namespaces, quotas, limits, network policies and RBAC for each tenant (the cluster
    layer's half; TenantAccess is the cloud layer's)."""

    namespaces: dict[str, k8s.core.v1.Namespace]

    def __init__(self, name: str, args: TenancyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:tenancy:Tenancy", name, None, opts)
        self.namespaces = {}
        # The admission policies come first: nothing runs in a tenant namespace before the
        # API server holds its pods to them.
        policies = [create(manifest, pulumi.ResourceOptions(parent=self)) for manifest in admission_objects()]
        for tenant in args.tenants:
            # Deleting a namespace deletes everything in it: a tenant dropped from the config
            # must not take the team's volumes and jobs with it.
            namespace = create(tenant_namespace(tenant, args.gpu_pools),
                               pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=policies))
            self.namespaces[tenant.name] = namespace
            inside = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
            for manifest in tenant_objects(tenant, args.tenants, scratch_gi=args.scratch_gi):
                create(manifest, inside)
            if args.endpoint_cidrs is not None:
                policy = endpoint_policy(tenant, [])
                policy["spec"] = pulumi.Output.from_input(args.endpoint_cidrs).apply(
                    lambda cidrs, t=tenant: endpoint_policy(t, list(cidrs))["spec"]
                )
                create(policy, inside)
        self.register_outputs({"namespaces": {n: ns.metadata.name for n, ns in self.namespaces.items()}})


@dataclass(frozen=True)
class TenantAccessArgs:
    tenants: tuple[Tenant, ...]
    cluster_name: pulumi.Input[str]  # the EKS cluster the tenants' IAM roles get access entries in


class TenantAccess(pulumi.ComponentResource):
    """An EKS access entry per tenant IAM role, mapping it to the tenant's Kubernetes
    groups (whose RoleBindings the cluster layer's Tenancy makes)."""

    def __init__(self, name: str, args: TenantAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:tenancy:TenantAccess", name, None, opts)
        for tenant in args.tenants:
            for arn in tenant.role_arns:
                aws.eks.AccessEntry(
                    f"tenancy-{tenant.name}-{hashlib.sha256(arn.encode()).hexdigest()[:8]}",
                    cluster_name=args.cluster_name,
                    principal_arn=arn,
                    kubernetes_groups=list(tenant.groups),
                    type="STANDARD",
                    # A stack made before the layers split held these under Tenancy; the
                    # migration moves them to the root of the cloud layer (docs/layers.md).
                    opts=pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)]),
                )
        self.register_outputs({})
