"""Call a rule's validate function directly, as the analyzer servicer would."""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.policy import _NotApplicableError

NOT_APPLICABLE = "not applicable"
AWS_PROVIDER = {"region": "me-central-1"}


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], None, [], None)


def provider(props: dict[str, Any] | None = AWS_PROVIDER) -> PolicyProviderResource | None:
    if props is None:
        return None
    return PolicyProviderResource("pulumi:providers:aws", props, "urn:pulumi:t::p::pulumi:providers:aws::p", "p")


def check(policy: Any, resource_type: str, props: dict[str, Any], *, provider_props: dict | None = AWS_PROVIDER,
          config: dict[str, Any] | None = None, name: str = "r") -> list[str] | str:
    """The rule's violation messages for one resource, or NOT_APPLICABLE."""
    messages: list[str] = []
    args = ResourceValidationArgs(resource_type, props, f"urn:pulumi:t::p::{resource_type}::{name}", name,
                                  _opts(), provider(provider_props), config)
    try:
        policy.validate(args, lambda message, urn=None: messages.append(message))
    except _NotApplicableError:
        return NOT_APPLICABLE
    return messages


def stack_resource(resource_type: str, props: dict[str, Any], name: str = "r",
                   provider_props: dict | None = AWS_PROVIDER,
                   property_dependencies: dict[str, list[PolicyResource]] | None = None) -> PolicyResource:
    return PolicyResource(resource_type, props, f"urn:pulumi:t::p::{resource_type}::{name}", name, _opts(),
                          provider(provider_props), None, [], property_dependencies or {})


def check_stack(policy: Any, resources: list[PolicyResource], config: dict | None = None) -> list[tuple[str, str | None]]:
    """(message, urn) for every violation a stack rule reports."""
    found: list[tuple[str, str | None]] = []
    try:
        policy.validate(StackValidationArgs(resources, config), lambda m, urn=None: found.append((m, urn)))
    except _NotApplicableError:
        pass
    return found
