"""`mlplat bootstrap --account A --region R --environment E`: what must exist in an
account before its first `pulumi up` (the role `cdk bootstrap` plays for CDK).

- The state bucket: in the region, encrypted with its own customer key, versioned, TLS
  only, public access blocked, its access logged to a second bucket.
- The state-secrets key: Pulumi's `awskms://` secrets provider for the stacks.
- The deployer role, assumable only through GitHub's OIDC token of this repository's
  deploy workflow on `main`, for the environments named (the trust reads the subject
  claim as customised to repo, context and job_workflow_ref: docs/bring-up.md).
- The break-glass role, assumable by the account's own principals with MFA only.
- The preview role: read-only, for the pull request workflow's engine preview (its
  `preview` environment), reading the state and taking the backend's lock.

Each step looks first and creates only what is missing; what exists is named and its
settings are applied again (so a second run changes nothing and a drifted setting comes
back). The documents are plain functions, tested on their own; `run` makes the calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from components.specs import iam as iam_spec
from infra.config import PROJECT, ConfigError

GITHUB_OIDC = "token.actions.githubusercontent.com"
OIDC_AUDIENCE = "sts.amazonaws.com"
DEPLOY_WORKFLOW = ".github/workflows/deploy-environment.yml"
MAIN = "refs/heads/main"
PREVIEW_WORKFLOW = ".github/workflows/preview.yml"
PREVIEW_ENVIRONMENT = "preview"
ADMIN_POLICY = "arn:aws:iam::aws:policy/AdministratorAccess"
READ_ONLY_POLICY = "arn:aws:iam::aws:policy/ReadOnlyAccess"
# The key every AWS stack file names as its secrets provider (through `secrets_provider`).
SECRETS_KEY_ALIAS = f"alias/{PROJECT}-state-secrets"
# Services whose API lives in one region whatever the caller's (IAM and STS's global
# endpoint, Organizations, ...): the region fence must not refuse them. AWS's own example
# policy "Deny access to AWS based on the requested Region" lists these.
GLOBAL_SERVICES = ("iam:*", "sts:*", "organizations:*", "account:*", "support:*", "route53:*", "route53domains:*",
                   "cloudfront:*", "globalaccelerator:*", "waf:*", "health:*", "trustedadvisor:*",
                   "budgets:*", "ce:*", "cur:*", "pricing:*", "servicequotas:*", "shield:*", "sso:*")


class BootstrapError(Exception):
    """A user error: one line, exit 2."""


@dataclass(frozen=True)
class Plan:
    account: str
    region: str
    repository: str  # owner/name on GitHub
    environments: tuple[str, ...]
    deployer_role: str = f"{PROJECT}-deployer"
    break_glass_role: str = f"{PROJECT}-break-glass"
    preview_role: str = f"{PROJECT}-preview"

    @property
    def state_bucket(self) -> str:
        return f"{PROJECT}-state-{self.account}-{self.region}"

    @property
    def log_bucket(self) -> str:
        return f"{PROJECT}-state-logs-{self.account}-{self.region}"

    @property
    def bucket_key_alias(self) -> str:
        return f"alias/{PROJECT}-state"

    @property
    def secrets_key_alias(self) -> str:
        return SECRETS_KEY_ALIAS

    @property
    def backend_url(self) -> str:
        return f"s3://{self.state_bucket}?region={self.region}"

    @property
    def secrets_provider(self) -> str:
        return kms_secrets_provider(self.secrets_key_alias, self.region)

    def role_arn(self, name: str) -> str:
        return f"arn:aws:iam::{self.account}:role/{name}"

    @property
    def oidc_provider_arn(self) -> str:
        return f"arn:aws:iam::{self.account}:oidc-provider/{GITHUB_OIDC}"


def kms_secrets_provider(alias: str, region: str) -> str:
    """Pulumi's URL for a KMS key by alias: awskms://alias/<name>?region=<region>."""
    return f"awskms://{alias}?region={region}"


# --- The documents ----------------------------------------------------------------------


def tls_only(bucket: str) -> dict[str, Any]:
    # {"AWS": "*"} is IAM's equivalent of "*" (every principal, anonymous included); the
    # mapping form is also what moto's logging check can read.
    return {"Sid": "TlsOnly", "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*",
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}


def state_bucket_lifecycle() -> dict[str, Any]:
    """The deploy runner's tool bundles (runner-tools/, infra/runner_tools.py) are a few
    hundred MB each, one per set of tools: each goes 90 days after it was stored (the supply
    job stores it again when a deploy still needs it), and a replaced version a day after.
    The state itself is not touched."""
    return {"Rules": [{"ID": "runner-tools", "Filter": {"Prefix": "runner-tools/"}, "Status": "Enabled",
                       "Expiration": {"Days": 90}, "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
                       "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]}


def state_bucket_policy(plan: Plan) -> dict[str, Any]:
    return iam_spec.policy([tls_only(plan.state_bucket)])


def log_bucket_policy(plan: Plan) -> dict[str, Any]:
    """S3 server access logging writes as its service principal, for the state bucket of
    this account only (AWS: "Permissions for log delivery")."""
    return iam_spec.policy([
        tls_only(plan.log_bucket),
        {"Sid": "StateBucketAccessLogs", "Effect": "Allow", "Principal": {"Service": "logging.s3.amazonaws.com"},
         "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{plan.log_bucket}/state/*",
         "Condition": {"StringEquals": {"aws:SourceAccount": plan.account},
                       "ArnLike": {"aws:SourceArn": f"arn:aws:s3:::{plan.state_bucket}"}}},
    ])


def key_policy(plan: Plan, purpose: str) -> dict[str, Any]:
    """The account administers the key through IAM (AWS's default statement: without it
    nobody could ever change the key again); the deployer and break-glass roles use it.
    The bucket key is used through S3 in this region only; the secrets key directly by
    the Pulumi CLI, which encrypts and decrypts the stack's data key."""
    users = [plan.role_arn(plan.deployer_role), plan.role_arn(plan.break_glass_role)]
    use: dict[str, Any] = {"Sid": "UseByDeployers", "Effect": "Allow", "Principal": {"AWS": users},
                           "Action": ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
                           "Resource": "*"}
    # The preview reads state and secrets; through S3 it also writes the backend's lock.
    read = {"Sid": "ReadByPreview", "Effect": "Allow", "Principal": {"AWS": plan.role_arn(plan.preview_role)},
            "Action": ["kms:Decrypt", "kms:DescribeKey"] + (["kms:GenerateDataKey"] if purpose == "bucket" else []),
            "Resource": "*"}
    if purpose == "bucket":
        for statement in (use, read):
            statement["Condition"] = {"StringEquals": {"kms:ViaService": f"s3.{plan.region}.amazonaws.com",
                                                       "kms:CallerAccount": plan.account}}
    return iam_spec.policy([
        {"Sid": "AccountAdministersThroughIam", "Effect": "Allow",
         "Principal": {"AWS": f"arn:aws:iam::{plan.account}:root"}, "Action": "kms:*", "Resource": "*"},
        use, read,
    ])


def deployer_subjects(plan: Plan) -> list[str]:
    """The OIDC subjects the deployer trusts: the deploy workflow of this repository at
    `main`, in each of the environments (GitHub's subject with the claims customised to
    repo, context and job_workflow_ref)."""
    workflow = f"{plan.repository}/{DEPLOY_WORKFLOW}@{MAIN}"
    return [f"repo:{plan.repository}:environment:{env}:job_workflow_ref:{workflow}" for env in plan.environments]


def deployer_trust(plan: Plan) -> dict[str, Any]:
    return iam_spec.policy([{
        "Sid": "DeployWorkflowOnMain", "Effect": "Allow", "Principal": {"Federated": plan.oidc_provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{GITHUB_OIDC}:aud": OIDC_AUDIENCE,
                                       f"{GITHUB_OIDC}:sub": deployer_subjects(plan)}},
    }])


def preview_trust(plan: Plan) -> dict[str, Any]:
    """The pull request workflow's engine job, in its `preview` environment, at any ref
    (a pull request's merge ref): it can only read."""
    workflow = f"{plan.repository}/{PREVIEW_WORKFLOW}@*"
    return iam_spec.policy([{
        "Sid": "PreviewWorkflow", "Effect": "Allow", "Principal": {"Federated": plan.oidc_provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{GITHUB_OIDC}:aud": OIDC_AUDIENCE},
                      "StringLike": {f"{GITHUB_OIDC}:sub": f"repo:{plan.repository}:environment:"
                                                           f"{PREVIEW_ENVIRONMENT}:job_workflow_ref:{workflow}"}},
    }])


def preview_state_lock(plan: Plan) -> dict[str, Any]:
    """ReadOnlyAccess reads the state; a preview also takes the file backend's lock."""
    return iam_spec.policy([{
        "Sid": "BackendLock", "Effect": "Allow", "Action": ["s3:PutObject", "s3:DeleteObject"],
        "Resource": f"arn:aws:s3:::{plan.state_bucket}/.pulumi/locks/*"}])


def break_glass_trust(plan: Plan) -> dict[str, Any]:
    """People of this account (through IAM Identity Center or IAM) who passed MFA."""
    return iam_spec.policy([{
        "Sid": "AccountPrincipalsWithMfa", "Effect": "Allow",
        "Principal": {"AWS": f"arn:aws:iam::{plan.account}:root"}, "Action": "sts:AssumeRole",
        "Condition": {"Bool": {"aws:MultiFactorAuthPresent": "true"}},
    }])


def region_fence(plan: Plan) -> dict[str, Any]:
    """Both roles administer the account, but only in the region (global services aside):
    a slip of a provider's region cannot create anything abroad."""
    return iam_spec.policy([{
        "Sid": "OnlyInRegion", "Effect": "Deny", "NotAction": list(GLOBAL_SERVICES), "Resource": "*",
        "Condition": {"StringNotEquals": {"aws:RequestedRegion": plan.region}},
    }])


# --- Input ----------------------------------------------------------------------------

ACCOUNT = re.compile(r"^\d{12}$")
REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def known_regions() -> set[str]:
    """Every commercial region botocore's endpoint data names."""
    import botocore.session

    return set(botocore.session.get_session().get_available_regions("s3"))


def make_plan(account: str, region: str, environments: Iterable[str], repository: str | None,
              stacks: Callable[[str], Any]) -> Plan:
    """The plan from the command line and the environments' stack files, or one
    BootstrapError naming what is wrong. `stacks(name)` loads a cloud-layer stack's config."""
    if not ACCOUNT.match(account):
        raise BootstrapError(f"--account {account!r}: an AWS account id is 12 digits, e.g. 111122223333")
    if region not in known_regions():
        raise BootstrapError(f"--region {region!r}: not an AWS region; e.g. me-central-1")
    environments = tuple(dict.fromkeys(environments))
    if not environments:
        raise BootstrapError("--environment: name at least one environment this account deploys (e.g. prod)")
    repositories: set[str] = set()
    for env in environments:
        try:
            config = stacks(env)
        except ConfigError as err:
            raise BootstrapError(f"--environment {env}: {err}") from None
        if config.region != region:
            raise BootstrapError(f"--environment {env}: stacks/Pulumi.{env}.yaml deploys to {config.region}, not "
                                 f"{region}; bootstrap that region")
        if config.deploy_runner is not None:
            repositories.add(config.deploy_runner.repository)
    if repository is None:
        if len(repositories) != 1:
            raise BootstrapError("--repository: the stack files name " + (
                f"{len(repositories)} repositories ({', '.join(sorted(repositories))})" if repositories else "none")
                + "; name the GitHub repository whose deploy workflow deploys here (owner/name)")
        repository = repositories.pop()
    if not REPOSITORY.match(repository):
        raise BootstrapError(f"--repository {repository!r}: expected owner/name of a GitHub repository")
    return Plan(account=account, region=region, repository=repository, environments=environments)


# --- The calls --------------------------------------------------------------------------


def run(plan: Plan, session: Any, say: Callable[[str], None], endpoint_url: str | None = None) -> list[str]:
    """Make what is missing, apply every setting, and return what was created."""
    from botocore.exceptions import ClientError, NoCredentialsError

    def client(service: str) -> Any:
        return session.client(service, region_name=plan.region, endpoint_url=endpoint_url)

    try:
        caller = client("sts").get_caller_identity()["Account"]
    except NoCredentialsError:
        raise BootstrapError("no AWS credentials: sign in to the account (e.g. aws sso login) and run again") from None
    except ClientError as err:
        raise BootstrapError(f"AWS refused the credentials: {_message(err)}") from None
    if caller != plan.account:
        raise BootstrapError(f"--account {plan.account}: these credentials are of account {caller}; sign in to "
                             f"{plan.account} or name {caller}")
    created: list[str] = []
    steps = Steps(plan, client, say, created)
    try:
        # Roles first: KMS refuses a key policy that names a role not there yet.
        steps.oidc_provider()
        steps.role(plan.deployer_role, "the deployer (GitHub's deploy workflow on main)", deployer_trust(plan))
        steps.role(plan.break_glass_role, "the break-glass role (MFA)", break_glass_trust(plan))
        steps.role(plan.preview_role, "the preview role (read-only, pull requests)", preview_trust(plan),
                   managed=READ_ONLY_POLICY, inline={"state-lock": preview_state_lock(plan)})
        bucket_key = steps.key(plan.bucket_key_alias, "the state bucket's key", key_policy(plan, "bucket"))
        steps.key(plan.secrets_key_alias, "the stacks' secrets key", key_policy(plan, "secrets"))
        steps.bucket(plan.log_bucket, "the state bucket's access log", None, log_bucket_policy(plan))
        steps.bucket(plan.state_bucket, "the state bucket", bucket_key, state_bucket_policy(plan))
        client("s3").put_bucket_logging(Bucket=plan.state_bucket, BucketLoggingStatus={"LoggingEnabled": {
            "TargetBucket": plan.log_bucket, "TargetPrefix": "state/"}})
        client("s3").put_bucket_lifecycle_configuration(
            Bucket=plan.state_bucket, LifecycleConfiguration=state_bucket_lifecycle())
    except ClientError as err:
        raise BootstrapError(f"AWS refused {err.operation_name}: {_message(err)}") from None
    return created


def _message(err: Any) -> str:
    error = err.response.get("Error", {})
    return f"{error.get('Code', '?')}: {error.get('Message', '')}".strip().rstrip(":")[:300]


@dataclass
class Steps:
    plan: Plan
    client: Callable[[str], Any]
    say: Callable[[str], None]
    created: list[str]

    def _report(self, made: bool, what: str, name: str) -> None:
        if made:
            self.created.append(name)
        self.say(f"{'created' if made else 'exists '}  {what}: {name}")

    def key(self, alias: str, what: str, policy: dict[str, Any]) -> str:
        """The key's ARN; created with its alias when the alias is absent."""
        kms = self.client("kms")
        try:
            arn = kms.describe_key(KeyId=alias)["KeyMetadata"]["Arn"]
            made = False
        except kms.exceptions.NotFoundException:
            arn = kms.create_key(Description=f"{PROJECT} {what}", KeyUsage="ENCRYPT_DECRYPT",
                                 Policy=json.dumps(policy), BypassPolicyLockoutSafetyCheck=False)["KeyMetadata"]["Arn"]
            kms.create_alias(AliasName=alias, TargetKeyId=arn)
            made = True
        kms.put_key_policy(KeyId=arn, PolicyName="default", Policy=json.dumps(policy))
        kms.enable_key_rotation(KeyId=arn)
        self._report(made, what, f"{alias} ({arn})")
        return arn

    def bucket(self, name: str, what: str, key_arn: str | None, policy: dict[str, Any]) -> None:
        from botocore.exceptions import ClientError

        s3 = self.client("s3")
        try:
            s3.head_bucket(Bucket=name, ExpectedBucketOwner=self.plan.account)
            made = False
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise BootstrapError(f"bucket {name} exists but is not this account's ({_message(err)}); bucket "
                                     "names are global: delete it or bootstrap another account") from None
            s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": self.plan.region},
                             ObjectOwnership="BucketOwnerEnforced")
            made = True
        s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration={
            "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True})
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        # Server access logs are delivered only to a bucket under SSE-S3 (AWS: "Server
        # access logging" requirements); the state itself is under its own key.
        rule: dict[str, Any] = ({"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms",
                                                                        "KMSMasterKeyID": key_arn},
                                 "BucketKeyEnabled": True} if key_arn else
                                {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}})
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": [rule]})
        s3.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))
        self._report(made, what, f"s3://{name}")

    def oidc_provider(self) -> None:
        iam = self.client("iam")
        arns = [p["Arn"] for p in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]]
        made = self.plan.oidc_provider_arn not in arns
        if made:
            # IAM verifies GitHub's certificate through its own trust store; the thumbprint
            # is no longer read for this provider, but the API still takes one.
            iam.create_open_id_connect_provider(Url=f"https://{GITHUB_OIDC}", ClientIDList=[OIDC_AUDIENCE],
                                                ThumbprintList=["6938fd4d98bab03faadb97b34396831e3780aea1"])
        elif OIDC_AUDIENCE not in iam.get_open_id_connect_provider(
                OpenIDConnectProviderArn=self.plan.oidc_provider_arn)["ClientIDList"]:
            iam.add_client_id_to_open_id_connect_provider(OpenIDConnectProviderArn=self.plan.oidc_provider_arn,
                                                          ClientID=OIDC_AUDIENCE)
        self._report(made, "GitHub's OIDC provider", self.plan.oidc_provider_arn)

    def role(self, name: str, what: str, trust: dict[str, Any], managed: str = ADMIN_POLICY,
             inline: dict[str, dict[str, Any]] | None = None) -> None:
        iam = self.client("iam")
        try:
            iam.get_role(RoleName=name)
            made = False
            iam.update_assume_role_policy(RoleName=name, PolicyDocument=json.dumps(trust))
        except iam.exceptions.NoSuchEntityException:
            iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust), MaxSessionDuration=3600,
                            Description=f"{PROJECT}: {what}", Tags=[{"Key": f"{PROJECT}:role", "Value": name}])
            made = True
        iam.attach_role_policy(RoleName=name, PolicyArn=managed)
        for policy_name, document in {"only-in-region": region_fence(self.plan), **(inline or {})}.items():
            iam.put_role_policy(RoleName=name, PolicyName=policy_name, PolicyDocument=json.dumps(document))
        self._report(made, what, self.plan.role_arn(name))
