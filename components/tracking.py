"""The MLflow tracking server's AWS half (`TrackingDatabase`: RDS PostgreSQL and the
secrets of its users) and its Kubernetes half (`TrackingServer`). What each holds, and why
our own Deployment, is in components/tracking_spec.py."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.addons.objects import create
from components.tracking_spec import (
    CA_CERT_IDENTIFIER,
    DB_NAME,
    DB_PORT,
    DB_USER,
    ENGINE_VERSION,
    PARAMETER_FAMILY,
    SERVER_URI,
    DatabasePlan,
    SecretNames,
    ServerPlan,
    customer_objects,
    deployment,
    disruption_budget,
    log_group_name,
    namespace,
    network_policies,
    parameters,
    service,
    service_account,
)


@dataclass(frozen=True)
class TrackingDatabaseArgs:
    plan: DatabasePlan
    subnet_ids: list[pulumi.Input[str]]  # private subnets, one per zone
    vpc_id: pulumi.Input[str]
    client_security_group_id: pulumi.Input[str]  # the cluster's: pods and nodes
    key_arn: pulumi.Input[str]  # the "tracking" data class's CMK: storage, secrets, insights
    logs_key_arn: pulumi.Input[str]
    secret_names: SecretNames  # the admin's and each tenant's Secrets Manager names


class TrackingDatabase(pulumi.ComponentResource):
    """RDS PostgreSQL in the private subnets, reachable from the cluster only, TLS forced,
    encrypted with the tracking CMK, its password an RDS-managed (rotated) secret under the
    same key; deletion protection and in-region backups; and empty secrets for the server's
    admin and each tenant's user, which the server fills when it first starts."""

    instance: aws.rds.Instance
    admin_secret: aws.secretsmanager.Secret
    secrets: dict[str, aws.secretsmanager.Secret]  # each tenant's
    pipeline_secrets: dict[str, aws.secretsmanager.Secret]  # each pipeline tenant's database role

    def __init__(self, name: str, args: TrackingDatabaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:tracking:TrackingDatabase", name, None, opts)
        plan = args.plan
        child = pulumi.ResourceOptions(parent=self)
        kept = pulumi.ResourceOptions(parent=self, protect=True)
        subnets = aws.rds.SubnetGroup(name, name=plan.identifier, subnet_ids=args.subnet_ids,
                                      description="MLflow backend store: private subnets", opts=child)
        firewall = aws.ec2.SecurityGroup(
            name, vpc_id=args.vpc_id, description="MLflow backend store: PostgreSQL from the cluster only",
            ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=DB_PORT, to_port=DB_PORT,
                                                      security_groups=[args.client_security_group_id],
                                                      description="the cluster's pods and nodes")],
            tags={"Name": plan.identifier}, opts=child)
        group = aws.rds.ParameterGroup(
            name, name=plan.identifier, family=PARAMETER_FAMILY, description="MLflow backend store: TLS only",
            parameters=[aws.rds.ParameterGroupParameterArgs(**p) for p in parameters()], opts=child)
        logs = aws.cloudwatch.LogGroup(name, name=log_group_name(plan.identifier), kms_key_id=args.logs_key_arn,
                                       retention_in_days=plan.log_retention_days, opts=child)
        self.instance = aws.rds.Instance(
            name,
            identifier=plan.identifier,
            engine="postgres",
            engine_version=ENGINE_VERSION,
            auto_minor_version_upgrade=True,
            instance_class=plan.instance_class,
            allocated_storage=plan.storage_gib,
            max_allocated_storage=plan.max_storage_gib,
            storage_type="gp3",
            storage_encrypted=True,
            kms_key_id=args.key_arn,
            db_name=DB_NAME,
            username=DB_USER,
            # RDS keeps the password in Secrets Manager under our key and rotates it; it is
            # never in Pulumi's state.
            manage_master_user_password=True,
            master_user_secret_kms_key_id=args.key_arn,
            iam_database_authentication_enabled=True,
            db_subnet_group_name=subnets.name,
            vpc_security_group_ids=[firewall.id],
            parameter_group_name=group.name,
            publicly_accessible=False,
            multi_az=plan.multi_az,
            ca_cert_identifier=CA_CERT_IDENTIFIER,
            backup_retention_period=plan.backup_days,
            copy_tags_to_snapshot=True,
            deletion_protection=True,
            skip_final_snapshot=False,
            final_snapshot_identifier=f"{plan.identifier}-final",
            performance_insights_enabled=True,
            performance_insights_kms_key_id=args.key_arn,
            enabled_cloudwatch_logs_exports=["postgresql"],
            opts=pulumi.ResourceOptions(parent=self, protect=True, depends_on=[logs]),
        )
        def user_secret(who: str, secret: str) -> aws.secretsmanager.Secret:
            return aws.secretsmanager.Secret(
                f"{name}-{who}", name=secret, kms_key_id=args.key_arn,
                description=f"MLflow tracking user {who}: made by the tracking server at its first start",
                recovery_window_in_days=30, opts=kept)

        # Resource names as before ("<name>-admin", "<name>-<tenant>"); no tenant may be named
        # admin (infra/config.py), so none can take the admin's.
        self.admin_secret = user_secret("admin", args.secret_names.admin)
        self.secrets = {tenant: user_secret(tenant, secret) for tenant, secret in args.secret_names.tenants.items()}
        self.pipeline_secrets = {
            tenant: aws.secretsmanager.Secret(
                f"{name}-pipelines-{tenant}", name=secret, kms_key_id=args.key_arn,
                description=f"Tenant {tenant}'s pipeline-engine database role: made by the tracking server",
                recovery_window_in_days=30, opts=kept)
            for tenant, secret in args.secret_names.pipelines.items()}
        self.register_outputs({"endpoint": self.instance.address})

    @property
    def master_secret_arn(self) -> pulumi.Output[str]:
        return self.instance.master_user_secrets.apply(lambda s: s[0]["secret_arn"] if s else "")


@dataclass(frozen=True)
class TrackingServerArgs:
    plan: ServerPlan
    depends_on: tuple[pulumi.Resource, ...] = ()


class TrackingServer(pulumi.ComponentResource):
    """The MLflow server's namespace, network policies, ServiceAccount (its Pod Identity
    role is the cloud layer's), Deployment, Service and PodDisruptionBudget."""

    def __init__(self, name: str, args: TrackingServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:tracking:TrackingServer", name, None, opts)
        plan = args.plan
        ns = create(namespace(), pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        # Fences and the ServiceAccount first, so no server pod runs without them.
        ready = [create(o, in_ns) for o in (*network_policies(plan), service_account(), *customer_objects(plan))]
        run = pulumi.ResourceOptions(parent=self, depends_on=[ns, *ready, *args.depends_on])
        for o in (deployment(plan), service(), disruption_budget()):
            create(o, run)
        self.register_outputs({"uri": SERVER_URI})
