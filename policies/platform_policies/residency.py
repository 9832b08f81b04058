"""Data residency: every AWS resource lives in an allowed region."""

from __future__ import annotations

from pulumi_policy import ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from .common import AWS_PROVIDER_TYPE, DEFAULT_ALLOWED_REGIONS, config_value, is_aws, module_of, schema
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
