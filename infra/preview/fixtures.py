"""In-region answers to the invokes the program makes, for the offline preview.

Every invoke the program makes must be answered here: an unanswered invoke would return
`None` fields silently under mocks, so `answer` raises for any token it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACCOUNT_ID = "111122223333"  # AWS's documentation account: never a real one

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


def _availability_zones(fx: RegionFixture, _args: dict[str, Any]) -> dict[str, Any]:
    return {
        "names": [name for name, _ in fx.zones],
        "zoneIds": [zone_id for _, zone_id in fx.zones],
        "groupNames": [fx.region] * len(fx.zones),
        "id": fx.region,
        "state": "available",
    }


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


_HANDLERS = {
    "aws:index/getCallerIdentity:getCallerIdentity": _caller_identity,
    "aws:index/getRegion:getRegion": _region,
    "aws:index/getPartition:getPartition": _partition,
    "aws:index/getAvailabilityZones:getAvailabilityZones": _availability_zones,
    "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": _instance_type_offerings,
    "aws:ssm/getParameter:getParameter": _ssm_parameter,
    "aws:ec2/getAmi:getAmi": _ami,
    "aws:ec2/getPrefixList:getPrefixList": _prefix_list,
}
