"""The policies a stack's cloud layer writes, read from its preview report (`mlplat preview
--json`, or `PreviewResult.report`): every bucket policy, key policy, role trust policy and
inline identity policy, with the names the request paths use (bucket purpose, key data
class, role resource name), and the stack's outputs for what the policies name."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
KEY = "aws:kms/key:Key"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE_NAME_LIMIT = 64  # IAM's


class NotReadable(ValueError):
    """A policy the report holds is not a policy document."""


class NoCloudLayer(NotReadable):
    """The report holds no cloud layer's outputs to resolve paths with (a cluster layer, a
    program that exports none)."""


@dataclass(frozen=True)
class StackPolicies:
    account: str
    region: str
    buckets: dict[str, str]  # purpose -> bucket name
    bucket_policies: dict[str, dict]  # bucket name -> policy
    keys: dict[str, str]  # data class -> key ARN
    key_policies: dict[str, dict]  # key ARN -> policy
    roles: dict[str, str]  # role resource name -> IAM role name
    trust: dict[str, dict]  # IAM role name -> trust policy
    identity: dict[str, list[dict]]  # IAM role name -> its inline policies
    outputs: dict[str, Any]
    unread: frozenset[str] = frozenset()  # grants held where this reader does not look

    def tenant_roles(self) -> dict[str, dict[str, str]]:
        """{tenant: {role resource name: IAM role name}}: the roles named
        `mlplat-<environment>-<tenant>-...`, for the tenants the stack serves (those with a
        tracking user or a feature-store user)."""
        descriptor = mapping(self.outputs.get("clusterDescriptor"))
        tracking, features = mapping(descriptor.get("tracking")), mapping(descriptor.get("features"))
        tenants = {t for t in (*mapping(tracking.get("tenantSecretArns")), *mapping(features.get("users")))
                   if isinstance(t, str)}
        environment = descriptor.get("environment")
        found: dict[str, dict[str, str]] = {tenant: {} for tenant in tenants}
        if not isinstance(environment, str) or not environment:
            return found
        prefix = f"mlplat-{environment}-"
        for resource_name, role in self.roles.items():
            if not role.startswith(prefix) or len(role) > ROLE_NAME_LIMIT:
                continue
            # Each place a tenant's name could end, looked up: a role's name, not every tenant.
            rest = role[len(prefix):]
            owner = next((rest[:i] for i, c in enumerate(rest) if c == "-" and rest[:i] in found), None)
            if owner is not None:
                found[owner][resource_name] = role
        return found


def mapping(value: Any) -> dict:
    """`value` where it is a mapping, else an empty one: a report's outputs are read as they
    come, and a part of the wrong type holds nothing to resolve."""
    return value if isinstance(value, dict) else {}


# What one policy may weigh before the report is not read: AWS's own limits (an inline role
# policy set 10,240 characters, a bucket policy 20 KB, a key policy 32 KB, a trust policy
# 4,096 characters), with room for the reports' whitespace. A report past them could not be
# applied, and each request carries its principal's and resource's policies to the evaluator.
LIMITS = {"identity": 64 << 10, "bucket": 128 << 10, "key": 128 << 10, "trust": 32 << 10}
# Grants this reader does not resolve into paths: a change to one of them leaves the paths
# unjudged (infra/preview/request_paths.py); the grants table still shows it.
UNREAD_TYPES = frozenset({
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:iam/policyAttachment:PolicyAttachment",
    "aws:iam/rolePoliciesExclusive:RolePoliciesExclusive", "aws:iam/policy:Policy", "aws:kms/keyPolicy:KeyPolicy",
    "aws:kms/grant:Grant", "aws:secretsmanager/secretPolicy:SecretPolicy", "aws:s3/bucketAclV2:BucketAclV2"})
UNREAD_INPUTS = {ROLE: ("inlinePolicies", "managedPolicyArns"), "aws:s3/bucket:Bucket": ("policy",),
                 "aws:s3/bucketV2:BucketV2": ("policy",)}


def policy_document(value: Any, where: str, limit: int) -> dict:
    """The policy document an input holds as JSON text (or as a mapping already): NotReadable,
    naming `where` and why, when it is longer than `limit` characters, not JSON that Python
    reads (nested past the recursion limit, a number past its digits), or not an object."""
    if isinstance(value, str) and len(value) > limit:
        raise NotReadable(f"{where}: a policy of {len(value)} characters, past the {limit} AWS would take")
    try:
        document = json.loads(value) if isinstance(value, str) else value
    except (ValueError, RecursionError) as err:  # JSONDecodeError, a number past Python's digits, nesting
        raise NotReadable(f"{where}: not a policy document ({getattr(err, 'msg', type(err).__name__)})") from None
    if not isinstance(document, dict):
        raise NotReadable(f"{where}: not a policy document")
    return document


def _unread(kind: Any, name: str, inputs: dict[str, Any]) -> str | None:
    """The grant a resource holds that this reader does not resolve, as comparable text."""
    if kind in UNREAD_TYPES:
        held = inputs
    else:
        held = {k: inputs[k] for k in UNREAD_INPUTS.get(str(kind), ()) if inputs.get(k) not in (None, [], {}, "")}
        if not held:
            return None
    try:
        return f"{kind} {name}: " + json.dumps(held, sort_keys=True, default=str)
    except (ValueError, RecursionError):
        return f"{kind} {name}: (unreadable)"


def from_report(report: dict[str, Any]) -> StackPolicies:
    """The report's policies: NoCloudLayer when it has none to decide with, NotReadable when
    one is not a document, weighs more than AWS would take, or a bucket has two policy
    resources (AWS keeps one, whichever was applied last)."""
    outputs = report.get("outputs")
    if not isinstance(outputs, dict) or not isinstance(outputs.get("buckets"), dict) \
            or not isinstance(outputs.get("keys"), dict):
        raise NoCloudLayer("the report holds no cloud layer's outputs (buckets, keys)")
    keys = {str(k): str(v) for k, v in outputs["keys"].items()}
    bucket_policies, key_policies, roles, trust, identity = {}, {}, {}, {}, {}
    unread: set[str] = set()
    resources = [r for r in report.get("resources", []) if isinstance(r, dict) and isinstance(r.get("inputs"), dict)]
    for resource in resources:
        kind, name, inputs = resource.get("type"), str(resource.get("name")), resource["inputs"]
        if kind == BUCKET_POLICY:
            bucket = str(inputs.get("bucket"))
            if bucket in bucket_policies:
                raise NotReadable(f"bucket {bucket[:80]} has more than one policy resource; AWS keeps only one")
            bucket_policies[bucket] = policy_document(inputs.get("policy"), name, LIMITS["bucket"])
        elif kind == KEY and name.removeprefix("keys-") in keys:
            key_policies[keys[name.removeprefix("keys-")]] = policy_document(inputs.get("policy"), name, LIMITS["key"])
        elif kind == ROLE and isinstance(inputs.get("name"), str):
            roles[name] = inputs["name"]
            trust[inputs["name"]] = policy_document(inputs.get("assumeRolePolicy"), name, LIMITS["trust"])
        found = _unread(kind, name, inputs)
        if found is not None:
            unread.add(found)
    weight: dict[str, int] = {}
    for resource in resources:
        if resource.get("type") == ROLE_POLICY:
            inputs = resource["inputs"]
            role, policy = str(inputs.get("role")), inputs.get("policy")
            weight[role] = weight.get(role, 0) + (len(policy) if isinstance(policy, str) else 0)
            if weight[role] > LIMITS["identity"]:
                raise NotReadable(f"role {role[:80]}: inline policies past the {LIMITS['identity']} characters AWS "
                                  "would take")
            identity.setdefault(role, []).append(policy_document(policy, str(resource.get("name")), LIMITS["identity"]))
    account = str(mapping(outputs.get("clusterDescriptor")).get("accountId") or _account_of(keys))
    return StackPolicies(account, str(report.get("region")), {str(k): str(v) for k, v in outputs["buckets"].items()},
                         bucket_policies, keys, key_policies, roles, trust, identity, outputs, frozenset(unread))


def _account_of(keys: dict[str, str]) -> str:
    for arn in keys.values():
        found = re.match(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:([0-9]{12}):", arn)
        if found:
            return found.group(1)
    raise NoCloudLayer("the report names no account (no clusterDescriptor.accountId, no key ARN)")
