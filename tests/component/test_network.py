"""`Network` under mocks: what the engine receives for subnets, endpoints, security
groups and flow logs."""

from __future__ import annotations

import pytest

from components.network import Network, NetworkArgs
from components.specs.network import INTERFACE_ENDPOINT_SERVICES
from tests.component.recorder import opts, record

ZONES = ("mec1-az1", "mec1-az2", "mec1-az3")
LOGS_KEY = "arn:aws:kms:me-central-1:111122223333:key/logs"


def build(single_nat: bool = False):
    def program(provider):
        Network("network", NetworkArgs(prefix="mlplat-test", region="me-central-1", vpc_cidr="10.0.0.0/16",
                                       zone_ids=ZONES, account_id="111122223333", logs_key_arn=LOGS_KEY, log_retention_days=365,
                                       single_nat_gateway=single_nat, cluster_name="mlplat-test"),
                opts=opts(provider))

    return record(program)


@pytest.fixture(scope="module")
def net():
    return build()


def test_children_are_parented_and_on_the_provider(net):
    component = net.one("mlplat:network:Network")
    [provider] = net.of_type("pulumi:providers:aws")
    custom = [r for r in net.registrations if r.custom and not r.is_provider]
    assert custom and all(r.parent == component.urn for r in custom)
    assert all(r.provider_urn == provider.urn for r in custom)


def test_vpc_has_dns(net):
    vpc = net.one("aws:ec2/vpc:Vpc").inputs()
    assert vpc["cidrBlock"] == "10.0.0.0/16" and vpc["enableDnsSupport"] and vpc["enableDnsHostnames"]


def test_private_subnets_by_zone_id(net):
    private = [r.inputs() for r in net.of_type("aws:ec2/subnet:Subnet") if "private" in r.name]
    assert sorted(s["availabilityZoneId"] for s in private) == list(ZONES)
    for subnet in net.of_type("aws:ec2/subnet:Subnet"):
        inputs = subnet.inputs()
        assert inputs["mapPublicIpOnLaunch"] is False and "availabilityZone" not in inputs
    assert all(s["tags"]["kubernetes.io/role/internal-elb"] == "1" for s in private)


def test_private_routes_go_through_a_nat_gateway_per_zone(net):
    assert len(net.of_type("aws:ec2/natGateway:NatGateway")) == 3
    private_tables = [r for r in net.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    assert len(private_tables) == 3
    for table in private_tables:
        [route] = table.inputs()["routes"]
        assert route["cidrBlock"] == "0.0.0.0/0" and route["natGatewayId"].startswith("nat-")


def test_single_nat_gateway_option():
    assert len(build(single_nat=True).of_type("aws:ec2/natGateway:NatGateway")) == 1


def test_s3_gateway_endpoint_on_private_route_tables(net):
    s3 = net.one("aws:ec2/vpcEndpoint:VpcEndpoint", "network-s3")
    assert s3.inputs()["vpcEndpointType"] == "Gateway"
    assert s3.inputs()["serviceName"] == "com.amazonaws.me-central-1.s3"
    private_tables = {r.urn for r in net.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name}
    assert set(s3.property_dependencies["routeTableIds"]) == private_tables


def test_interface_endpoints_private_and_in_region(net):
    interface = [r for r in net.of_type("aws:ec2/vpcEndpoint:VpcEndpoint") if r.inputs()["vpcEndpointType"] == "Interface"]
    assert sorted(r.inputs()["serviceName"] for r in interface) == sorted(
        f"com.amazonaws.me-central-1.{s}" for s in INTERFACE_ENDPOINT_SERVICES
    )
    private_subnets = {r.urn for r in net.of_type("aws:ec2/subnet:Subnet") if "private" in r.name}
    for endpoint in interface:
        assert endpoint.inputs()["privateDnsEnabled"] is True
        assert set(endpoint.property_dependencies["subnetIds"]) == private_subnets


def test_efa_security_group_allows_all_to_and_from_itself(net):
    efa = net.one("aws:ec2/securityGroup:SecurityGroup", "network-efa")
    rules = [r for t in ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
                         "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
             for r in net.of_type(t) if r.property_dependencies.get("securityGroupId") == [efa.urn]]
    assert sorted(r.type.rsplit(":", 1)[-1] for r in rules) == ["SecurityGroupEgressRule", "SecurityGroupIngressRule"]
    for rule in rules:
        assert rule.inputs()["ipProtocol"] == "-1"
        assert rule.property_dependencies["referencedSecurityGroupId"] == [efa.urn]
        assert "cidrIpv4" not in rule.inputs()


def test_node_security_group_egress_is_vpc_and_https(net):
    nodes = net.one("aws:ec2/securityGroup:SecurityGroup", "network-nodes")
    egress = [r.inputs() for r in net.of_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
              if r.property_dependencies.get("securityGroupId") == [nodes.urn]]
    assert {(e["ipProtocol"], e.get("fromPort"), e["cidrIpv4"]) for e in egress} == {
        ("-1", None, "10.0.0.0/16"), ("tcp", 443, "0.0.0.0/0")
    }


def test_flow_logs_to_encrypted_log_group(net):
    group = net.one("aws:cloudwatch/logGroup:LogGroup")
    assert group.inputs()["kmsKeyId"] == LOGS_KEY and group.inputs()["retentionInDays"] == 365
    assert group.retain_on_delete
    flow = net.one("aws:ec2/flowLog:FlowLog")
    assert flow.inputs()["trafficType"] == "ALL" and flow.inputs()["logDestinationType"] == "cloud-watch-logs"
    assert flow.property_dependencies["logDestination"] == [group.urn]
    role = net.by_urn(flow.property_dependencies["iamRoleArn"][0])
    assert "vpc-flow-logs.amazonaws.com" in role.inputs()["assumeRolePolicy"]
