"""The IAM path table (tests/iam/paths.py) against the policies prod's cloud layer writes,
decided by a real IAM evaluator: every path the platform relies on Allowed, every abuse
Denied. The run prints how many of each and how long the table took."""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

import pytest

from components import bucket_policy as bucket_policy_module
from infra.preview.fixtures import ACCOUNT_ID
from tests.conftest import preview
from tests.iam.evaluator import simulate
from tests.iam.paths import ALLOWED, PATHS, Path
from tests.iam.policies import StackPolicies, stack_policies

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prod() -> StackPolicies:
    return stack_policies(preview("prod"), ACCOUNT_ID)


def _fill(value: Any, stack: StackPolicies) -> Any:
    """`{account}`, `{region}`, `{trail}`, `{bucket:<purpose>}`, `{key:<class>}` in a path."""
    if isinstance(value, list):
        return [_fill(v, stack) for v in value]

    def one(match: re.Match) -> str:
        name = match.group(1)
        kind, _, arg = name.partition(":")
        if kind == "bucket":
            return stack.buckets[arg]
        if kind == "key":
            return stack.keys[arg]
        return {"account": stack.account, "region": stack.region, "trail": stack.outputs["auditTrail"]}[name]

    return re.sub(r"\{([a-z]+(?::[a-z-]+)?)\}", one, value)


def simulation(path: Path, stack: StackPolicies, bucket_policies: dict[str, dict] | None = None) -> dict[str, Any]:
    """The evaluator's input for one path: the request, the principal's identity policies
    and the resource's policy, all as the stack writes them."""
    bucket_policies = stack.bucket_policies if bucket_policies is None else bucket_policies
    principal = _fill(path.principal, stack)
    identity: list[dict] = []
    if principal.startswith("role:"):
        role = stack.roles[principal.removeprefix("role:")]
        principal = f"arn:aws:iam::{stack.account}:role/{role}"
        identity = stack.identity.get(role, [])
    kind, _, rest = path.resource.partition(":")
    if kind == "bucket":
        purpose, _, key = rest.partition("/")
        bucket = stack.buckets[purpose]
        resource, policy, owner = f"arn:aws:s3:::{bucket}" + (f"/{_fill(key, stack)}" if key else ""), \
            bucket_policies[bucket], stack.account
    elif kind == "key":
        resource = stack.keys[rest]
        policy, owner = stack.key_policies[resource], stack.account
    elif kind == "secret":  # the tracking server's secrets: no resource policy, identity decides
        tracking = stack.outputs["clusterDescriptor"]["tracking"]
        named = {"admin": tracking["adminSecretArn"], "database": tracking["masterSecretArn"],
                 **{f"pipelines/{t}": arn for t, arn in tracking["pipelineSecretArns"].items()}}
        resource, policy, owner = named.get(rest) or tracking["tenantSecretArns"][rest], None, stack.account
    elif kind == "cache":  # the feature store's online store: the replication group, or a tenant's user
        features = stack.outputs["clusterDescriptor"]["features"]
        base = f"arn:aws:elasticache:{stack.region}:{stack.account}"
        resource = (f"{base}:replicationgroup:{features['replicationGroupId']}" if rest == "group"
                    else f"{base}:user:{features['users'][rest]}")
        policy, owner = None, stack.account
    else:  # trust: assuming a role
        role = stack.roles[rest]
        resource, policy, owner = f"arn:aws:iam::{stack.account}:role/{role}", stack.trust[role], stack.account
    if path.service_grant:
        identity = [{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": path.action,
                                                              "Resource": resource}]}]
    context = {"aws:SecureTransport": "true", **{k: _fill(v, stack) for k, v in path.context.items()}}
    if principal.startswith("arn:aws:iam::"):
        # What AWS sets on every request an IAM role makes.
        context = {"aws:PrincipalArn": principal, "aws:PrincipalAccount": principal.split(":")[4],
                   "aws:PrincipalType": "AssumedRole", **context}
    return {
        "request": {"principal": principal, "action": path.action, "resource": {"resource": resource,
                                                                                  "accountId": owner},
                    "contextVariables": context},
        "identityPolicies": [{"name": f"policy-{i}", "policy": p} for i, p in enumerate(identity)],
        "serviceControlPolicies": [], "resourceControlPolicies": [],
        "resourcePolicy": policy,
    }


def decide(paths: tuple[Path, ...], stack: StackPolicies, **kwargs: Any) -> dict[str, str]:
    return simulate([(p.name, simulation(p, stack, **kwargs)) for p in paths])


def test_every_path_is_decided_as_the_table_says(prod, capsys):
    started = time.perf_counter()
    decided = decide(PATHS, prod)
    seconds = time.perf_counter() - started
    wrong = [f"{p.name}: {decided[p.name]}, expected {p.expect}" for p in PATHS
             if (decided[p.name] == ALLOWED) != (p.expect == ALLOWED)]
    allowed = sum(p.expect == ALLOWED for p in PATHS)
    with capsys.disabled():
        print(f"\nIAM path table: {len(PATHS)} paths, {allowed} Allowed and {len(PATHS) - allowed} Denied, "
              f"decided in {seconds:.2f} s (@cloud-copilot/iam-simulate, prod's policies)")
    assert wrong == []


def test_the_table_names_each_path_once_and_covers_allowed_and_denied():
    names = [p.name for p in PATHS]
    assert len(set(names)) == len(names)
    assert {p.expect for p in PATHS} == {"Allowed", "Denied"}


def test_the_ifexists_defect_is_caught_when_it_comes_back(prod):
    """Put back the Deny that used `StringNotEqualsIfExists` on the encryption headers: the
    uploads that rely on default encryption must come out Denied."""
    broken = copy.deepcopy(prod.bucket_policies)
    for policy in broken.values():
        for statement in policy["Statement"]:
            if statement.get("Sid") == "DenyObjectsNotEncryptedWithKms":
                statement["Condition"] = {"StringNotEqualsIfExists": {"s3:x-amz-server-side-encryption": "aws:kms"}}
    relying = tuple(p for p in PATHS if p.action == "s3:PutObject" and p.expect == ALLOWED
                    and "s3:x-amz-server-side-encryption" not in p.context)
    assert len(relying) >= 3  # log delivery, FSx export, the serving publisher
    decided = decide(relying, prod, bucket_policies=broken)
    assert {name: result for name, result in decided.items()} == {p.name: "ExplicitlyDenied" for p in relying}
    # And the module no longer writes it.
    assert "IfExists" not in json.dumps(bucket_policy_module.bucket_policy("b", "k", account=ACCOUNT_ID)
                                        ["Statement"][1:])


def test_the_bucket_keeps_shared_prefixes_to_their_owners_whatever_an_identity_policy_allows(prod):
    """Take the owner-only Denies out of the models and checkpoints buckets: an account role
    whose own policy allows it (an admin, a developer) then reaches the served model, MLflow's
    artifacts and a tenant's runs. With them, it does not (the table's Denied paths)."""
    broken = copy.deepcopy(prod.bucket_policies)
    for purpose in ("models", "checkpoints"):
        policy = broken[prod.buckets[purpose]]
        policy["Statement"] = [s for s in policy["Statement"] if not s.get("Sid", "").startswith("OnlyOwnerReads")]
    around = tuple(p for p in PATHS if p.principal == "arn:aws:iam::{account}:role/developer"
                   and p.resource.startswith(("bucket:models/", "bucket:checkpoints/")))
    assert len(around) == 3 and all(p.expect != ALLOWED for p in around)
    assert set(decide(around, prod, bucket_policies=broken).values()) == {ALLOWED}
    assert ALLOWED not in decide(around, prod).values()
