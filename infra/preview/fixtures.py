"""In-region answers to the invokes the program makes, for the offline preview.

Every invoke the program makes must be answered here: an unanswered invoke would return
`None` fields silently under mocks, so `answer` raises for any token it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.versions import EKS_ADDONS

ACCOUNT_ID = "111122223333"  # AWS's documentation account: never a real one
DEFAULT_VCPU_QUOTA = 4096.0

# Availability zones by region, with their zone *ids*: names are shuffled per account,
# ids are not, so the program chooses subnets and placement by id.
ZONES: dict[str, tuple[tuple[str, str], ...]] = {
    "me-central-1": (("me-central-1a", "mec1-az1"), ("me-central-1b", "mec1-az2"), ("me-central-1c", "mec1-az3")),
    "me-south-1": (("me-south-1a", "mes1-az1"), ("me-south-1b", "mes1-az2"), ("me-south-1c", "mes1-az3")),
    "eu-central-1": (("eu-central-1a", "euc1-az2"), ("eu-central-1b", "euc1-az3"), ("eu-central-1c", "euc1-az1")),
    "eu-west-1": (("eu-west-1a", "euw1-az1"), ("eu-west-1b", "euw1-az2"), ("eu-west-1c", "euw1-az3")),
}


class UnansweredInvoke(Exception):
    """The program made an invoke the offline preview has no fixture for."""


@dataclass(frozen=True)
class RegionFixture:
    region: str
    account_id: str = ACCOUNT_ID
    # Instance types the preview says are *not* offered, as (type, zone id) pairs; empty
    # means every type is offered in every zone. Tests set it to prove the preflight check.
    not_offered: frozenset[tuple[str, str]] = frozenset()
    # The account's On-Demand vCPU quotas by quota code; unlisted ones are DEFAULT_VCPU_QUOTA
    # (an account whose quotas were raised for the platform).
    vcpu_quotas: Mapping[str, float] = field(default_factory=dict)
    # The newest release of each EKS add-on in the region; unlisted: the version pinned.
    addon_versions: Mapping[str, str] = field(default_factory=dict)
    # Interface endpoint services (`ecr.api`) the region lacks.
    missing_endpoint_services: frozenset[str] = frozenset()
    # Capacity Blocks the account holds, by cr- id: instanceType, availabilityZoneId,
    # instanceCount, state.
    capacity_blocks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Zone ids AWS reports as not available (impaired, or lost as two of me-central-1's
    # were in March 2026): a state=available lookup leaves them out.
    unavailable_zones: frozenset[str] = frozenset()
    # IAM roles (by name) the account does not have: a deployer or break-glass role that
    # `mlplat bootstrap` has not made.
    missing_roles: frozenset[str] = frozenset()

    @property
    def zones(self) -> tuple[tuple[str, str], ...]:
        return ZONES.get(self.region, ((f"{self.region}a", f"{self.region}-az1"),))

    def answer(self, token: str, args: dict[str, Any]) -> dict[str, Any]:
        handler = _HANDLERS.get(token)
        if handler is None:
            raise UnansweredInvoke(f"the offline preview has no fixture for invoke {token}")
        return handler(self, args)


def _caller_identity(fx: RegionFixture, _args: dict[str, Any]) -> dict[str, Any]:
    return {
        "accountId": fx.account_id,
        "arn": f"arn:aws:iam::{fx.account_id}:role/preview",
        "userId": "AROAPREVIEW:preview",
        "id": fx.account_id,
    }


def _region(fx: RegionFixture, _args: dict[str, Any]) -> dict[str, Any]:
    return {"name": fx.region, "region": fx.region, "id": fx.region, "endpoint": f"ec2.{fx.region}.amazonaws.com",
            "description": fx.region}


def _partition(_fx: RegionFixture, _args: dict[str, Any]) -> dict[str, Any]:
    return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws", "reverseDnsPrefix": "com.amazonaws"}


def _availability_zones(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    state = args.get("state")
    zones = [(name, zone_id) for name, zone_id in fx.zones
             if state != "available" or zone_id not in fx.unavailable_zones]
    return {
        "names": [name for name, _ in zones],
        "zoneIds": [zone_id for _, zone_id in zones],
        "groupNames": [fx.region] * len(zones),
        "id": fx.region,
        "state": state,
    }


def _role(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    name = args["name"]
    if name in fx.missing_roles:
        raise InvokeRefused(f"reading IAM Role ({name}): couldn't find resource")
    return {"id": name, "name": name, "arn": f"arn:aws:iam::{fx.account_id}:role/{name}", "path": "/",
            "assumeRolePolicy": "{}", "maxSessionDuration": 3600, "uniqueId": "AROAPREVIEW"}


def _instance_type_offerings(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    filters = {f["name"]: list(f["values"]) for f in args.get("filters") or []}
    wanted = filters.get("instance-type", [])
    zone_ids = filters.get("location", [zone_id for _, zone_id in fx.zones])
    rows = [(t, z) for t in wanted for z in zone_ids if (t, z) not in fx.not_offered]
    return {
        "id": fx.region,
        "instanceTypes": [t for t, _ in rows],
        "locations": [z for _, z in rows],
        "locationTypes": [args.get("locationType", "availability-zone-id")] * len(rows),
    }


def _ssm_parameter(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    name = args["name"]
    return {"id": name, "name": name, "arn": f"arn:aws:ssm:{fx.region}::parameter{name}", "type": "String",
            "value": "ami-0123456789abcdef0", "insecureValue": "ami-0123456789abcdef0", "version": 1}


def _ami(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": "ami-0123456789abcdef0", "imageId": "ami-0123456789abcdef0", "architecture": "x86_64",
            "arn": f"arn:aws:ec2:{fx.region}::image/ami-0123456789abcdef0", "name": "preview-ami"}


def _prefix_list(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    """AWS-managed prefix lists (the S3 gateway endpoint's). The CIDRs are documentation
    ranges (RFC 5737): the preview only needs their shape, never AWS's real address space."""
    name = args.get("name") or f"com.amazonaws.{fx.region}.s3"
    return {"id": "pl-0123456789abcdef0", "prefixListId": "pl-0123456789abcdef0", "name": name,
            "cidrBlocks": ["198.51.100.0/24", "203.0.113.0/24"], "filters": None}


class InvokeRefused(Exception):
    """What AWS answers for a lookup that finds nothing."""


def _service_quota(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    code = args["quotaCode"]
    value = fx.vcpu_quotas.get(code, DEFAULT_VCPU_QUOTA)
    return {"id": code, "quotaCode": code, "serviceCode": args.get("serviceCode", "ec2"), "value": value,
            "defaultValue": 5.0, "adjustable": True, "globalQuota": False, "region": fx.region,
            "arn": f"arn:aws:servicequotas:{fx.region}:{fx.account_id}:ec2/{code}"}


def _addon_version(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    name = args["addonName"]
    if name not in fx.addon_versions and name not in EKS_ADDONS:
        raise InvokeRefused(f"no matching EKS Add-On version found for {name}")
    version = fx.addon_versions.get(name) or EKS_ADDONS[name].version
    return {"id": name, "addonName": name, "kubernetesVersion": args.get("kubernetesVersion"),
            "mostRecent": args.get("mostRecent"), "version": version}


def _endpoint_service(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    name = args["serviceName"]
    if name.removeprefix(f"com.amazonaws.{fx.region}.") in fx.missing_endpoint_services:
        raise InvokeRefused("no matching VPC Endpoint Service found")
    return {"id": name, "serviceName": name, "serviceType": "Interface", "owner": "amazon",
            "availabilityZones": [zone for zone, _ in fx.zones], "acceptanceRequired": False}


def _capacity_block(fx: RegionFixture, args: dict[str, Any]) -> dict[str, Any]:
    ident = args["id"]
    if ident not in fx.capacity_blocks:
        raise InvokeRefused(f"no matching EC2 Capacity Block Reservation found ({ident})")
    return {"id": ident, "reservationType": "capacity-block", **fx.capacity_blocks[ident]}


_HANDLERS = {
    "aws:index/getCallerIdentity:getCallerIdentity": _caller_identity,
    "aws:index/getRegion:getRegion": _region,
    "aws:index/getPartition:getPartition": _partition,
    "aws:index/getAvailabilityZones:getAvailabilityZones": _availability_zones,
    "aws:iam/getRole:getRole": _role,
    "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": _instance_type_offerings,
    "aws:ssm/getParameter:getParameter": _ssm_parameter,
    "aws:ec2/getAmi:getAmi": _ami,
    "aws:ec2/getPrefixList:getPrefixList": _prefix_list,
    "aws:servicequotas/getServiceQuota:getServiceQuota": _service_quota,
    "aws:eks/getAddonVersion:getAddonVersion": _addon_version,
    "aws:ec2/getVpcEndpointService:getVpcEndpointService": _endpoint_service,
    "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation": _capacity_block,
}
