"""Encryption in transit and exposure to the internet."""

from __future__ import annotations

from platform_policies.exposure import (
    eks_endpoint_private,
    no_public_ips_on_nodes,
    no_world_open_ingress,
    no_world_open_ports,
)
from platform_policies.transit import elasticache_encrypted_in_transit, load_balancer_listeners_tls, policy_minimum

from tests.policy.cases import INGRESS, LB, SG, ingress
from tests.policy.harness import NOT_APPLICABLE, check, check_stack, stack_resource

LISTENER = "aws:lb/listener:Listener"


def test_policy_minimum_versions():
    assert policy_minimum("ELBSecurityPolicy-TLS13-1-2-2021-06") == (1, 2)
    assert policy_minimum("ELBSecurityPolicy-TLS13-1-3-2021-06") == (1, 3)
    assert policy_minimum("ELBSecurityPolicy-TLS-1-2-Ext-2018-06") == (1, 2)
    assert policy_minimum("ELBSecurityPolicy-FS-1-1-2019-08") == (1, 1)
    assert policy_minimum("ELBSecurityPolicy-TLS13-1-0-2021-06") == (1, 0)
    assert policy_minimum("ELBSecurityPolicy-2016-08") is None


def test_listeners():
    https = {"protocol": "HTTPS", "sslPolicy": "ELBSecurityPolicy-TLS13-1-2-2021-06"}
    assert check(load_balancer_listeners_tls, LISTENER, https) == []
    [message] = check(load_balancer_listeners_tls, LISTENER, {"protocol": "HTTPS"}, name="api")
    assert message.startswith("aws:lb/listener:Listener 'api': no sslPolicy, so AWS applies ELBSecurityPolicy-2016-08")
    [message] = check(load_balancer_listeners_tls, LISTENER, {"protocol": "TLS",
                                                              "sslPolicy": "ELBSecurityPolicy-TLS13-1-1-2021-06"})
    assert "accepts TLS 1.1; the minimum is TLS 1.2" in message
    assert check(load_balancer_listeners_tls, LISTENER, {"protocol": "TCP", "port": 443})
    redirect = {"protocol": "HTTP", "port": 80, "defaultActions": [
        {"type": "redirect", "redirect": {"protocol": "HTTPS", "port": "443", "statusCode": "HTTP_301"}}]}
    assert check(load_balancer_listeners_tls, LISTENER, redirect) == []
    forward = {"protocol": "HTTP", "defaultActions": [{"type": "forward", "targetGroupArn": "arn"}]}
    assert check(load_balancer_listeners_tls, LISTENER, forward)
    strict = {"requireTls13Policy": True}
    assert check(load_balancer_listeners_tls, LISTENER,
                 {"protocol": "HTTPS", "sslPolicy": "ELBSecurityPolicy-TLS-1-2-2017-01"}, config=strict)
    assert check(load_balancer_listeners_tls, "aws:elb/loadBalancer:LoadBalancer",
                 {"listeners": [{"lbProtocol": "https", "lbPort": 443}]})


def test_cache_transit():
    group = "aws:elasticache/replicationGroup:ReplicationGroup"
    [message] = check(elasticache_encrypted_in_transit, group, {"transitEncryptionEnabled": True,
                                                                 "transitEncryptionMode": "preferred"})
    assert "still accepts plaintext" in message
    assert check(elasticache_encrypted_in_transit, "aws:elasticache/serverlessCache:ServerlessCache", {}) == []
    assert check(elasticache_encrypted_in_transit, "aws:elasticache/cluster:Cluster",
                 {"replicationGroupId": "g"}) == NOT_APPLICABLE


def test_world_open_ports_are_refused_on_the_group_or_rule_itself():
    [message] = check(no_world_open_ports, SG, {"ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0,
                                                            "ipv6CidrBlocks": ["::/0"]}]}, name="legacy")
    assert message == ("aws:ec2/securityGroup:SecurityGroup 'legacy': ingress[0] allows all ports from ::/0; only "
                       "TCP 443 to a load balancer's security group may be open to the internet")
    assert check(no_world_open_ports, INGRESS, ingress(22, "10.0.0.0/16")) == []
    assert check(no_world_open_ports, INGRESS, ingress(443)) == []  # the stack rule's to judge
    assert check(no_world_open_ports, "aws:ec2/securityGroupRule:SecurityGroupRule",
                 {"type": "egress", "protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}) == []


def test_443_open_to_a_group_no_load_balancer_uses_is_refused_across_the_stack():
    rule = stack_resource("aws:ec2/securityGroupRule:SecurityGroupRule",
                          {"type": "ingress", "protocol": "tcp", "fromPort": 443, "toPort": 443,
                           "cidrBlocks": ["0.0.0.0/0"]}, "https-nodes")
    [(message, urn)] = check_stack(no_world_open_ingress, [rule])
    assert urn == rule.urn and "to a security group no load balancer uses" in message


def test_443_to_a_load_balancer_is_the_exception():
    lb_group = stack_resource(SG, {}, "alb")
    lb = stack_resource(LB, {}, "alb")
    lb.property_dependencies["securityGroups"] = [lb_group]
    https = stack_resource(INGRESS, ingress(443), "https")
    https.property_dependencies["securityGroupId"] = [lb_group]
    http = stack_resource(INGRESS, ingress(80), "http")
    http.property_dependencies["securityGroupId"] = [lb_group]
    assert check_stack(no_world_open_ingress, [lb_group, lb, https, http]) == []
    # Port 80 on the load balancer's group is the resource rule's, refused on its own.
    assert check(no_world_open_ports, INGRESS, ingress(80), name="http")


def test_eks_endpoint():
    cluster = "aws:eks/cluster:Cluster"
    [message] = check(eks_endpoint_private, cluster, {"vpcConfig": {"endpointPrivateAccess": True}})
    assert "open to 0.0.0.0/0 (the default)" in message
    limited = {"vpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": True,
                             "publicAccessCidrs": ["203.0.113.0/24"]}}
    assert check(eks_endpoint_private, cluster, limited) == []
    assert len(check(eks_endpoint_private, cluster, {"vpcConfig": {"endpointPublicAccess": False}})) == 1


def test_public_ips():
    assert check(no_public_ips_on_nodes, "aws:ec2/subnet:Subnet", {"mapPublicIpOnLaunch": True})
    assert check(no_public_ips_on_nodes, "aws:ec2/subnet:Subnet", {"cidrBlock": "10.0.0.0/20"}) == []
    assert check(no_public_ips_on_nodes, "aws:ec2/defaultSubnet:DefaultSubnet", {})
    assert check(no_public_ips_on_nodes, "aws:ec2/instance:Instance", {"associatePublicIpAddress": True})
    [message] = check(no_public_ips_on_nodes, "aws:eks/nodeGroup:NodeGroup", {"remoteAccess": {"ec2SshKey": "k"}})
    assert "opens SSH (22) to 0.0.0.0/0" in message
