"""Address plan and endpoint list of the platform VPC."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

# Interface endpoints a private cluster needs so that nodes and pods reach AWS APIs
# without leaving the VPC: image pulls (ECR API and registry), credentials (STS, and the
# EKS Auth API behind Pod Identity), node bootstrap (EC2, EKS), logs and metrics, load
# balancers and autoscaling for controllers, KMS for envelope encryption, SSM for shell
# access without SSH, Secrets Manager for the tracking server's credentials. S3 (image
# layers, datasets) is the separate gateway endpoint.
INTERFACE_ENDPOINT_SERVICES: tuple[str, ...] = (
    "ecr.api",
    "ecr.dkr",
    "sts",
    "ec2",
    "eks",
    "eks-auth",
    "logs",
    "monitoring",
    "elasticloadbalancing",
    "autoscaling",
    "kms",
    "ssm",
    "secretsmanager",
    "ssmmessages",
    "ec2messages",
)


def endpoint_service_name(region: str, service: str) -> str:
    return f"com.amazonaws.{region}.{service}"


@dataclass(frozen=True)
class ZoneSubnets:
    zone_id: str
    private_cidr: str  # nodes and pods (the VPC CNI gives every pod a VPC address)
    public_cidr: str  # NAT gateway only
    firewall_cidr: str  # the egress firewall's endpoint (egress mode allow-list)


def subnet_plan(vpc_cidr: str, zone_ids: tuple[str, ...]) -> list[ZoneSubnets]:
    """Split the VPC into a large private subnet per zone and a small public one.

    The VPC is cut into quarters: one quarter per zone (up to three) for private
    subnets, because pods take VPC addresses and a p5 node alone can hold hundreds;
    the last quarter is cut into sixteen pieces: the first three for the public subnets
    that hold the NAT gateways, the next three for the egress firewall's subnets. The plan
    depends only on the CIDR and the zone order, so adding a zone at the end never
    renumbers an existing subnet.
    """
    if not 1 <= len(zone_ids) <= 3:
        raise ValueError(f"between one and three zones are supported, got {len(zone_ids)}")
    network = ipaddress.ip_network(vpc_cidr)
    quarters = list(network.subnets(prefixlen_diff=2))
    public = list(quarters[3].subnets(prefixlen_diff=4))
    return [
        ZoneSubnets(zone_id, str(quarters[i]), str(public[i]), str(public[4 + i]))
        for i, zone_id in enumerate(zone_ids)
    ]


# --- Egress through an allow-list (AWS Network Firewall) ---------------------------------

# Strict order: the rule group's passes first, then the policy's default drops whatever
# they did not pass, any protocol (with the default order, traffic no rule names passes).
STRICT_ORDER = "STRICT_ORDER"
DEFAULT_DROP = ("aws:drop_established", "aws:alert_established")


def allow_list_rules(domains: tuple[str, ...]) -> dict:
    """The stateful rule group's domain list (its `rulesSourceList`, as the provider's
    argument names it): pass TLS (by SNI) and HTTP (by Host) to the domains, nothing else."""
    return {"generated_rules_type": "ALLOWLIST", "target_types": ["TLS_SNI", "HTTP_HOST"], "targets": list(domains)}


def rule_group_capacity(domains: tuple[str, ...]) -> int:
    """Network Firewall's capacity for a domain list: one unit per domain and target type
    (AWS: "Setting rule group capacity"), with room to grow; fixed at creation."""
    return max(100, 2 * len(domains) * 2)
