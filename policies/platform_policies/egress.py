"""Egress: in a restricted environment, no private subnet reaches the internet except
through the egress firewall's allow-list (issue 35, finding 13).

A route table's tier is its `mlplat.io/tier` tag. A default route (0.0.0.0/0, ::/0) may
go to the internet gateway only from a public table (where the NAT gateway lives), to a
NAT gateway only from a firewall table (where the firewall's endpoints live, behind the
allow-list), and from a private table only to a VPC endpoint (the firewall's endpoint).
Any other default route, in a table of another or no tier or as a separate Route
resource, is refused: its table's tier cannot be read from the route alone.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import Settings, aws_types, get, items, resource_rule
from .controls import NETWORK_SECURITY

ROUTE_TABLES = aws_types("ec2/routeTable:RouteTable", "ec2/defaultRouteTable:DefaultRouteTable")
ROUTES = aws_types("ec2/route:Route")
DEFAULTS = ("0.0.0.0/0", "::/0")
TIER_TAG = "mlplat.io/tier"
# Targets a default route may name, by the table's tier.
ALLOWED = {"public": ("gatewayId",), "firewall": ("natGatewayId",), "private": ("vpcEndpointId",)}
TARGETS = ("gatewayId", "natGatewayId", "vpcEndpointId", "egressOnlyGatewayId", "transitGatewayId",
           "networkInterfaceId", "instanceId", "vpcPeeringConnectionId", "carrierGatewayId", "localGatewayId",
           "coreNetworkArn")


def _default_routes(props: Any, resource_type: str) -> list[tuple[str, str, list[str]]]:
    """(path, destination, targets named) of each default route a table or route declares."""
    entries = [("route", props)] if resource_type in ROUTES else [
        (f"routes[{i}]", route) for i, route in enumerate(items(get(props, "routes")))]
    found = []
    for path, route in entries:
        destination = get(route, "cidrBlock") or get(route, "destinationCidrBlock") or \
            get(route, "ipv6CidrBlock") or get(route, "destinationIpv6CidrBlock")
        if isinstance(destination, str) and destination.strip() in DEFAULTS:
            found.append((path, destination.strip(), [t for t in TARGETS if get(route, t)]))
    return found


def _check_egress(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    if not settings["restricted"]:
        return
    tier = None if args.resource_type in ROUTES else str((get(args.props, "tags") or {}).get(TIER_TAG) or "")
    where = f"{args.resource_type} '{args.name}'"
    for path, destination, targets in _default_routes(args.props, args.resource_type):
        allowed = ALLOWED.get(tier or "", ())
        if not targets or any(t not in allowed for t in targets):
            named = ", ".join(targets) or "no target"
            table = f"a {tier} route table" if tier else ("a separate route" if tier is None else
                                                           f"a route table without a {TIER_TAG} tag")
            report(f"{where}: {path} sends {destination} to {named} from {table}; in a restricted environment "
                   "private subnets reach the internet only through the egress firewall's endpoint")


no_open_internet_egress = resource_rule(
    name="no-open-internet-egress",
    description="In a restricted environment, no route sends private subnets' traffic to the internet except "
    "through the egress firewall's allow-list: default routes go to the internet gateway only from public tables, "
    "to a NAT gateway only from firewall tables, and from private tables only to a VPC (firewall) endpoint.",
    applies=ROUTE_TABLES | ROUTES,
    check=_check_egress,
    framework=NETWORK_SECURITY,
    remediation="Set mlplat:network.egress.mode to allow-list (with allowedDomains) or none; declare default "
    "routes inline in route tables tagged mlplat.io/tier.",
    tags=["exposure", "residency"],
    config={"restricted": {"type": "boolean", "default": False,
                           "description": "The environment is restricted: its private subnets may reach the "
                                          "internet only through the egress firewall."}},
)
