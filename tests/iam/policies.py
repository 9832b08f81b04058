"""The policies a stack's cloud layer writes, as its preview registers them: every bucket
policy, key policy, role trust policy and inline identity policy, with the names the
request paths use (bucket purpose, key data class, role resource name)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
KEY = "aws:kms/key:Key"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


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


def stack_policies(result: Any, account: str) -> StackPolicies:
    outputs = result.stack_outputs
    keys = dict(outputs["keys"])
    bucket_policies, key_policies, roles, trust, identity = {}, {}, {}, {}, {}
    by_urn = {}
    for reg in result.registrations:
        inputs = reg.inputs(mask_secrets=False)
        if reg.type == BUCKET_POLICY:
            bucket_policies[inputs["bucket"]] = json.loads(inputs["policy"])
        elif reg.type == KEY:
            key_policies[keys[reg.name.removeprefix("keys-")]] = json.loads(inputs["policy"])
        elif reg.type == ROLE:
            roles[reg.name] = inputs["name"]
            trust[inputs["name"]] = json.loads(inputs["assumeRolePolicy"])
            by_urn[reg.urn] = inputs["name"]
    for reg in result.registrations:
        if reg.type == ROLE_POLICY:
            inputs = reg.inputs(mask_secrets=False)
            identity.setdefault(inputs["role"], []).append(json.loads(inputs["policy"]))
    return StackPolicies(account, result.region, dict(outputs["buckets"]), bucket_policies, keys, key_policies,
                         roles, trust, identity, outputs)
