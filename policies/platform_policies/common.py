"""Helpers every rule shares: config with safe defaults, type matching, values that may be
unknown during preview, keys, tags, CIDRs, and the rule factories.

The pack is self-contained: nothing here imports the Pulumi program, so it can be
published with `pulumi policy publish` and started from its own folder.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pulumi_policy import (
    PolicyComplianceFramework,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError

AWS_PROVIDER_TYPE = "pulumi:providers:aws"

# Residency defaults to the UAE. `me-south-1` is Bahrain: never allow `me-*`.
DEFAULT_ALLOWED_REGIONS = ("me-central-1",)

REGIONS_PROPERTY = {
    "type": "array",
    "items": {"type": "string", "pattern": "^[a-z]{2}(-gov)?-[a-z]+-[0-9]$"},
    "default": list(DEFAULT_ALLOWED_REGIONS),
    "description": "Regions data may live in, each by name (no wildcards).",
}

# Every rule accepts named exemptions; each needs a written reason, which the evidence
# report carries as the rule's "not applicable" reason.
EXEMPTIONS_PROPERTY = {
    "type": "array",
    "default": [],
    "description": "Resources this rule does not judge: Pulumi resource name (glob) and optional type token, "
    "each with the reason a reviewer accepted.",
    "items": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "type": {"type": "string"},
            "reason": {"type": "string", "minLength": 1},
        },
        "required": ["name", "reason"],
        "additionalProperties": False,
    },
}


class _Unknown:
    """A value the engine does not know yet: during `pulumi preview`, the output of a
    resource still to be created. It is set, by reference, so presence checks pass; the
    rule judges its value again at `pulumi up`, when it is known."""

    def __repr__(self) -> str:
        return "<unknown during preview>"


UNKNOWN = _Unknown()


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


def is_kubernetes(resource_type: str) -> bool:
    return resource_type.startswith("kubernetes:")


def aws_types(*tokens: str) -> frozenset[str]:
    """`aws_types("s3/bucket:Bucket")` -> {"aws:s3/bucket:Bucket"}."""
    return frozenset(f"aws:{token}" for token in tokens)


def module_of(resource_type: str) -> str:
    """`aws:s3/bucket:Bucket` -> `s3`."""
    return resource_type.split(":", 2)[1].split("/", 1)[0] if resource_type.startswith("aws:") else ""


def get(props: Mapping[str, Any], *path: str | int) -> Any:
    """Walk nested props; None where any step is missing, UNKNOWN where a step is not
    known yet (instead of the SDK's exception, so one unknown field does not stop a rule
    from judging the others)."""
    value: Any = props
    for step in path:
        try:
            if isinstance(step, int):
                if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
                    return None
                if len(value) <= step:
                    return None
                value = value[step]
            else:
                # `type(...) is dict` first: a plain dict is most of what rules read, and the
                # Mapping check goes through the ABC machinery (a Python call each time).
                if type(value) is not dict and not isinstance(value, Mapping):
                    return None
                value = value[step]  # one lookup: `in` then `[]` would look up twice
        except KeyError:
            return None
        except UnknownValueError:
            return UNKNOWN
    return value


def items(value: Any) -> list[Any]:
    """The elements of a list-valued prop ([] when absent); UNKNOWN elements kept."""
    if value is None or value is UNKNOWN or isinstance(value, (str, bytes, Mapping)):
        return []
    try:
        length = len(value)
    except TypeError:
        return []
    out = []
    for i in range(length):
        try:
            out.append(value[i])
        except UnknownValueError:
            out.append(UNKNOWN)
    return out


def flag(value: Any) -> bool | None:
    """A boolean input: pulumi-aws sends some as strings ("true"/"false"). None when unset,
    UNKNOWN stays UNKNOWN (callers decide)."""
    if value is None or value is UNKNOWN:
        return value  # type: ignore[return-value]
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no", ""):
            return False
    if isinstance(value, (int, float)):
        return bool(value)
    return None


# --- Keys -------------------------------------------------------------------------

AWS_MANAGED_ALIAS = re.compile(r"(^|:)alias/aws/")


def key_problem(value: Any, what: str = "KMS key") -> str | None:
    """Why `value` is not a customer-managed key reference, or None if it is one.

    A key id, key ARN, an alias of our own, or a reference to a key created in the same
    stack (unknown during preview) counts; `alias/aws/<service>` is an AWS-managed key.
    """
    if value is UNKNOWN:
        return None
    if not isinstance(value, str) or not value.strip():
        return f"no {what} is set, so AWS uses its own managed key"
    if AWS_MANAGED_ALIAS.search(value):
        return f"{what} {value} is AWS-managed, not a customer-managed key"
    return None


# --- Tags -------------------------------------------------------------------------


def provider_default_tags(args: Any) -> dict[str, Any]:
    """The provider's default tags. The engine sends `defaultTags` as a JSON string
    '{"tags": {...}}'; tolerate a mapping too."""
    provider = getattr(args, "provider", None)
    if provider is None:
        return {}
    raw = get(provider.props, "defaultTags")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    tags = raw.get("tags") if isinstance(raw, Mapping) else None
    return dict(tags) if isinstance(tags, Mapping) else {}


# --- Networks ---------------------------------------------------------------------

# Broader than this is as good as the whole internet: 0.0.0.0/0, ::/0, or halves of it.
MIN_IPV4_PREFIX = 8
MIN_IPV6_PREFIX = 16


def is_world_open(cidr: Any) -> bool:
    if not isinstance(cidr, str):
        return False
    try:
        network = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return False
    limit = MIN_IPV4_PREFIX if network.version == 4 else MIN_IPV6_PREFIX
    return network.prefixlen < limit


# --- Regions ----------------------------------------------------------------------

_DIRECTIONS = {"north": "n", "south": "s", "east": "e", "west": "w", "central": "c"}


def zone_id_prefix(region: str) -> str:
    """The zone-id prefix of a region: me-central-1 -> mec1, ap-southeast-1 -> apse1,
    us-gov-west-1 -> usgw1. Zone names are shuffled per account; ids are not."""
    parts = region.split("-")
    area, number = parts[0], parts[-1]
    middle = parts[1:-1]
    out = area
    for word in middle:
        if word == "gov":
            out += "g"
            continue
        short = ""
        rest = word
        for direction in ("north", "south", "east", "west", "central"):
            if rest.startswith(direction):
                short += _DIRECTIONS[direction]
                rest = rest[len(direction):]
        out += short + rest[:1] if rest else short
    return out + number


def zone_in_regions(zone: str, regions: Iterable[str]) -> bool:
    """An availability-zone name (me-central-1a) or id (mec1-az1) in one of `regions`.
    Local and Wavelength zones (names with a city code) are not the region itself."""
    for region in regions:
        if re.fullmatch(re.escape(region) + r"[a-z]", zone):
            return True
        if re.fullmatch(re.escape(zone_id_prefix(region)) + r"-az[0-9]+", zone):
            return True
    return False


def arn_region(arn: Any) -> str | None:
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        return None
    parts = arn.split(":")
    return (parts[3] or None) if len(parts) > 3 else None


# --- Rule factories ---------------------------------------------------------------

Applies = Callable[[str], bool] | frozenset[str]
ResourceCheck = Callable[[ResourceValidationArgs, ReportViolation, "Settings"], None]
StackCheck = Callable[[StackValidationArgs, ReportViolation, "Settings"], None]


class Settings:
    """A rule's settings: the engine's config where given, else the schema's defaults."""

    def __init__(self, config: Mapping[str, Any] | None, policy_schema: PolicyConfigSchema) -> None:
        self._config = config or {}
        self._schema = policy_schema

    def __getitem__(self, key: str) -> Any:
        if key in self._config:
            return self._config[key]
        return self._schema.properties[key].get("default")


def exemption_for(settings: Settings, resource_type: str, name: str) -> str | None:
    for entry in settings["exemptions"] or []:
        if not isinstance(entry, Mapping):
            continue
        wanted_type = entry.get("type")
        if wanted_type and wanted_type != resource_type:
            continue
        if fnmatch.fnmatchcase(name, str(entry.get("name", ""))):
            return str(entry.get("reason") or "exempted in policy config")
    return None


def _applies(applies: Applies, resource_type: str) -> bool:
    return resource_type in applies if isinstance(applies, frozenset) else applies(resource_type)


# The reason a rule gives for a type it does not judge. The answer already names the rule and
# the resource; a reason that repeated them was two thirds of every answer's bytes (prod's two
# layers: 2.6 MB of 3.7), which the pack sends, the engine reads and the preview parses.
NOT_JUDGED = "does not judge this resource type"


def resource_rule(
    *,
    name: str,
    description: str,
    applies: Applies,
    check: ResourceCheck,
    framework: PolicyComplianceFramework,
    remediation: str,
    tags: list[str],
    config: Mapping[str, Mapping[str, Any]] | None = None,
) -> ResourceValidationPolicy:
    """A resource rule that declares itself not applicable to types it does not judge
    and to exempted resources, so the evidence report counts only what it judged."""
    policy_schema = schema({**(config or {}), "exemptions": EXEMPTIONS_PROPERTY})

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if not _applies(applies, args.resource_type):
            args.not_applicable(NOT_JUDGED)
        settings = Settings(args.get_config(), policy_schema)
        reason = exemption_for(settings, args.resource_type, args.name)
        if reason is not None:
            args.not_applicable(f"exempted: {reason}")
        check(args, report_violation, settings)

    rule = ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        config_schema=policy_schema,
        framework=framework,
        remediation_steps=remediation,
        tags=tags,
    )
    # What `validate` answers for a type it does not judge, without building its arguments:
    # the pack's Analyze (decoding.share_request_work_across_rules) asks this first.
    rule.skips = lambda resource_type: None if _applies(applies, resource_type) else \
        NOT_JUDGED  # type: ignore[attr-defined]
    return rule


SCOPE_TAG = "scope:"


def stack_rule(
    *,
    name: str,
    description: str,
    scope: frozenset[str],
    check: StackCheck,
    framework: PolicyComplianceFramework,
    remediation: str,
    tags: list[str],
    config: Mapping[str, Mapping[str, Any]] | None = None,
) -> StackValidationPolicy:
    """A stack rule (it needs other resources to judge one). `scope` lists the types it
    judges; they travel as `scope:<type>` tags so the evidence report can count, per
    resource, what the rule checked. Violations on exempted resources are dropped."""
    policy_schema = schema({**(config or {}), "exemptions": EXEMPTIONS_PROPERTY})

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        settings = Settings(args.get_config(), policy_schema)
        exempt = {
            r.urn for r in args.resources if exemption_for(settings, r.resource_type, r.name) is not None
        }

        def report(message: str, urn: str | None = None) -> None:
            if urn not in exempt:
                report_violation(message, urn)

        if not any(r.resource_type in scope for r in args.resources):
            args.not_applicable(f"no {', '.join(sorted(scope))} in the stack")
        check(args, report, settings)

    return StackValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        config_schema=policy_schema,
        framework=framework,
        remediation_steps=remediation,
        tags=[*tags, *(f"{SCOPE_TAG}{t}" for t in sorted(scope))],
    )
