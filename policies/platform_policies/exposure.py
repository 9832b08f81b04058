"""Exposure: nothing reachable from the internet except TLS on 443 at a load balancer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import PolicyResource, ReportViolation, ResourceValidationArgs, StackValidationArgs

from .common import UNKNOWN, Settings, aws_types, flag, get, is_world_open, items, resource_rule, stack_rule
from .access import Trust, openings
from .controls import NETWORK_SECURITY, cis_eks, iso
from .s3 import policy_document

SECURITY_GROUPS = aws_types("ec2/securityGroup:SecurityGroup", "ec2/defaultSecurityGroup:DefaultSecurityGroup")
SG_RULES = aws_types("ec2/securityGroupRule:SecurityGroupRule")
INGRESS_RULES = aws_types("vpc/securityGroupIngressRule:SecurityGroupIngressRule")
LOAD_BALANCERS = aws_types("lb/loadBalancer:LoadBalancer", "alb/loadBalancer:LoadBalancer",
                           "elb/loadBalancer:LoadBalancer")

ALL_PROTOCOLS = ("-1", "all")


def _number(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _ports(protocol: Any, low: Any, high: Any) -> str:
    if str(protocol).lower() in ALL_PROTOCOLS:
        return "all ports"
    low, high = _number(low), _number(high)
    return f"{protocol} {low}" if low == high else f"{protocol} {low}-{high}"


def _https_only(protocol: Any, low: Any, high: Any) -> bool:
    return str(protocol).lower() in ("tcp", "6") and _number(low) == 443 and _number(high) == 443


def _open_cidrs(*values: Any) -> list[str]:
    cidrs: list[Any] = []
    for value in values:
        cidrs.extend([value] if isinstance(value, str) else items(value))
    return [c for c in cidrs if is_world_open(c)]


def _target(rule: PolicyResource, groups: dict[str, PolicyResource]) -> PolicyResource | None:
    for dependency in rule.property_dependencies.get("securityGroupId", []):
        if dependency.urn in groups:
            return dependency
    return None


def _ingress(resource_type: str, props: Any) -> list[tuple[str, Any, Any, Any, list[str]]]:
    """(path, protocol, from, to, world-open CIDRs) of each ingress a group or rule opens."""
    found = []
    if resource_type in SECURITY_GROUPS:
        for i, rule in enumerate(items(get(props, "ingress"))):
            found.append((f"ingress[{i}]", get(rule, "protocol"), get(rule, "fromPort"), get(rule, "toPort"),
                          _open_cidrs(get(rule, "cidrBlocks"), get(rule, "ipv6CidrBlocks"))))
    elif resource_type in SG_RULES and get(props, "type") == "ingress":
        found.append(("rule", get(props, "protocol"), get(props, "fromPort"), get(props, "toPort"),
                      _open_cidrs(get(props, "cidrBlocks"), get(props, "ipv6CidrBlocks"))))
    elif resource_type in INGRESS_RULES:
        found.append(("rule", get(props, "ipProtocol"), get(props, "fromPort"), get(props, "toPort"),
                      _open_cidrs(get(props, "cidrIpv4"), get(props, "cidrIpv6"))))
    return [entry for entry in found if entry[4]]


def _check_open_ports(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    """Judged on the group or rule alone, so the engine refuses it before it exists: only
    TCP 443 may be open to the internet, and only where a load balancer uses the group
    (which no-world-open-ingress checks across the stack)."""
    where = f"{args.resource_type} '{args.name}'"
    for path, protocol, low, high, open_to in _ingress(args.resource_type, args.props):
        if not _https_only(protocol, low, high):
            report(f"{where}: {path} allows {_ports(protocol, low, high)} from {', '.join(open_to)}; only TCP 443 "
                   "to a load balancer's security group may be open to the internet")


no_world_open_ports = resource_rule(
    name="no-world-open-ports",
    description="No security-group ingress from 0.0.0.0/0, ::/0 (or any range broader than /8, IPv6 /16) on any "
    "port but TCP 443, judged on the group or rule itself (SSH from the internet is refused before it exists).",
    applies=SECURITY_GROUPS | SG_RULES | INGRESS_RULES,
    check=_check_open_ports,
    framework=NETWORK_SECURITY,
    remediation="Allow ingress from the VPC CIDR, a prefix list or another security group; reach nodes through "
    "SSM Session Manager, not SSH; expose services only through a load balancer listening on 443.",
    tags=["exposure"],
)


def _check_ingress(args: StackValidationArgs, report: ReportViolation, settings: Settings) -> None:
    groups = {r.urn: r for r in args.resources if r.resource_type in SECURITY_GROUPS}
    fronting_lbs = {
        dependency.urn
        for lb in args.resources if lb.resource_type in LOAD_BALANCERS
        for dependency in lb.property_dependencies.get("securityGroups", [])
    }
    for resource in args.resources:
        group = resource if resource.resource_type in SECURITY_GROUPS else _target(resource, groups)
        for path, protocol, low, high, open_to in _ingress(resource.resource_type, resource.props):
            # Other ports are no-world-open-ports' to refuse, on the resource itself.
            if _https_only(protocol, low, high) and (group is None or group.urn not in fronting_lbs):
                report(f"{resource.resource_type} '{resource.name}': {path} allows {_ports(protocol, low, high)} "
                       f"from {', '.join(open_to)} to a security group no load balancer uses; only a load "
                       "balancer's may be open to the internet", resource.urn)


no_world_open_ingress = stack_rule(
    name="no-world-open-ingress",
    description="TCP 443 from the internet only to a security group a load balancer uses (the one way in; it needs "
    "the stack to see the load balancer). Every other port is no-world-open-ports'.",
    scope=SECURITY_GROUPS | SG_RULES | INGRESS_RULES,
    check=_check_ingress,
    framework=NETWORK_SECURITY,
    remediation="Expose services only through a load balancer listening on 443; allow nodes and pods ingress from "
    "the VPC CIDR, a prefix list or another security group.",
    tags=["exposure"],
)


EKS_CLUSTERS = aws_types("eks/cluster:Cluster")


def _check_endpoint(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    where = f"{args.resource_type} '{args.name}'"
    vpc = get(args.props, "vpcConfig")
    private = flag(get(vpc, "endpointPrivateAccess")) if vpc is not None else None
    public = flag(get(vpc, "endpointPublicAccess")) if vpc is not None else None
    if private is not True and private is not UNKNOWN:
        report(f"{where}: vpcConfig.endpointPrivateAccess is not true; nodes would reach the API server over the "
               "internet")
    if public is False or public is UNKNOWN:
        return
    # AWS's default is a public endpoint open to 0.0.0.0/0.
    cidrs = get(vpc, "publicAccessCidrs") if vpc is not None else None
    if cidrs is UNKNOWN:
        return
    listed = [c for c in items(cidrs) if isinstance(c, str)]
    open_to = [c for c in listed if is_world_open(c)] or ([] if listed else ["0.0.0.0/0 (the default)"])
    if open_to:
        report(f"{where}: the public API endpoint is open to {', '.join(open_to)}; set endpointPublicAccess=false "
               "or list only your own CIDRs in publicAccessCidrs")


eks_endpoint_private = resource_rule(
    name="eks-endpoint-private",
    description="The EKS API endpoint is private; a public endpoint is allowed only when limited to CIDRs that "
    "are not world-open.",
    applies=EKS_CLUSTERS,
    check=_check_endpoint,
    framework=cis_eks("5.4.2", "Ensure clusters are created with Private Endpoint Enabled and Public Access "
                      "Disabled"),
    remediation="Set vpc_config endpoint_private_access=True and endpoint_public_access=False (reach the API "
    "from inside the VPC, e.g. through SSM or a VPN).",
    tags=["exposure", "kubernetes"],
)


LAUNCH_TEMPLATES = aws_types("ec2/launchTemplate:LaunchTemplate")
INSTANCES = aws_types("ec2/instance:Instance")
SUBNETS = aws_types("ec2/subnet:Subnet", "ec2/defaultSubnet:DefaultSubnet")
NODE_GROUPS = aws_types("eks/nodeGroup:NodeGroup")


def _check_public_ips(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind, props = args.resource_type, args.props
    where = f"{kind} '{args.name}'"
    if kind in LAUNCH_TEMPLATES:
        interfaces = items(get(props, "networkInterfaces"))
        for i, interface in enumerate(interfaces):
            if flag(get(interface, "associatePublicIpAddress")) is True:
                report(f"{where}: networkInterfaces[{i}].associatePublicIpAddress is \"true\"")
            elif len(interfaces) > 1 and get(interface, "associatePublicIpAddress") is not None:
                # EC2 refuses the launch (terraform-provider-aws #6777, #10157).
                report(f"{where}: networkInterfaces[{i}] sets associatePublicIpAddress with "
                       f"{len(interfaces)} interfaces, which EC2 refuses; leave it out and keep nodes in "
                       "private subnets")
    elif kind in INSTANCES:
        if flag(get(props, "associatePublicIpAddress")) is True:
            report(f"{where}: associatePublicIpAddress is true")
    elif kind in SUBNETS:
        default = kind.endswith("DefaultSubnet")  # AWS maps public IPs in default subnets unless told not to
        mapped = flag(get(props, "mapPublicIpOnLaunch"))
        if mapped is True or (default and mapped is None):
            report(f"{where}: mapPublicIpOnLaunch gives every instance launched here a public IP")
    elif kind in NODE_GROUPS:
        access = get(props, "remoteAccess")
        if access is not None and not items(get(access, "sourceSecurityGroupIds")):
            report(f"{where}: remoteAccess without sourceSecurityGroupIds opens SSH (22) to 0.0.0.0/0")


no_public_ips_on_nodes = resource_rule(
    name="no-public-ips-on-nodes",
    description="Nodes get no public IP: no public-IP network interfaces in launch templates or instances, no "
    "subnets that map public IPs on launch, no node-group SSH open to the internet.",
    applies=LAUNCH_TEMPLATES | INSTANCES | SUBNETS | NODE_GROUPS,
    check=_check_public_ips,
    framework=cis_eks("5.4.3", "Ensure clusters are created with Private Nodes"),
    remediation="Place nodes in private subnets (mapPublicIpOnLaunch=false) and leave associatePublicIpAddress "
    "\"false\"; reach nodes through SSM Session Manager, not SSH.",
    tags=["exposure"],
)


# --- Resource and trust policies open to other accounts -----------------------------------

# Each type that carries a resource policy (or a role's trust policy), and the input holding it.
POLICY_INPUTS = {
    **{t: "policy" for t in aws_types(
        "s3/bucketPolicy:BucketPolicy", "s3/bucket:Bucket", "s3/bucketV2:BucketV2", "kms/key:Key",
        "kms/keyPolicy:KeyPolicy", "sqs/queue:Queue", "sqs/queuePolicy:QueuePolicy", "sns/topic:Topic",
        "sns/topicPolicy:TopicPolicy", "ecr/repositoryPolicy:RepositoryPolicy", "ecr/registryPolicy:RegistryPolicy",
        "secretsmanager/secretPolicy:SecretPolicy", "backup/vaultPolicy:VaultPolicy",
        "efs/fileSystemPolicy:FileSystemPolicy", "cloudwatch/eventBusPolicy:EventBusPolicy")},
    **{t: "accessPolicy" for t in aws_types("cloudwatch/logDestinationPolicy:LogDestinationPolicy")},
    **{t: "policyDocument" for t in aws_types("cloudwatch/logResourcePolicy:LogResourcePolicy")},
    **{t: "assumeRolePolicy" for t in aws_types("iam/role:Role")},
}
EXTERNAL_ACCESS_SCHEMA = {
    "trustedAccounts": {
        "type": "array",
        "items": {"type": "string", "pattern": "^[0-9]{12}$"},
        "default": [],
        "description": "The environment's accounts: principals of these may be granted access. Default: none, so "
        "every account principal counts as outside.",
    },
    "trustedOrganizations": {
        "type": "array",
        "items": {"type": "string", "pattern": "^o-[a-z0-9]{10,32}$"},
        "default": [],
        "description": "Organisations (o-...) whose accounts an aws:PrincipalOrgID condition may admit.",
    },
}


def _check_external_access(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    field = POLICY_INPUTS[args.resource_type]
    raw = get(args.props, field)
    if raw is None:
        args.not_applicable(f"no {field}")
    document = policy_document(raw)  # unknown during a real preview: judged at `pulumi up`
    where = f"{args.resource_type} '{args.name}': {field}"
    if not isinstance(document, Mapping):
        report(f"{where} is not a readable policy document, so who it admits cannot be judged")
        return
    trust = Trust(frozenset(map(str, settings["trustedAccounts"] or [])),
                  frozenset(map(str, settings["trustedOrganizations"] or [])))
    opened, refused = openings(document, trust)
    for line in refused:
        report(f"{where}: {line}")
    for opening in opened:
        report(f"{where}: {opening.statement} lets {opening.who} in ({opening.actions}); confine it to the "
               f"environment's accounts {sorted(trust.accounts)} with aws:PrincipalAccount, aws:PrincipalOrgID, "
               "kms:CallerAccount or, for a service, aws:SourceAccount")


no_external_access = resource_rule(
    name="no-external-access",
    description="No resource policy (S3 bucket, KMS key, SQS queue, SNS topic, ECR repository and registry, Secrets "
    "Manager secret, Backup vault, EFS file system, EventBridge bus, CloudWatch Logs destination and resource "
    "policy) and no role trust policy lets a principal outside the environment's accounts in: each Allow is "
    "evaluated for an outsider's request, and only conditions that confine it to the accounts or organisation "
    "count (as IAM Access Analyzer judges external access). Allow with NotPrincipal is refused.",
    applies=frozenset(POLICY_INPUTS),
    check=_check_external_access,
    config=EXTERNAL_ACCESS_SCHEMA,
    framework=iso("A.5.15", "Access control: access to information is limited to the accounts and organisation "
                  "the environment trusts."),
    remediation="Name the environment's own principals (arn:aws:iam::<account>:...), or keep Principal \"*\" only "
    "with a condition confining it: aws:PrincipalAccount or aws:PrincipalOrgID, kms:CallerAccount with "
    "kms:ViaService for a key used through a service, aws:SourceAccount/aws:SourceArn for a service principal. "
    "Never Allow with NotPrincipal.",
    tags=["exposure"],
)
