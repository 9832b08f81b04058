"""The feature store's AWS half (`FeatureOnlineStore`: ElastiCache for Redis and one IAM
user per tenant) and its Kubernetes half (`FeatureProject`: one tenant's server and
materialization job). What each holds, and why: components/features_spec.py."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.addons.objects import create
from components.features_spec import (
    ENGINE,
    ENGINE_VERSION,
    PARAMETER_FAMILY,
    REDIS_PORT,
    CachePlan,
    ProjectPlan,
    access_string,
    log_group_names,
    parameters,
    project_objects,
)


@dataclass(frozen=True)
class FeatureOnlineStoreArgs:
    plan: CachePlan
    subnet_ids: list[pulumi.Input[str]]  # private subnets, one per zone
    vpc_id: pulumi.Input[str]
    client_security_group_id: pulumi.Input[str]  # the cluster's: pods and nodes
    key_arn: pulumi.Input[str]  # the "features" data class's CMK
    logs_key_arn: pulumi.Input[str]


class FeatureOnlineStore(pulumi.ComponentResource):
    """ElastiCache for Redis in the private subnets, reachable from the cluster only: TLS
    required, encrypted at rest with the features CMK, daily snapshots kept in the region;
    the default user off, and per tenant an IAM-authenticated user whose ACL reaches its
    project's keys alone (no password exists to leak)."""

    plan: CachePlan
    group: aws.elasticache.ReplicationGroup
    users: dict[str, aws.elasticache.User]

    def __init__(self, name: str, args: FeatureOnlineStoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:features:FeatureOnlineStore", name, None, opts)
        plan = self.plan = args.plan
        gid = plan.replication_group_id
        child = pulumi.ResourceOptions(parent=self)
        subnets = aws.elasticache.SubnetGroup(name, name=gid, subnet_ids=args.subnet_ids,
                                              description="Feast online store: private subnets", opts=child)
        firewall = aws.ec2.SecurityGroup(
            name, vpc_id=args.vpc_id, description="Feast online store: Redis from the cluster only",
            ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="tcp", from_port=REDIS_PORT, to_port=REDIS_PORT,
                                                      security_groups=[args.client_security_group_id],
                                                      description="the cluster's pods and nodes")],
            tags={"Name": gid}, opts=child)
        group = aws.elasticache.ParameterGroup(
            name, name=gid, family=PARAMETER_FAMILY, description="Feast online store",
            parameters=[aws.elasticache.ParameterGroupParameterArgs(**p) for p in parameters()], opts=child)
        logs = {kind: aws.cloudwatch.LogGroup(f"{name}-{kind}", name=log, kms_key_id=args.logs_key_arn,
                                              retention_in_days=plan.log_retention_days, opts=child)
                for kind, log in log_group_names(gid).items()}
        # A user group must hold a user named "default": this one is switched off.
        default = aws.elasticache.User(
            f"{name}-default", user_id=f"{gid}-default", user_name="default", engine=ENGINE,
            access_string="off -@all", authentication_mode={"type": "no-password-required"}, opts=child)
        self.users = {
            tenant: aws.elasticache.User(
                f"{name}-{tenant}", user_id=user, user_name=user, engine=ENGINE,
                access_string=access_string(plan.projects[tenant]), authentication_mode={"type": "iam"}, opts=child)
            for tenant, user in plan.users.items()
        }
        members = aws.elasticache.UserGroup(name, user_group_id=gid, engine=ENGINE,
                                            user_ids=[default.user_id, *(u.user_id for u in self.users.values())],
                                            opts=child)
        self.group = aws.elasticache.ReplicationGroup(
            name,
            replication_group_id=gid,
            description="Feast online store",
            engine=ENGINE,
            engine_version=ENGINE_VERSION,
            node_type=plan.node_type,
            num_cache_clusters=plan.nodes,
            automatic_failover_enabled=plan.nodes > 1,
            multi_az_enabled=plan.nodes > 1,
            port=REDIS_PORT,
            parameter_group_name=group.name,
            subnet_group_name=subnets.name,
            security_group_ids=[firewall.id],
            at_rest_encryption_enabled=True,
            kms_key_id=args.key_arn,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            user_group_ids=[members.user_group_id],
            snapshot_retention_limit=plan.snapshot_days,
            auto_minor_version_upgrade=True,
            apply_immediately=False,
            log_delivery_configurations=[
                aws.elasticache.ReplicationGroupLogDeliveryConfigurationArgs(
                    destination=log.name, destination_type="cloudwatch-logs", log_format="json", log_type=kind)
                for kind, log in logs.items()],
            # The online store is rebuilt by materializing again, but a replacement would
            # drop every tenant's features at once: never silently.
            opts=pulumi.ResourceOptions(parent=self, protect=True, depends_on=list(logs.values())),
        )
        self.register_outputs({"host": self.group.primary_endpoint_address})


@dataclass(frozen=True)
class FeatureProjectArgs:
    plan: ProjectPlan
    depends_on: tuple[pulumi.Resource, ...] = ()


class FeatureProject(pulumi.ComponentResource):
    """One tenant's project in its namespace: the egress fence to the online store, the
    ServiceAccount (its Pod Identity role is the cloud layer's), feature_store.yaml, the
    feature server with its Service, budget and PodMonitor, and the materialization CronJob."""

    def __init__(self, name: str, args: FeatureProjectArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:features:FeatureProject", name, None, opts)
        objects = project_objects(args.plan)
        first = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        fences = 4 if args.plan.customer is not None else 3  # and the customer's CA
        ready = [create(o, first) for o in objects[:fences]]
        run = pulumi.ResourceOptions(parent=self, depends_on=[*ready, *args.depends_on])
        for o in objects[fences:]:
            create(o, run)
        self.register_outputs({"project": args.plan.project})
