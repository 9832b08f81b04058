"""Helpers every rule shares: config with safe defaults, regions, type matching.

The pack is self-contained: nothing here imports the Pulumi program, so it can be
published with `pulumi policy publish` and started from its own folder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pulumi_policy import PolicyConfigSchema

AWS_PROVIDER_TYPE = "pulumi:providers:aws"

# Residency defaults to the UAE. `me-south-1` is Bahrain: never allow `me-*`.
DEFAULT_ALLOWED_REGIONS = ("me-central-1",)


def schema(properties: Mapping[str, Mapping[str, Any]]) -> PolicyConfigSchema:
    """A config schema whose defaults the rule also applies itself.

    The Pulumi CLI fills schema defaults before it calls `Configure`; a pack started any
    other way (tests, the offline preview without a config file) gets `{}`, so rules read
    their settings through `config_value`, which falls back to the same defaults.
    """
    return PolicyConfigSchema(properties=dict(properties))


def config_value(args: Any, policy_schema: PolicyConfigSchema, key: str) -> Any:
    config = args.get_config() or {}
    if key in config:
        return config[key]
    return policy_schema.properties[key].get("default")


def is_aws(resource_type: str) -> bool:
    return resource_type.startswith("aws:") or resource_type == AWS_PROVIDER_TYPE


def type_in(resource_type: str, tokens: Iterable[str]) -> bool:
    """Match a type token against `module/name:Name` suffixes, e.g. `s3/bucket:Bucket`."""
    return any(resource_type == f"aws:{token}" for token in tokens)


def module_of(resource_type: str) -> str:
    """`aws:s3/bucket:Bucket` -> `s3`."""
    return resource_type.split(":", 2)[1].split("/", 1)[0] if resource_type.startswith("aws:") else ""


def get(props: Mapping[str, Any], *path: str | int) -> Any:
    """Walk nested props; None where any step is missing."""
    value: Any = props
    for step in path:
        if isinstance(step, int):
            if not isinstance(value, (list, tuple)) or len(value) <= step:
                return None
            value = value[step]
        else:
            if not isinstance(value, Mapping) or step not in value:
                return None
            value = value[step]
    return value
