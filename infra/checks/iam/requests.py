"""A request path as the evaluator takes it: the request, the principal's identity policies
and the resource's policy, all as the stack writes them (infra/checks/iam/stack.py)."""

from __future__ import annotations

import re
from typing import Any

from infra.checks.iam.paths import Path
from infra.checks.iam.stack import StackPolicies, mapping


class NotInStack(LookupError):
    """The path names a role, bucket, key, secret or user this stack does not have."""


def _lookup(table: Any, key: str, what: str) -> Any:
    try:
        return table[key]
    except (KeyError, TypeError):
        raise NotInStack(f"no {what} {key!r}") from None


def fill(value: Any, stack: StackPolicies) -> Any:
    """`{account}`, `{region}`, `{trail}`, `{bucket:<purpose>}`, `{key:<class>}` in a path."""
    if isinstance(value, list):
        return [fill(v, stack) for v in value]

    def one(match: re.Match) -> str:
        name = match.group(1)
        kind, _, arg = name.partition(":")
        if kind == "bucket":
            return _lookup(stack.buckets, arg, "bucket")
        if kind == "key":
            return _lookup(stack.keys, arg, "key")
        known = {"account": stack.account, "region": stack.region, "trail": stack.outputs.get("auditTrail")}
        return _lookup({k: v for k, v in known.items() if isinstance(v, str)}, name, "value")

    return re.sub(r"\{([a-z]+(?::[a-z-]+)?)\}", one, value)


def _resource(kind: str, rest: str, stack: StackPolicies,
              bucket_policies: dict[str, dict]) -> tuple[str, dict | None]:
    """The resource's ARN and its policy (None where the service has no resource policy)."""
    if kind == "bucket":
        purpose, _, key = rest.partition("/")
        bucket = _lookup(stack.buckets, purpose, "bucket")
        return f"arn:aws:s3:::{bucket}" + (f"/{fill(key, stack)}" if key else ""), \
            _lookup(bucket_policies, bucket, "bucket policy for")
    if kind == "key":
        resource = _lookup(stack.keys, rest, "key")
        return resource, _lookup(stack.key_policies, resource, "key policy for")
    if kind == "secret":  # the tracking server's secrets: no resource policy, identity decides
        tracking = mapping(mapping(stack.outputs.get("clusterDescriptor")).get("tracking"))
        named = {"admin": tracking.get("adminSecretArn"), "database": tracking.get("masterSecretArn"),
                 **{f"pipelines/{t}": arn for t, arn in mapping(tracking.get("pipelineSecretArns")).items()}}
        return named.get(rest) or _lookup(mapping(tracking.get("tenantSecretArns")), rest, "tenant secret"), None
    if kind == "cache":  # the feature store's online store: the replication group, or a tenant's user
        features = mapping(mapping(stack.outputs.get("clusterDescriptor")).get("features"))
        base = f"arn:aws:elasticache:{stack.region}:{stack.account}"
        if rest == "group":
            return f"{base}:replicationgroup:{_lookup(features, 'replicationGroupId', 'replication group')}", None
        return f"{base}:user:{_lookup(mapping(features.get('users')), rest, 'feature-store user')}", None
    if kind == "trust":  # assuming a role
        role = _lookup(stack.roles, rest, "role")
        return f"arn:aws:iam::{stack.account}:role/{role}", _lookup(stack.trust, role, "trust policy of")
    raise NotInStack(f"no resource kind {kind!r}")


def simulation(path: Path, stack: StackPolicies, bucket_policies: dict[str, dict] | None = None) -> dict[str, Any]:
    """The evaluator's input for one path. NotInStack when the stack lacks what it names."""
    bucket_policies = stack.bucket_policies if bucket_policies is None else bucket_policies
    principal = fill(path.principal, stack)
    identity: list[dict] = []
    if principal.startswith("role:"):
        role = _lookup(stack.roles, principal.removeprefix("role:"), "role")
        principal = f"arn:aws:iam::{stack.account}:role/{role}"
        identity = stack.identity.get(role, [])
    kind, _, rest = path.resource.partition(":")
    resource, policy = _resource(kind, rest, stack, bucket_policies)
    if path.service_grant:
        identity = [{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": path.action,
                                                              "Resource": resource}]}]
    context = {"aws:SecureTransport": "true", **{k: fill(v, stack) for k, v in path.context.items()}}
    if principal.startswith("arn:aws:iam::"):
        # What AWS sets on every request an IAM role makes.
        context = {"aws:PrincipalArn": principal, "aws:PrincipalAccount": principal.split(":")[4],
                   "aws:PrincipalType": "AssumedRole", **context}
    return {
        "request": {"principal": principal, "action": path.action,
                    "resource": {"resource": resource, "accountId": stack.account}, "contextVariables": context},
        "identityPolicies": [{"name": f"policy-{i}", "policy": p} for i, p in enumerate(identity)],
        "serviceControlPolicies": [], "resourceControlPolicies": [],
        "resourcePolicy": policy,
    }
