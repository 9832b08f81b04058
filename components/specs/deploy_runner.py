"""What the in-VPC deploy runner is: an AWS CodeBuild project in the cluster's private
subnets that GitHub Actions uses as an ephemeral self-hosted runner (one build per
workflow job), so the cluster layer reaches the private API server.

Why CodeBuild: AWS runs it in-region with no instance to patch, each job gets a fresh
container, and the job takes its AWS credentials from GitHub's OIDC token as the cloud
layer's jobs do (the project's own role may only join the VPC and write its logs). A
Pulumi Deployments agent would also work, but needs a long-running host of ours."""

from __future__ import annotations

from typing import Any

# CodeBuild's Ubuntu 22.04 standard image: the job's actions/setup-python takes builds made
# for Ubuntu (it has none for Amazon Linux, the image before), and it has the AWS CLI.
IMAGE = "aws/codebuild/standard:7.0"
COMPUTE_TYPE = "BUILD_GENERAL1_MEDIUM"
# GitHub's workflow_job event, which CodeBuild turns into one runner build per queued job.
WEBHOOK_EVENT = "WORKFLOW_JOB_QUEUED"
# The workflow whose jobs the runner takes (.github/workflows/deploy.yml's `name`: a job of
# the reusable deploy-environment.yml runs in its caller's run).
DEPLOY_WORKFLOW_NAME = "deploy"
HTTPS = 443
# CodeBuild reads a token from Secrets Manager only in this JSON form and with these tags
# (AWS CodeBuild: "Create and store a token in a Secrets Manager secret").
TOKEN_TAGS = {"codebuild:source": "", "codebuild:source:type": "personal_access_token",
              "codebuild:source:provider": "github"}


def token_secret_value(token: str) -> str:
    """The secret's value for a GitHub token: what `aws secretsmanager put-secret-value`
    must store (docs/bring-up.md)."""
    import json

    return json.dumps({"ServerType": "GITHUB", "AuthType": "PERSONAL_ACCESS_TOKEN", "Token": token})


def webhook_filters(actor_ids: tuple[int, ...]) -> list[dict[str, str]]:
    """One filter group, every filter of which must match: a queued job of the deploy
    workflow, started by one of these GitHub users. No branch filter: CodeBuild evaluates
    HEAD_REF for push and pull-request events only (the CodeBuild API reference,
    WebhookFilter; checked against the model botocore ships in
    tests/component/test_deploy_runner.py), so with it no runner would ever start. The
    branch is held by the GitHub environments' deployment-branch rule (`main` only) and the
    deployer's trust, whose OIDC subject names main (docs/bring-up.md)."""
    if not actor_ids:
        raise ValueError("a runner webhook needs at least one actor id; without, any actor's job could take it")
    return [{"type": "EVENT", "pattern": WEBHOOK_EVENT},
            {"type": "WORKFLOW_NAME", "pattern": f"^{DEPLOY_WORKFLOW_NAME}$"},
            {"type": "ACTOR_ACCOUNT_ID", "pattern": "^(" + "|".join(str(a) for a in actor_ids) + ")$"}]


def project_name(prefix: str) -> str:
    """`mlplat-prod-deploy`: workflows name it in `runs-on` (deploy.yml)."""
    return f"{prefix}-deploy"


def runs_on_label(prefix: str) -> str:
    """The label a job uses to run on this project (AWS: codebuild-<project>-<run id>-<attempt>)."""
    return f"codebuild-{project_name(prefix)}-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}"


def trust_policy(account: str, region: str, project: str) -> dict[str, Any]:
    """Only CodeBuild, for this project of this account (no confused deputy)."""
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "codebuild.amazonaws.com"}, "Action": "sts:AssumeRole",
        "Condition": {"StringEquals": {"aws:SourceAccount": account},
                      "ArnLike": {"aws:SourceArn": f"arn:aws:codebuild:{region}:{account}:project/{project}"}},
    }]}


def role_statements(*, account: str, region: str, log_group_arn: str, subnet_arns: list[str],
                    token_secret_arn: str, key_arn: str) -> list[dict[str, Any]]:
    """The project role: join the VPC (AWS's documented set for CodeBuild in a VPC), write
    its log group, and read the GitHub token that registers the runner. Nothing else: the
    job assumes the deployer role through GitHub's OIDC token."""
    return [
        {"Sid": "DescribeNetwork", "Effect": "Allow", "Resource": "*",
         "Action": ["ec2:CreateNetworkInterface", "ec2:DescribeDhcpOptions", "ec2:DescribeNetworkInterfaces",
                    "ec2:DeleteNetworkInterface", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups",
                    "ec2:DescribeVpcs"]},
        {"Sid": "AttachInPrivateSubnets", "Effect": "Allow", "Action": ["ec2:CreateNetworkInterfacePermission"],
         "Resource": [f"arn:aws:ec2:{region}:{account}:network-interface/*"],
         "Condition": {"StringEquals": {"ec2:Subnet": subnet_arns,
                                        "ec2:AuthorizedService": "codebuild.amazonaws.com"}}},
        {"Sid": "WriteLogs", "Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
         "Resource": [f"{log_group_arn}:*"]},
        {"Sid": "ReadRunnerToken", "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"],
         "Resource": [token_secret_arn]},
        {"Sid": "DecryptRunnerToken", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": [key_arn],
         "Condition": {"StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"}}},
    ]
