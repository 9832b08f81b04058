"""`DeployRunner`: the cluster layer's deploy path inside the VPC (components/specs/
deploy_runner.py says what it is and why CodeBuild), and the one security-group rule that
lets it reach the API server on 443."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.specs import deploy_runner as spec
from components.specs import iam as iam_spec


@dataclass(frozen=True)
class DeployRunnerArgs:
    prefix: str  # mlplat-<env>
    account_id: str
    region: str
    repository: str  # owner/name on GitHub: whose workflow jobs the runner takes
    actor_ids: tuple[int, ...]  # GitHub users whose deploy jobs may start a runner
    token_stored: bool  # the token's secret holds its value: the webhook may be created
    vpc_id: pulumi.Input[str]
    subnet_ids: Sequence[pulumi.Input[str]]  # private subnets (egress through the NAT gateway)
    subnet_arns: Sequence[pulumi.Input[str]]
    cluster_security_group_id: pulumi.Input[str]
    secrets_key_arn: pulumi.Input[str]  # the cluster key: the GitHub token and the project's data
    logs_key_arn: pulumi.Input[str]
    log_retention_days: int


class DeployRunner(pulumi.ComponentResource):
    """A CodeBuild project in the private subnets that runs GitHub Actions jobs labelled
    `codebuild-<project>-<run id>-<attempt>`, its webhook, role, logs and security group,
    the GitHub token's secret (its value is put in once, by hand: docs/bring-up.md) and the
    API server's ingress rule from the runner. The webhook waits for the token: creating it
    without one fails, and would stop the first `pulumi up` of the cloud layer."""

    project: aws.codebuild.Project
    security_group: aws.ec2.SecurityGroup
    token: aws.secretsmanager.Secret

    def __init__(self, name: str, args: DeployRunnerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:deploy:DeployRunner", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        project = spec.project_name(args.prefix)
        self.token = aws.secretsmanager.Secret(
            f"{name}-github-token", name=f"{project}/github-token", kms_key_id=args.secrets_key_arn,
            description="GitHub token CodeBuild registers the deploy runner with (put the value in by hand, as "
                        "JSON: docs/bring-up.md)",
            tags=spec.TOKEN_TAGS, opts=child)
        logs = aws.cloudwatch.LogGroup(
            f"{name}-logs", name=f"/aws/codebuild/{project}", kms_key_id=args.logs_key_arn,
            retention_in_days=args.log_retention_days, opts=child)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-runner", vpc_id=args.vpc_id, description="Deploy runner builds: HTTPS out only",
            tags={"Name": project}, opts=child)
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-https-out", security_group_id=self.security_group.id,
            description="HTTPS: GitHub through the NAT gateway, the state bucket through the S3 endpoint, AWS APIs, "
                        "the API server",
            ip_protocol="tcp", from_port=spec.HTTPS, to_port=spec.HTTPS, cidr_ipv4="0.0.0.0/0", opts=child)
        # The one rule the cluster layer's deploy needs: the API server, from the runner only.
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-api-server", security_group_id=args.cluster_security_group_id,
            description="Kubernetes API from the deploy runner", ip_protocol="tcp", from_port=spec.HTTPS,
            to_port=spec.HTTPS, referenced_security_group_id=self.security_group.id, opts=child)
        role = aws.iam.Role(
            f"{name}-role", name=project,
            assume_role_policy=json.dumps(spec.trust_policy(args.account_id, args.region, project)), opts=child)
        aws.iam.RolePolicy(
            f"{name}-role", role=role.name,
            policy=pulumi.Output.all(logs.arn, list(args.subnet_arns), self.token.arn, args.secrets_key_arn).apply(
                lambda v: json.dumps(iam_spec.policy(spec.role_statements(
                    account=args.account_id, region=args.region, log_group_arn=v[0], subnet_arns=v[1],
                    token_secret_arn=v[2], key_arn=v[3])))),
            opts=child)
        self.project = aws.codebuild.Project(
            name, name=project, description="GitHub Actions runner for the cluster layer's deploy, inside the VPC",
            service_role=role.arn, build_timeout=120, encryption_key=args.secrets_key_arn,
            source=aws.codebuild.ProjectSourceArgs(
                type="GITHUB", location=f"https://github.com/{args.repository}.git",
                auth=aws.codebuild.ProjectSourceAuthArgs(type="SECRETS_MANAGER", resource=self.token.arn)),
            artifacts=aws.codebuild.ProjectArtifactsArgs(type="NO_ARTIFACTS"),
            environment=aws.codebuild.ProjectEnvironmentArgs(
                compute_type=spec.COMPUTE_TYPE, image=spec.IMAGE, type="LINUX_CONTAINER", privileged_mode=False,
                image_pull_credentials_type="CODEBUILD"),
            vpc_config=aws.codebuild.ProjectVpcConfigArgs(
                vpc_id=args.vpc_id, subnets=list(args.subnet_ids), security_group_ids=[self.security_group.id]),
            logs_config=aws.codebuild.ProjectLogsConfigArgs(
                cloudwatch_logs=aws.codebuild.ProjectLogsConfigCloudwatchLogsArgs(group_name=logs.name,
                                                                                  status="ENABLED"),
                s3_logs=aws.codebuild.ProjectLogsConfigS3LogsArgs(status="DISABLED")),
            opts=child)
        if args.token_stored:
            aws.codebuild.Webhook(
                name, project_name=self.project.name, build_type="BUILD",
                filter_groups=[aws.codebuild.WebhookFilterGroupArgs(filters=[
                    aws.codebuild.WebhookFilterGroupFilterArgs(**f) for f in spec.webhook_filters(args.actor_ids)])],
                opts=child)
        self.register_outputs({"project": self.project.name, "securityGroup": self.security_group.id})
