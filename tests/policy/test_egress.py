"""no-open-internet-egress: in a restricted environment, private subnets reach the internet
only through the egress firewall. Each trick that should be refused, and the look-alikes
that should pass."""

from __future__ import annotations

import pytest
from platform_policies.egress import no_open_internet_egress

from tests.policy.harness import check

RT = "aws:ec2/routeTable:RouteTable"
ROUTE = "aws:ec2/route:Route"
RESTRICTED = {"restricted": True}


def table(tier: str | None, **route) -> dict:
    tags = {"Name": "t", **({"mlplat.io/tier": tier} if tier is not None else {})}
    return {"vpcId": "vpc-1", "tags": tags, "routes": [{"cidrBlock": "0.0.0.0/0", **route}]}


@pytest.mark.parametrize("props", [
    table("private", vpcEndpointId="vpce-0firewall"),      # through the firewall's endpoint
    table("firewall", natGatewayId="nat-1"),               # the firewall subnet on to the NAT gateway
    table("public", gatewayId="igw-1"),                    # the NAT gateway's subnet to the internet gateway
    {"vpcId": "vpc-1", "tags": {"mlplat.io/tier": "private"}, "routes": []},  # egress none
    {"vpcId": "vpc-1", "tags": {"mlplat.io/tier": "private"},
     "routes": [{"cidrBlock": "10.1.0.0/16", "transitGatewayId": "tgw-1"}]},  # not a default route
], ids=["private-firewall", "firewall-nat", "public-igw", "no-route", "not-default"])
def test_the_look_alikes_pass(props):
    assert check(no_open_internet_egress, RT, props, config=RESTRICTED) == []


@pytest.mark.parametrize("props, says", [
    (table("private", natGatewayId="nat-1"), "routes[0] sends 0.0.0.0/0 to natGatewayId from a private route table"),
    (table("private", gatewayId="igw-1"), "sends 0.0.0.0/0 to gatewayId from a private route table"),
    (table(None, natGatewayId="nat-1"), "from a route table without a mlplat.io/tier tag"),
    (table("public", natGatewayId="nat-1"), "from a public route table"),
    (table("firewall", gatewayId="igw-1"), "from a firewall route table"),
    (table("private", vpcEndpointId="vpce-1", natGatewayId="nat-1"), "to natGatewayId, vpcEndpointId"),
    (table("private", transitGatewayId="tgw-1"), "to transitGatewayId"),
    (table("private", networkInterfaceId="eni-1"), "to networkInterfaceId"),  # a proxy instance the pack cannot judge
    ({"tags": {"mlplat.io/tier": "private"}, "routes": [{"ipv6CidrBlock": "::/0", "egressOnlyGatewayId": "eigw-1"}]},
     "sends ::/0 to egressOnlyGatewayId"),
], ids=["private-nat", "private-igw", "untagged-nat", "public-nat", "firewall-igw", "endpoint-and-nat",
        "transit", "eni", "ipv6"])
def test_the_tricks_are_refused(props, says):
    [message] = check(no_open_internet_egress, RT, props, config=RESTRICTED, name="rt")
    assert message.startswith(f"{RT} 'rt': ") and says in message


def test_a_separate_default_route_is_refused_its_tables_tier_unknown():
    [message] = check(no_open_internet_egress, ROUTE, {"routeTableId": "rtb-1", "destinationCidrBlock": "0.0.0.0/0",
                                                        "natGatewayId": "nat-1"}, config=RESTRICTED, name="r")
    assert "from a separate route" in message
    assert check(no_open_internet_egress, ROUTE, {"routeTableId": "rtb-1", "destinationCidrBlock": "0.0.0.0/0",
                                                  "vpcEndpointId": "vpce-1"}, config=RESTRICTED) != []
    assert check(no_open_internet_egress, ROUTE, {"routeTableId": "rtb-1", "destinationCidrBlock": "10.0.0.0/8",
                                                  "natGatewayId": "nat-1"}, config=RESTRICTED) == []


def test_an_environment_that_is_not_restricted_may_keep_nat():
    assert check(no_open_internet_egress, RT, table("private", natGatewayId="nat-1")) == []
