"""no-external-access: each policy of the red team's and AWS's documented shapes, judged by the
rule, and the same policies put to the real IAM evaluator as an outsider's request: what the
rule calls open, AWS allows another account; what it calls confined, AWS refuses."""

from __future__ import annotations

import pytest
from platform_policies import ALL_POLICIES
from platform_policies.access import Trust, openings

from tests.iam.evaluator import simulate
from tests.policy.harness import NOT_APPLICABLE, check

RULE = next(p for p in ALL_POLICIES if p.name == "no-external-access")
OURS, OUTSIDER, ORG = "111122223333", "999999999999", "o-abcdefghij"
TRUST = Trust(frozenset({OURS}), frozenset({ORG}))
CONFIG = {"trustedAccounts": [OURS], "trustedOrganizations": [ORG]}
BUCKET = f"arn:aws:s3:::mlplat-prod-datasets-{OURS}-me-central-1"
KEY = f"arn:aws:kms:me-central-1:{OURS}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
QUEUE = f"arn:aws:sqs:me-central-1:{OURS}:events"
REPOSITORY = f"arn:aws:ecr:me-central-1:{OURS}:repository/mlplat/prod/serve"
ROLE = f"arn:aws:iam::{OURS}:role/mlplat-prod-trainer"


def allow(principal, action, resource, condition=None, **extra) -> dict:
    statement = {"Effect": "Allow", "Principal": principal, "Action": action, "Resource": resource, **extra}
    if condition:
        statement["Condition"] = condition
    return {"Version": "2012-10-17", "Statement": [statement]}


# (name, document, the outsider's request (action, resource) or None, the rule's verdict: open?)
CORPUS = [
    # --- the red team's
    ("key policy open to *", allow("*", "kms:*", "*"), ("kms:Decrypt", KEY), True),
    ("bucket policy for another account", allow({"AWS": f"arn:aws:iam::{OUTSIDER}:root"}, "s3:GetObject",
                                                f"{BUCKET}/*"), ("s3:GetObject", f"{BUCKET}/x"), True),
    ("queue policy open to *", allow("*", "sqs:SendMessage", QUEUE), ("sqs:SendMessage", QUEUE), True),
    ("repository pull by another account", allow({"AWS": OUTSIDER}, ["ecr:BatchGetImage",
                                                                     "ecr:GetDownloadUrlForLayer"], REPOSITORY),
     ("ecr:BatchGetImage", REPOSITORY), True),
    ("trust policy of an unknown account", allow({"AWS": f"arn:aws:iam::{OUTSIDER}:root"}, "sts:AssumeRole", "*"),
     ("sts:AssumeRole", ROLE), True),
    # --- conditions that do not confine to the accounts
    ("* with PrincipalAccount IfExists", allow("*", "s3:GetObject", f"{BUCKET}/*",
                                               {"StringEqualsIfExists": {"aws:PrincipalAccount": OURS}}), None, True),
    ("* with a wildcard account", allow("*", "s3:GetObject", f"{BUCKET}/*",
                                        {"StringLike": {"aws:PrincipalAccount": "9*"}}),
     ("s3:GetObject", f"{BUCKET}/x"), True),
    ("* with a negated account", allow("*", "s3:GetObject", f"{BUCKET}/*",
                                       {"StringNotEquals": {"aws:PrincipalAccount": "444455556666"}}),
     ("s3:GetObject", f"{BUCKET}/x"), True),
    ("* from a source IP", allow("*", "s3:GetObject", f"{BUCKET}/*", {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}),
     None, True),
    ("* by any account's role name", allow("*", "kms:Decrypt", "*",
                                           {"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/trainer"}}),
     ("kms:Decrypt", KEY), True),
    ("* of another organisation", allow("*", "s3:GetObject", f"{BUCKET}/*",
                                        {"StringEquals": {"aws:PrincipalOrgID": "o-zzzzzzzzzz"}}), None, True),
    ("* with ForAllValues on the account", allow("*", "s3:GetObject", f"{BUCKET}/*",
                                                 {"ForAllValues:StringEquals": {"aws:PrincipalAccount": OURS}}),
     None, True),
    ("* via S3 but any caller account", allow({"AWS": "*"}, ["kms:Decrypt", "kms:GenerateDataKey*"], "*",
                                              {"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}}),
     None, True),
    ("* with SourceAccount IfExists", allow("*", "sqs:SendMessage", QUEUE,
                                            {"StringEqualsIfExists": {"aws:SourceAccount": OURS}}),
     ("sqs:SendMessage", QUEUE), True),
    ("a federated provider with no subject", allow(
        {"Federated": f"arn:aws:iam::{OURS}:oidc-provider/token.actions.githubusercontent.com"},
        "sts:AssumeRoleWithWebIdentity", "*",
        {"StringEquals": {"token.actions.githubusercontent.com:aud": "sts.amazonaws.com"}}), None, True),
    # --- AWS's documented shapes, and our own principals
    ("a key used through S3 by the account", allow({"AWS": "*"}, ["kms:Decrypt", "kms:GenerateDataKey*"], "*", {
        "StringEquals": {"kms:CallerAccount": OURS, "kms:ViaService": "s3.me-central-1.amazonaws.com"}}),
     ("kms:Decrypt", KEY), False),
    ("* confined by PrincipalAccount", allow("*", "s3:GetObject", f"{BUCKET}/*",
                                             {"StringEquals": {"aws:PrincipalAccount": OURS}}),
     ("s3:GetObject", f"{BUCKET}/x"), False),
    ("* confined by the organisation", allow("*", "s3:GetObject", f"{BUCKET}/*",
                                             {"StringEquals": {"aws:PrincipalOrgID": ORG}}), None, False),
    ("* confined to our roles by ARN", allow("*", "kms:Decrypt", "*",
                                             {"ArnLike": {"aws:PrincipalArn": f"arn:aws:iam::{OURS}:role/*"}}),
     ("kms:Decrypt", KEY), False),
    ("the account's root administers its key", allow({"AWS": f"arn:aws:iam::{OURS}:root"}, "kms:*", "*"),
     ("kms:Decrypt", KEY), False),
    ("a service delivering for the account", allow({"Service": "logging.s3.amazonaws.com"}, "s3:PutObject",
                                                   f"{BUCKET}/*", {"StringEquals": {"aws:SourceAccount": OURS}}),
     None, False),
    ("* for a service's calls from the account", allow("*", "sqs:SendMessage", QUEUE,
                                                       {"StringEquals": {"aws:SourceAccount": OURS}}),
     ("sqs:SendMessage", QUEUE), False),
    ("a service principal (not external access)", allow({"Service": "ec2.amazonaws.com"}, "sts:AssumeRole", "*"),
     None, False),
    ("GitHub's OIDC for one repository", allow(
        {"Federated": f"arn:aws:iam::{OURS}:oidc-provider/token.actions.githubusercontent.com"},
        "sts:AssumeRoleWithWebIdentity", "*",
        {"StringEquals": {"token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
                          "token.actions.githubusercontent.com:sub": "repo:example/mlplat:environment:prod"}}),
     None, False),
]


@pytest.mark.parametrize(("name", "document", "request_", "opens"), CORPUS, ids=[c[0] for c in CORPUS])
def test_the_rule_judges_who_gets_in(name, document, request_, opens):
    opened, refused = openings(document, TRUST)
    assert bool(opened) == opens and refused == []
    props = {"bucket": "b", "policy": document}
    found = check(RULE, "aws:s3/bucketPolicy:BucketPolicy", props, config=CONFIG)
    assert bool(found) == opens, found


def test_allow_with_not_principal_is_refused_and_deny_with_it_is_not():
    document = {"Statement": [{"Effect": "Allow", "NotPrincipal": {"AWS": f"arn:aws:iam::{OURS}:root"},
                               "Action": "s3:*", "Resource": f"{BUCKET}/*"},
                              {"Effect": "Deny", "NotPrincipal": {"AWS": f"arn:aws:iam::{OURS}:root"},
                               "Action": "s3:*", "Resource": f"{BUCKET}/*"}]}
    [message] = check(RULE, "aws:s3/bucketPolicy:BucketPolicy", {"bucket": "b", "policy": document}, config=CONFIG)
    assert "Statement[0]: Allow with NotPrincipal" in message


def test_every_policy_bearing_type_is_judged_and_others_are_not():
    open_key = allow("*", "kms:*", "*")
    for resource_type, field in (("aws:kms/key:Key", "policy"), ("aws:iam/role:Role", "assumeRolePolicy"),
                                 ("aws:sqs/queuePolicy:QueuePolicy", "policy"),
                                 ("aws:ecr/repositoryPolicy:RepositoryPolicy", "policy"),
                                 ("aws:secretsmanager/secretPolicy:SecretPolicy", "policy"),
                                 ("aws:backup/vaultPolicy:VaultPolicy", "policy"),
                                 ("aws:sns/topicPolicy:TopicPolicy", "policy")):
        assert check(RULE, resource_type, {field: open_key}, config=CONFIG), resource_type
    assert check(RULE, "aws:iam/rolePolicy:RolePolicy", {"policy": open_key}, config=CONFIG) == NOT_APPLICABLE
    assert check(RULE, "aws:kms/key:Key", {"description": "no policy"}, config=CONFIG) == NOT_APPLICABLE
    # No config: no account is trusted, so even the account's own root counts as outside.
    assert check(RULE, "aws:kms/key:Key", {"policy": allow({"AWS": f"arn:aws:iam::{OURS}:root"}, "kms:*", "*")})
    assert check(RULE, "aws:kms/key:Key", {"policy": "{not json"}, config=CONFIG)


def test_the_real_evaluator_agrees_with_the_rule():
    """Each policy with an outsider's request: a role of another account, whose own policy
    allows everything, asks. AWS allows it exactly where the rule says the policy is open."""
    attacker = f"arn:aws:iam::{OUTSIDER}:role/trainer"  # named as the victim's role, as an attacker would
    requests = []
    for name, document, request_, _opens in CORPUS:
        if request_ is None:
            continue
        action, resource = request_
        requests.append((name, {
            "request": {"principal": attacker, "action": action,
                        "resource": {"resource": resource, "accountId": OURS},
                        "contextVariables": {"aws:PrincipalArn": attacker, "aws:PrincipalAccount": OUTSIDER,
                                             "aws:PrincipalType": "AssumedRole", "aws:SecureTransport": "true"}},
            "identityPolicies": [{"name": "everything", "policy": {
                "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}}],
            "serviceControlPolicies": [], "resourceControlPolicies": [],
            "resourcePolicy": {**document, "Statement": [{**s, "Resource": s.get("Resource", resource)}
                                                         for s in document["Statement"]]},
        }))
    decided = simulate(requests)
    verdicts = {name: bool(openings(document, TRUST)[0]) for name, document, request_, _o in CORPUS
                if request_ is not None}
    assert len(verdicts) >= 12
    disagree = {name: decided[name] for name, opens in verdicts.items() if (decided[name] == "Allowed") != opens}
    assert disagree == {}
