"""`Cluster`: a private EKS control plane with encrypted secrets, every log type, access
entries from config and the add-ons nodes need to join. `CoreAddons`: the add-ons that
need running nodes (CoreDNS, EBS CSI). Both are the cloud layer's; what runs inside the
cluster is the cluster layer's (infra/cluster_layer.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.iam import PodIdentityRole, PodIdentityRoleArgs
from components.specs import cluster as spec
from components.specs import iam as iam_spec
from infra.versions import EKS_ADDONS


@dataclass(frozen=True)
class ClusterArgs:
    cluster_name: str  # mlplat-<stack>
    account_id: str
    region: str
    version: str
    subnet_ids: tuple[pulumi.Input[str], ...]  # private subnets, at least two zones
    secrets_key_arn: pulumi.Input[str]  # envelope encryption of Kubernetes secrets
    logs_key_arn: pulumi.Input[str]
    log_retention_days: int
    # The cluster's standing administrators (access entries with cluster admin): the role
    # `pulumi up` runs as, and the break-glass role.
    deployer_role_arn: str
    break_glass_role_arn: str
    # Empty: the API server has no public endpoint at all.
    public_access_cidrs: tuple[str, ...] = ()
    admin_role_arns: tuple[str, ...] = ()
    read_only_role_arns: tuple[str, ...] = ()
    deletion_protection: bool = True


class Cluster(pulumi.ComponentResource):
    eks: aws.eks.Cluster
    log_group: aws.cloudwatch.LogGroup
    deployer_admin: aws.eks.AccessPolicyAssociation
    cluster_security_group_id: pulumi.Output[str]
    addons: dict[str, aws.eks.Addon]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # Created before the cluster so EKS writes into our encrypted, retained group
        # instead of creating an unencrypted one that never expires.
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane",
            name=spec.control_plane_log_group(args.cluster_name),
            kms_key_id=args.logs_key_arn,
            retention_in_days=args.log_retention_days,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        role = aws.iam.Role(
            f"{name}-control-plane",
            name=f"{args.cluster_name}-cluster",
            description="EKS control plane",
            assume_role_policy=json.dumps(iam_spec.trust_policy("eks.amazonaws.com", tag_session=True)),
            opts=child,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-{arn.rsplit('/', 1)[-1]}", role=role.name, policy_arn=arn, opts=child
            )
            for arn in iam_spec.CLUSTER_POLICIES
        ]
        public = bool(args.public_access_cidrs)
        self.eks = aws.eks.Cluster(
            name,
            name=args.cluster_name,
            version=args.version,
            role_arn=role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=list(args.subnet_ids),
                endpoint_private_access=True,
                endpoint_public_access=public,
                public_access_cidrs=list(args.public_access_cidrs) if public else None,
            ),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                resources=["secrets"],
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=args.secrets_key_arn),
            ),
            enabled_cluster_log_types=list(spec.CONTROL_PLANE_LOG_TYPES),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API",
                # No implicit admin for whoever created the cluster: the deployer and
                # break-glass roles get theirs from access entries below, visible and
                # revocable. EKS reads this only at creation, and a change replaces the
                # cluster, so it is ignored afterwards (hashicorp/terraform-provider-aws
                # #35824); README "Cluster administrators" moves an existing cluster over.
                bootstrap_cluster_creator_admin_permissions=False,
            ),
            # The managed add-ons below replace the self-managed ones EKS would install.
            bootstrap_self_managed_addons=False,
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type="STANDARD"),
            deletion_protection=args.deletion_protection,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.log_group, *attachments],
                                        ignore_changes=["accessConfig.bootstrapClusterCreatorAdminPermissions"]),
        )
        self.cluster_security_group_id = self.eks.vpc_config.cluster_security_group_id
        # The cluster layer's Kubernetes provider authenticates as the deployer role: the
        # cloud layer, applied first, makes it admin.
        self.deployer_admin = self._access_entries(name, args)
        self._addons(name, args)
        self.register_outputs(
            {"name": self.eks.name, "endpoint": self.eks.endpoint, "clusterSecurityGroupId": self.cluster_security_group_id}
        )

    def _access_entries(self, name: str, args: ClusterArgs) -> aws.eks.AccessPolicyAssociation:
        """Every access entry; returns the deployer's admin association."""
        child = pulumi.ResourceOptions(parent=self)
        grants = [(args.deployer_role_arn, spec.ADMIN_POLICY, "deployer"),
                  (args.break_glass_role_arn, spec.ADMIN_POLICY, "break-glass")]
        grants += [(arn, spec.ADMIN_POLICY, "admin") for arn in args.admin_role_arns]
        grants += [(arn, spec.VIEW_POLICY, "view") for arn in args.read_only_role_arns]
        associations = {}
        for arn, policy_arn, kind in grants:
            key = f"{name}-{kind}-{spec.principal_key(arn)}"
            entry = aws.eks.AccessEntry(key, cluster_name=self.eks.name, principal_arn=arn, type="STANDARD", opts=child)
            associations[kind] = aws.eks.AccessPolicyAssociation(
                key,
                cluster_name=self.eks.name,
                principal_arn=entry.principal_arn,
                policy_arn=policy_arn,
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                opts=child,
            )
        return associations["deployer"]

    def _addons(self, name: str, args: ClusterArgs) -> None:
        """The add-ons nodes need before they can become Ready."""
        child = pulumi.ResourceOptions(parent=self)
        self.addons = {}
        agent = EKS_ADDONS["eks-pod-identity-agent"]
        self.addons[agent.name] = _addon(name, self.eks, agent.name, opts=child)
        self.addons["kube-proxy"] = _addon(name, self.eks, "kube-proxy", opts=child)
        cni_role = PodIdentityRole(
            f"{name}-vpc-cni",
            PodIdentityRoleArgs(
                role_name=f"{args.cluster_name}-vpc-cni",
                account_id=args.account_id,
                namespace="kube-system",
                service_account="aws-node",
                cluster_name=None,  # the add-on owns the association
                managed_policy_arns=(iam_spec.CNI_POLICY,),
            ),
            opts=child,
        )
        self.addons["vpc-cni"] = _addon(
            name,
            self.eks,
            "vpc-cni",
            pod_identity=[("aws-node", cni_role.role.arn)],
            configuration_values=json.dumps(spec.VPC_CNI_CONFIGURATION),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.addons[agent.name]]),
        )


def _addon(
    prefix: str,
    cluster: aws.eks.Cluster,
    addon_name: str,
    *,
    opts: pulumi.ResourceOptions,
    pod_identity: list[tuple[str, pulumi.Input[str]]] | None = None,
    configuration_values: str | None = None,
) -> aws.eks.Addon:
    return aws.eks.Addon(
        f"{prefix}-{addon_name}",
        cluster_name=cluster.name,
        addon_name=addon_name,
        addon_version=EKS_ADDONS[addon_name].version,
        # Take over whatever EKS or an earlier install left; keep later manual changes
        # visible as drift instead of silently overwriting them.
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="PRESERVE",
        configuration_values=configuration_values,
        pod_identity_associations=[
            aws.eks.AddonPodIdentityAssociationArgs(service_account=sa, role_arn=arn) for sa, arn in pod_identity
        ]
        if pod_identity
        else None,
        opts=opts,
    )


@dataclass(frozen=True)
class CoreAddonsArgs:
    cluster_name: str
    account_id: str
    cluster: aws.eks.Cluster
    volumes_key_arn: pulumi.Input[str]  # the CSI driver's grants (the cluster layer's StorageClass uses the key)


class CoreAddons(pulumi.ComponentResource):
    """EKS add-ons that schedule pods (so wait for nodes: pass the node groups in
    `depends_on`). The default StorageClass they serve is the cluster layer's
    (infra/cluster_layer.py)."""

    addons: dict[str, aws.eks.Addon]

    def __init__(self, name: str, args: CoreAddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:cluster:CoreAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Children do not inherit the component's depends_on: the add-ons need it (nodes).
        after_nodes = pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None)
        ebs_role = PodIdentityRole(
            f"{name}-ebs-csi",
            PodIdentityRoleArgs(
                role_name=f"{args.cluster_name}-ebs-csi",
                account_id=args.account_id,
                namespace="kube-system",
                service_account="ebs-csi-controller-sa",
                cluster_name=None,
                # The key ARN may still be unknown: the statements carry it as an Output.
                statements=tuple(iam_spec.ebs_kms_statements(args.volumes_key_arn)),
                managed_policy_arns=(iam_spec.EBS_CSI_POLICY,),
            ),
            opts=child,
        )
        self.addons = {
            "coredns": _addon(name, args.cluster, "coredns", opts=after_nodes),
            "aws-ebs-csi-driver": _addon(
                name, args.cluster, "aws-ebs-csi-driver",
                pod_identity=[("ebs-csi-controller-sa", ebs_role.role.arn)], opts=after_nodes,
            ),
        }
        self.register_outputs({"addons": sorted(self.addons)})
