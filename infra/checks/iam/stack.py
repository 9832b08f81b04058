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
            if not role.startswith(prefix):
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


def _document(value: Any, where: str) -> dict:
    try:
        document = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError as err:
        raise NotReadable(f"{where}: not a policy document ({err.msg})") from None
    if not isinstance(document, dict):
        raise NotReadable(f"{where}: not a policy document")
    return document


def from_report(report: dict[str, Any]) -> StackPolicies:
    """The report's policies: NoCloudLayer when it has none to decide with, NotReadable when
    one is not a document."""
    outputs = report.get("outputs")
    if not isinstance(outputs, dict) or not isinstance(outputs.get("buckets"), dict) \
            or not isinstance(outputs.get("keys"), dict):
        raise NoCloudLayer("the report holds no cloud layer's outputs (buckets, keys)")
    keys = {str(k): str(v) for k, v in outputs["keys"].items()}
    bucket_policies, key_policies, roles, trust, identity = {}, {}, {}, {}, {}
    resources = [r for r in report.get("resources", []) if isinstance(r, dict) and isinstance(r.get("inputs"), dict)]
    for resource in resources:
        kind, name, inputs = resource.get("type"), str(resource.get("name")), resource["inputs"]
        if kind == BUCKET_POLICY:
            bucket_policies[str(inputs.get("bucket"))] = _document(inputs.get("policy"), name)
        elif kind == KEY and name.removeprefix("keys-") in keys:
            key_policies[keys[name.removeprefix("keys-")]] = _document(inputs.get("policy"), name)
        elif kind == ROLE and isinstance(inputs.get("name"), str):
            roles[name] = inputs["name"]
            trust[inputs["name"]] = _document(inputs.get("assumeRolePolicy"), name)
    for resource in resources:
        if resource.get("type") == ROLE_POLICY:
            inputs = resource["inputs"]
            identity.setdefault(str(inputs.get("role")), []).append(_document(inputs.get("policy"), resource["name"]))
    account = str(mapping(outputs.get("clusterDescriptor")).get("accountId") or _account_of(keys))
    return StackPolicies(account, str(report.get("region")), {str(k): str(v) for k, v in outputs["buckets"].items()},
                         bucket_policies, keys, key_policies, roles, trust, identity, outputs)


def _account_of(keys: dict[str, str]) -> str:
    for arn in keys.values():
        found = re.match(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:([0-9]{12}):", arn)
        if found:
            return found.group(1)
    raise NoCloudLayer("the report names no account (no clusterDescriptor.accountId, no key ARN)")
