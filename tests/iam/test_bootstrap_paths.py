"""What `mlplat bootstrap` makes, judged by the real IAM evaluator: the break-glass role
needs MFA, the state bucket refuses plain HTTP, the preview role reads state but writes
only the backend's lock, and the state keys are used through S3 or by the roles named.

(GitHub's OIDC claims are condition keys the evaluator does not know, so the deployer's
and the preview role's trust are checked claim by claim in tests/unit/test_bootstrap.py.)"""

from __future__ import annotations

from typing import Any

from infra.bootstrap import Plan, break_glass_trust, key_policy, preview_state_lock, state_bucket_policy
from tests.iam.evaluator import simulate

PLAN = Plan("111122223333", "me-central-1", "mlplat/mlplat", ("prod",))
ROLE = "arn:aws:iam::111122223333:role/{}"
OBJECT = f"arn:aws:s3:::{PLAN.state_bucket}/.pulumi/stacks/mlplat/prod.json"
LOCK = f"arn:aws:s3:::{PLAN.state_bucket}/.pulumi/locks/organization/mlplat/prod/1.json"
TOOLS = f"arn:aws:s3:::{PLAN.state_bucket}/runner-tools/sha256-{'0' * 64}.tar.gz"  # infra/runner_tools.py
KEY = "arn:aws:kms:me-central-1:111122223333:key/k"


def request(principal: str, action: str, resource: str, policy: dict | None, identity: list[dict],
            context: dict[str, str] | None = None) -> dict[str, Any]:
    context = {"aws:SecureTransport": "true", "aws:PrincipalArn": principal,
               "aws:PrincipalAccount": principal.split(":")[4], **(context or {})}
    return {"request": {"principal": principal, "action": action,
                        "resource": {"resource": resource, "accountId": PLAN.account}, "contextVariables": context},
            "identityPolicies": [{"name": f"p{i}", "policy": p} for i, p in enumerate(identity)],
            "serviceControlPolicies": [], "resourceControlPolicies": [], "resourcePolicy": policy}


def allow(action: str, resource: str = "*") -> dict:
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": action, "Resource": resource}]}


READ_ONLY = allow("s3:Get*")  # ReadOnlyAccess's S3 part, for the preview role
PREVIEW = ROLE.format(PLAN.preview_role)
DEPLOYER = ROLE.format(PLAN.deployer_role)
PATHS = {
    # (request, expected)
    "break-glass with MFA": (request("arn:aws:iam::111122223333:user/alice", "sts:AssumeRole",
                                     ROLE.format(PLAN.break_glass_role), break_glass_trust(PLAN),
                                     [allow("sts:AssumeRole")], {"aws:MultiFactorAuthPresent": "true"}), "Allowed"),
    "break-glass without MFA": (request("arn:aws:iam::111122223333:user/alice", "sts:AssumeRole",
                                        ROLE.format(PLAN.break_glass_role), break_glass_trust(PLAN),
                                        [allow("sts:AssumeRole")], {"aws:MultiFactorAuthPresent": "false"}),
                                "ImplicitlyDenied"),
    "break-glass from another account with MFA": (
        request("arn:aws:iam::999999999999:user/mallory", "sts:AssumeRole", ROLE.format(PLAN.break_glass_role),
                break_glass_trust(PLAN), [allow("sts:AssumeRole")], {"aws:MultiFactorAuthPresent": "true"}),
        "ImplicitlyDenied"),
    "deployer reads state over TLS": (request(DEPLOYER, "s3:GetObject", OBJECT, state_bucket_policy(PLAN),
                                              [allow("*")]), "Allowed"),
    "deployer over plain HTTP": (request(DEPLOYER, "s3:GetObject", OBJECT, state_bucket_policy(PLAN), [allow("*")],
                                         {"aws:SecureTransport": "false"}), "ExplicitlyDenied"),
    "deployer stores the runner tools": (request(DEPLOYER, "s3:PutObject", TOOLS, state_bucket_policy(PLAN),
                                                 [allow("*")]), "Allowed"),
    "deployer fetches the runner tools over TLS": (request(DEPLOYER, "s3:GetObject", TOOLS, state_bucket_policy(PLAN),
                                                           [allow("*")]), "Allowed"),
    "runner tools over plain HTTP": (request(DEPLOYER, "s3:GetObject", TOOLS, state_bucket_policy(PLAN), [allow("*")],
                                             {"aws:SecureTransport": "false"}), "ExplicitlyDenied"),
    "preview cannot replace the runner tools": (request(PREVIEW, "s3:PutObject", TOOLS, state_bucket_policy(PLAN),
                                                        [READ_ONLY, preview_state_lock(PLAN)]), "ImplicitlyDenied"),
    "preview reads state": (request(PREVIEW, "s3:GetObject", OBJECT, state_bucket_policy(PLAN),
                                    [READ_ONLY, preview_state_lock(PLAN)]), "Allowed"),
    "preview takes the lock": (request(PREVIEW, "s3:PutObject", LOCK, state_bucket_policy(PLAN),
                                       [READ_ONLY, preview_state_lock(PLAN)]), "Allowed"),
    "preview cannot write state": (request(PREVIEW, "s3:PutObject", OBJECT, state_bucket_policy(PLAN),
                                           [READ_ONLY, preview_state_lock(PLAN)]), "ImplicitlyDenied"),
    "preview decrypts a secret": (request(PREVIEW, "kms:Decrypt", KEY, key_policy(PLAN, "secrets"), []), "Allowed"),
    "preview cannot encrypt a secret": (request(PREVIEW, "kms:Encrypt", KEY, key_policy(PLAN, "secrets"), []),
                                        "ImplicitlyDenied"),
    "deployer makes a data key for the stack": (
        request(DEPLOYER, "kms:GenerateDataKey", KEY, key_policy(PLAN, "secrets"), []), "Allowed"),
    "deployer uses the bucket key through S3": (
        request(DEPLOYER, "kms:GenerateDataKey", KEY, key_policy(PLAN, "bucket"), [],
                {"kms:ViaService": "s3.me-central-1.amazonaws.com", "kms:CallerAccount": "111122223333"}), "Allowed"),
    "deployer cannot use the bucket key directly": (
        request(DEPLOYER, "kms:Decrypt", KEY, key_policy(PLAN, "bucket"), [], {"kms:CallerAccount": "111122223333"}),
        "ImplicitlyDenied"),
    "another account's role cannot use the secrets key": (
        request("arn:aws:iam::999999999999:role/mlplat-deployer", "kms:Decrypt", KEY, key_policy(PLAN, "secrets"),
                [allow("kms:*")]), "ImplicitlyDenied"),
}


def test_every_bootstrap_path_is_decided_as_listed():
    decided = simulate([(name, sim) for name, (sim, _) in PATHS.items()])
    assert decided == {name: expected for name, (_, expected) in PATHS.items()}
