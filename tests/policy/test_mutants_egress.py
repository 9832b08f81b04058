"""no-open-internet-egress: what its message names, where `make mutate` (bench/mutate.py)
found it unchecked. A reviewer reads the message to find the route: it must say which."""

from __future__ import annotations

from platform_policies.egress import no_open_internet_egress

from tests.policy.harness import check

ROUTE = "aws:ec2/route:Route"


def test_a_separate_route_is_named_as_the_route_itself():
    [message] = check(no_open_internet_egress, ROUTE, {"routeTableId": "rtb-1", "destinationCidrBlock": "0.0.0.0/0",
                                                        "natGatewayId": "nat-1"}, config={"restricted": True},
                      name="to-nat")
    assert message.startswith("aws:ec2/route:Route 'to-nat': route sends 0.0.0.0/0 to natGatewayId from a separate "
                              "route; ")
    # and what the environment allows instead
    assert message.endswith("; in a restricted environment private subnets reach the internet only through the "
                            "egress firewall's endpoint")


def test_a_separate_ipv6_default_route_is_refused_naming_it():
    [message] = check(no_open_internet_egress, ROUTE, {"routeTableId": "rtb-1", "destinationIpv6CidrBlock": "::/0",
                                                        "gatewayId": "igw-1"}, config={"restricted": True}, name="v6")
    assert "route sends ::/0 to gatewayId from a separate route" in message


def test_a_default_route_to_no_target_says_so():
    [message] = check(no_open_internet_egress, "aws:ec2/routeTable:RouteTable",
                      {"vpcId": "vpc-1", "tags": {"mlplat.io/tier": "private"}, "routes": [{"cidrBlock": "0.0.0.0/0"}]},
                      config={"restricted": True})
    assert "routes[0] sends 0.0.0.0/0 to no target from a private route table" in message
