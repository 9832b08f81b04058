"""Data residency: every AWS resource lives in an allowed region, and so do the zones it names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from .common import (
    AWS_PROVIDER_TYPE,
    DEFAULT_ALLOWED_REGIONS,
    REGIONS_PROPERTY,
    UNKNOWN,
    Settings,
    config_value,
    get,
    is_aws,
    items,
    module_of,
    resource_rule,
    schema,
    zone_in_regions,
)
from .controls import pdpl

# Services that are global by design: their resources have no region to pin. Route 53
# Resolver is regional, so only hosted-zone and record types are exempt from route53.
GLOBAL_MODULES = frozenset(
    {"iam", "organizations", "cloudfront", "globalaccelerator", "budgets", "shield", "waf", "costexplorer", "account"}
)
GLOBAL_TYPES = frozenset(
    {
        "aws:route53/zone:Zone",
        "aws:route53/record:Record",
        "aws:route53/zoneAssociation:ZoneAssociation",
        "aws:route53/healthCheck:HealthCheck",
        "aws:route53/delegationSet:DelegationSet",
    }
)

REGION_SCHEMA = schema(
    {
        "allowedRegions": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[a-z]{2}(-gov)?-[a-z]+-[0-9]$"},
            "default": list(DEFAULT_ALLOWED_REGIONS),
            "description": "Regions data may live in, each by name (no wildcards).",
        },
        "exemptTypes": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Extra global-service type tokens to exempt, each with a written reason in the stack's policy config.",
        },
    }
)


def is_global(resource_type: str, extra: list[str] | tuple[str, ...] = ()) -> bool:
    return module_of(resource_type) in GLOBAL_MODULES or resource_type in GLOBAL_TYPES or resource_type in extra


def effective_region(args: ResourceValidationArgs) -> str | None:
    """The resource's own `region` input if set, else its provider's `region`."""
    if args.resource_type == AWS_PROVIDER_TYPE:
        return args.props.get("region")
    own = args.props.get("region")
    if own:
        return own
    if args.provider is None:
        return None
    return args.provider.props.get("region")


def _validate_region(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if not is_aws(args.resource_type):
        args.not_applicable("not an AWS resource")
    exempt = config_value(args, REGION_SCHEMA, "exemptTypes")
    if is_global(args.resource_type, exempt):
        args.not_applicable("global service, no region")
    allowed = list(config_value(args, REGION_SCHEMA, "allowedRegions"))
    region = effective_region(args)
    if not region:
        report_violation(
            f"{args.resource_type} '{args.name}': region cannot be determined (no `region` input and "
            f"no explicit provider with a region); pin it to one of {allowed}"
        )
    elif region not in allowed:
        report_violation(
            f"{args.resource_type} '{args.name}' is in {region}, outside the allowed regions {allowed}"
        )


aws_resources_in_allowed_regions = ResourceValidationPolicy(
    name="aws-resources-in-allowed-regions",
    description="Every AWS resource (and every AWS provider) is in a region of the residency allow-list.",
    validate=_validate_region,
    config_schema=REGION_SCHEMA,
    framework=pdpl("Articles 22-23", "Personal data stays in the State unless a transfer is lawful."),
    remediation_steps="Pin the resource to an allowed region through the stack's aws.Provider; do not set a "
    "resource-level `region` outside policies/config/<env>.json's allowedRegions.",
    tags=["residency"],
)


# --- Availability zones -------------------------------------------------------------

# Inputs that name zones, at the top level or one level down (e.g. a launch template's
# `placement.availabilityZone`, an EFS replica's `destination.availabilityZoneName`).
ZONE_KEYS = frozenset(
    {
        "availabilityZone",
        "availabilityZoneId",
        "availabilityZoneName",
        "availabilityZones",
        "availabilityZoneIds",
        "preferredAvailabilityZones",
        "preferredCacheClusterAzs",
    }
)

ZONES_SCHEMA = {"allowedRegions": REGIONS_PROPERTY}


def _zones(props: Any) -> list[tuple[str, Any]]:
    """(path, zone) for every zone-naming input, top level and one level down."""
    found: list[tuple[str, Any]] = []

    def collect(mapping: Any, prefix: str) -> None:
        if not isinstance(mapping, Mapping):
            return
        for key in ZONE_KEYS:
            value = get(mapping, key)
            if value is None:
                continue
            if isinstance(value, str) or value is UNKNOWN:
                found.append((f"{prefix}{key}", value))
            else:
                found.extend((f"{prefix}{key}[{i}]", zone) for i, zone in enumerate(items(value)))

    collect(props, "")
    for key in list(props.keys()) if isinstance(props, Mapping) else []:
        if key in ZONE_KEYS:
            continue
        nested = get(props, key)
        if isinstance(nested, Mapping):
            collect(nested, f"{key}.")
        else:
            for i, element in enumerate(items(nested)):
                collect(element, f"{key}[{i}].")
    return found


def _check_zones(args: ResourceValidationArgs, report_violation: ReportViolation, settings: Settings) -> None:
    zones = _zones(args.props)
    if not zones:
        args.not_applicable("names no availability zone")
    allowed = list(settings["allowedRegions"])
    for path, zone in zones:
        if zone is UNKNOWN or zone == "":
            continue  # chosen by the engine from this region's own zone list
        if not isinstance(zone, str) or not zone_in_regions(zone, allowed):
            report_violation(
                f"{args.resource_type} '{args.name}': {path} = {zone!r} is not a zone of the allowed regions {allowed}"
            )


availability_zones_in_allowed_regions = resource_rule(
    name="availability-zones-in-allowed-regions",
    description="Availability zones (names or zone ids) named by AWS resources belong to an allowed region; "
    "Local and Wavelength zones are outside the region.",
    applies=lambda t: t.startswith("aws:"),
    check=_check_zones,
    config=ZONES_SCHEMA,
    framework=pdpl("Articles 22-23", "Personal data stays in the State unless a transfer is lawful."),
    remediation="Choose zones by id from the stack's own region (e.g. mec1-az1..az3 for me-central-1); never a "
    "Local Zone or another region's zone.",
    tags=["residency"],
)
