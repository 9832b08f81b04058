"""`Network`: the platform VPC. Private subnets by zone id; their way out, as the
environment's egress mode says: a NAT gateway (nat), AWS Network Firewall passing only an
allow-list in front of the NAT gateway (allow-list), or none at all (none); VPC endpoints
so AWS API traffic stays private and in-region, flow logs to an encrypted log group,
and the security groups nodes and EFA interfaces use."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.specs import iam as iam_spec
from components.specs import network as spec

ALL_TRAFFIC = "-1"
HTTPS = 443


@dataclass(frozen=True)
class NetworkArgs:
    prefix: str  # e.g. "mlplat-prod": names and Name tags start with it
    region: str
    vpc_cidr: str
    zone_ids: tuple[str, ...]
    account_id: str
    logs_key_arn: pulumi.Input[str]  # CMK of the flow-log group
    log_retention_days: int
    single_nat_gateway: bool = False
    cluster_name: str = ""  # subnet discovery tags for load balancers
    egress: str = "nat"  # nat, allow-list or none (infra/config.py EgressConfig)
    allowed_domains: tuple[str, ...] = ()  # allow-list: what the firewall passes
    firewall_key_arn: pulumi.Input[str] | None = None  # allow-list: CMK of the firewall's configuration


class Network(pulumi.ComponentResource):
    vpc: aws.ec2.Vpc
    subnets: dict[str, aws.ec2.Subnet]  # private, by zone id
    public_subnets: dict[str, aws.ec2.Subnet]
    node_security_group: aws.ec2.SecurityGroup
    efa_security_group: aws.ec2.SecurityGroup
    endpoint_security_group: aws.ec2.SecurityGroup
    s3_endpoint: aws.ec2.VpcEndpoint
    interface_endpoints: dict[str, aws.ec2.VpcEndpoint]
    flow_log_group: aws.cloudwatch.LogGroup

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:network:Network", name, None, opts)
        self._name = name
        self._args = args
        child = pulumi.ResourceOptions(parent=self)
        plan = spec.subnet_plan(args.vpc_cidr, args.zone_ids)

        self.vpc = aws.ec2.Vpc(
            name,
            cidr_block=args.vpc_cidr,
            # Both on: private endpoints resolve their service names inside the VPC, and
            # the private API endpoint of the cluster needs them.
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags={"Name": args.prefix},
            opts=child,
        )
        vpc_id = self.vpc.id
        self.subnets, self.public_subnets = {}, {}
        self.nat_gateways: dict[str, aws.ec2.NatGateway] = {}
        self.firewall: aws.networkfirewall.Firewall | None = None
        private_route_tables: list[aws.ec2.RouteTable] = []
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"} if args.cluster_name else {}
        # With egress none there is no way out at all: no internet gateway, no NAT.
        gateway = None if args.egress == "none" else aws.ec2.InternetGateway(
            name, vpc_id=vpc_id, tags={"Name": args.prefix}, opts=child)
        firewall_subnets: dict[str, aws.ec2.Subnet] = {}
        firewall_endpoints: dict[str, pulumi.Output[str]] = {}
        if args.egress == "allow-list":
            firewall_subnets = {zone.zone_id: aws.ec2.Subnet(
                f"{name}-firewall-{zone.zone_id}", vpc_id=vpc_id, cidr_block=zone.firewall_cidr,
                availability_zone_id=zone.zone_id, map_public_ip_on_launch=False,
                tags={"Name": f"{args.prefix}-firewall-{zone.zone_id}", "mlplat.io/tier": "firewall"}, opts=child)
                for zone in plan}
            firewall_endpoints = self._firewall(firewall_subnets)
        shared_public_routes = None
        if args.egress == "nat":
            shared_public_routes = aws.ec2.RouteTable(
                f"{name}-public",
                vpc_id=vpc_id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id)],
                tags={"Name": f"{args.prefix}-public", "mlplat.io/tier": "public"},
                opts=child,
            )

        for zone in plan:
            nat = None
            if gateway is not None:
                nat = self._public_zone(zone, gateway, shared_public_routes, firewall_endpoints.get(zone.zone_id))
            private = aws.ec2.Subnet(
                f"{name}-private-{zone.zone_id}",
                vpc_id=vpc_id,
                cidr_block=zone.private_cidr,
                availability_zone_id=zone.zone_id,
                map_public_ip_on_launch=False,
                tags={
                    "Name": f"{args.prefix}-private-{zone.zone_id}",
                    "mlplat.io/tier": "private",
                    "kubernetes.io/role/internal-elb": "1",
                    **cluster_tag,
                },
                opts=child,
            )
            # The way out: the NAT gateway (nat), the zone's firewall endpoint (allow-list),
            # or none (none: the VPC endpoints and the S3 gateway are all there is).
            out = []
            if args.egress == "nat":
                out = [aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)]
            elif args.egress == "allow-list":
                out = [aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0",
                                                   vpc_endpoint_id=firewall_endpoints[zone.zone_id])]
            routes = aws.ec2.RouteTable(
                f"{name}-private-{zone.zone_id}",
                vpc_id=vpc_id,
                routes=out,
                tags={"Name": f"{args.prefix}-private-{zone.zone_id}", "mlplat.io/tier": "private",
                      "mlplat.io/egress": args.egress},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone.zone_id}", subnet_id=private.id, route_table_id=routes.id, opts=child
            )
            self.subnets[zone.zone_id] = private
            private_route_tables.append(routes)

        if firewall_subnets:
            self._firewall_routes(firewall_subnets)
        self._endpoints(private_route_tables)
        self._security_groups()
        self._flow_logs()
        self.register_outputs(
            {
                "vpcId": self.vpc.id,
                "privateSubnetIds": {z: s.id for z, s in self.subnets.items()},
                "nodeSecurityGroupId": self.node_security_group.id,
                "efaSecurityGroupId": self.efa_security_group.id,
                "s3EndpointId": self.s3_endpoint.id,
            }
        )

    def _public_zone(self, zone: spec.ZoneSubnets, gateway: aws.ec2.InternetGateway,
                     shared_routes: aws.ec2.RouteTable | None, firewall_endpoint: pulumi.Output[str] | None,
                     ) -> aws.ec2.NatGateway:
        """The zone's public subnet and its NAT gateway (or the VPC's one). Behind a
        firewall, the public subnet routes the return traffic to the private subnet back
        through the zone's firewall endpoint, so the firewall sees both directions."""
        name, args = self._name, self._args
        child = pulumi.ResourceOptions(parent=self)
        public = aws.ec2.Subnet(
            f"{name}-public-{zone.zone_id}",
            vpc_id=self.vpc.id,
            cidr_block=zone.public_cidr,
            availability_zone_id=zone.zone_id,
            # Only the NAT gateway lives here, with its own Elastic IP: nothing gets
            # a public address by launching into it.
            map_public_ip_on_launch=False,
            tags={"Name": f"{args.prefix}-public-{zone.zone_id}", "mlplat.io/tier": "public"},
            opts=child,
        )
        routes = shared_routes
        if routes is None:
            routes = aws.ec2.RouteTable(
                f"{name}-public-{zone.zone_id}", vpc_id=self.vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id),
                        aws.ec2.RouteTableRouteArgs(cidr_block=zone.private_cidr, vpc_endpoint_id=firewall_endpoint)],
                tags={"Name": f"{args.prefix}-public-{zone.zone_id}", "mlplat.io/tier": "public"}, opts=child)
        aws.ec2.RouteTableAssociation(
            f"{name}-public-{zone.zone_id}", subnet_id=public.id, route_table_id=routes.id, opts=child
        )
        self.public_subnets[zone.zone_id] = public
        if not args.single_nat_gateway or not self.nat_gateways:
            address = aws.ec2.Eip(
                f"{name}-nat-{zone.zone_id}", domain="vpc", tags={"Name": f"{args.prefix}-nat-{zone.zone_id}"},
                opts=child,
            )
            self.nat_gateways[zone.zone_id] = aws.ec2.NatGateway(
                f"{name}-{zone.zone_id}",
                allocation_id=address.id,
                subnet_id=public.id,
                tags={"Name": f"{args.prefix}-{zone.zone_id}"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
            )
        return self.nat_gateways.get(zone.zone_id) or next(iter(self.nat_gateways.values()))

    def _firewall(self, subnets: dict[str, aws.ec2.Subnet]) -> dict[str, pulumi.Output[str]]:
        """AWS Network Firewall across the zones' firewall subnets, passing TLS and HTTP to
        the allow-list only; its alerts and flows logged. The firewall subnets route to
        their zone's NAT gateway (set once the gateways exist: _firewall_routes). Returns
        each zone's firewall endpoint id."""
        name, args = self._name, self._args
        child = pulumi.ResourceOptions(parent=self)
        encryption = {"type": "CUSTOMER_KMS", "key_id": args.firewall_key_arn}
        rules = aws.networkfirewall.RuleGroup(
            f"{name}-egress-allow-list", name=f"{args.prefix}-egress-allow-list", type="STATEFUL",
            capacity=spec.rule_group_capacity(args.allowed_domains),
            description="TLS (SNI) and HTTP (Host) to the allow-list only",
            rule_group=aws.networkfirewall.RuleGroupRuleGroupArgs(
                rules_source=aws.networkfirewall.RuleGroupRuleGroupRulesSourceArgs(
                    rules_source_list=aws.networkfirewall.RuleGroupRuleGroupRulesSourceRulesSourceListArgs(
                        **spec.allow_list_rules(args.allowed_domains))),
                stateful_rule_options=aws.networkfirewall.RuleGroupRuleGroupStatefulRuleOptionsArgs(
                    rule_order=spec.STRICT_ORDER)),
            encryption_configuration=aws.networkfirewall.RuleGroupEncryptionConfigurationArgs(**encryption),
            opts=child)
        policy = aws.networkfirewall.FirewallPolicy(
            f"{name}-egress", name=f"{args.prefix}-egress",
            firewall_policy=aws.networkfirewall.FirewallPolicyFirewallPolicyArgs(
                stateless_default_actions=["aws:forward_to_sfe"],
                stateless_fragment_default_actions=["aws:forward_to_sfe"],
                stateful_default_actions=list(spec.DEFAULT_DROP),
                stateful_engine_options=aws.networkfirewall.FirewallPolicyFirewallPolicyStatefulEngineOptionsArgs(
                    rule_order=spec.STRICT_ORDER),
                stateful_rule_group_references=[
                    aws.networkfirewall.FirewallPolicyFirewallPolicyStatefulRuleGroupReferenceArgs(
                        resource_arn=rules.arn, priority=1)]),
            encryption_configuration=aws.networkfirewall.FirewallPolicyEncryptionConfigurationArgs(**encryption),
            opts=child)
        self.firewall = aws.networkfirewall.Firewall(
            f"{name}-egress", name=f"{args.prefix}-egress", vpc_id=self.vpc.id,
            firewall_policy_arn=policy.arn, delete_protection=True,
            subnet_mappings=[aws.networkfirewall.FirewallSubnetMappingArgs(subnet_id=s.id) for s in subnets.values()],
            encryption_configuration=aws.networkfirewall.FirewallEncryptionConfigurationArgs(**encryption),
            tags={"Name": f"{args.prefix}-egress"}, opts=child)
        logs = aws.cloudwatch.LogGroup(
            f"{name}-egress-firewall", name=f"/aws/network-firewall/{args.prefix}-egress",
            kms_key_id=args.logs_key_arn, retention_in_days=args.log_retention_days,
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True))
        aws.networkfirewall.LoggingConfiguration(
            f"{name}-egress", firewall_arn=self.firewall.arn,
            logging_configuration=aws.networkfirewall.LoggingConfigurationLoggingConfigurationArgs(
                log_destination_configs=[
                    aws.networkfirewall.LoggingConfigurationLoggingConfigurationLogDestinationConfigArgs(
                        log_destination={"logGroup": logs.name}, log_destination_type="CloudWatchLogs",
                        log_type=kind) for kind in ("ALERT", "FLOW")]),
            opts=child)
        return {zone: pulumi.Output.all(self.firewall.firewall_statuses, subnet.id).apply(
                    lambda v: _endpoint_of(v[0], v[1])) for zone, subnet in subnets.items()}

    def _firewall_routes(self, subnets: dict[str, aws.ec2.Subnet]) -> None:
        """Each firewall subnet's way out: its zone's NAT gateway."""
        name = self._name
        child = pulumi.ResourceOptions(parent=self)
        for zone, subnet in subnets.items():
            nat = self.nat_gateways.get(zone) or next(iter(self.nat_gateways.values()))
            routes = aws.ec2.RouteTable(
                f"{name}-firewall-{zone}", vpc_id=self.vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={"Name": f"{self._args.prefix}-firewall-{zone}", "mlplat.io/tier": "firewall"}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-firewall-{zone}", subnet_id=subnet.id, route_table_id=routes.id,
                                          opts=child)

    def _endpoints(self, private_route_tables: list[aws.ec2.RouteTable]) -> None:
        name, args = self._name, self._args
        child = pulumi.ResourceOptions(parent=self)
        self.s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=self.vpc.id,
            service_name=spec.endpoint_service_name(args.region, "s3"),
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_route_tables],
            tags={"Name": f"{args.prefix}-s3"},
            opts=child,
        )
        self.endpoint_security_group = aws.ec2.SecurityGroup(
            f"{name}-endpoints",
            vpc_id=self.vpc.id,
            description="VPC interface endpoints: HTTPS from inside the VPC",
            tags={"Name": f"{args.prefix}-endpoints"},
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-endpoints-https",
            security_group_id=self.endpoint_security_group.id,
            description="HTTPS from the VPC",
            ip_protocol="tcp",
            from_port=HTTPS,
            to_port=HTTPS,
            cidr_ipv4=args.vpc_cidr,
            opts=child,
        )
        self.interface_endpoints = {}
        for service in spec.INTERFACE_ENDPOINT_SERVICES:
            self.interface_endpoints[service] = aws.ec2.VpcEndpoint(
                f"{name}-{service.replace('.', '-')}",
                vpc_id=self.vpc.id,
                service_name=spec.endpoint_service_name(args.region, service),
                vpc_endpoint_type="Interface",
                subnet_ids=[s.id for s in self.subnets.values()],
                security_group_ids=[self.endpoint_security_group.id],
                private_dns_enabled=True,
                tags={"Name": f"{args.prefix}-{service}"},
                opts=child,
            )

    def _security_groups(self) -> None:
        name, args = self._name, self._args
        child = pulumi.ResourceOptions(parent=self)
        self.node_security_group = aws.ec2.SecurityGroup(
            f"{name}-nodes",
            vpc_id=self.vpc.id,
            description="Every cluster node: node-to-node traffic, egress to the VPC and HTTPS out",
            tags={"Name": f"{args.prefix}-nodes"},
            opts=child,
        )
        node_sg = self.node_security_group.id
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-nodes-from-nodes", security_group_id=node_sg, description="node to node",
            ip_protocol=ALL_TRAFFIC, referenced_security_group_id=node_sg, opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-nodes-to-vpc", security_group_id=node_sg, description="anything inside the VPC",
            ip_protocol=ALL_TRAFFIC, cidr_ipv4=args.vpc_cidr, opts=child,
        )
        if args.egress == "none":
            # No way out: HTTPS only to S3 through its gateway endpoint (its prefix list).
            s3 = aws.ec2.get_prefix_list_output(name=spec.endpoint_service_name(args.region, "s3"),
                                                opts=pulumi.InvokeOptions(parent=self))
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-nodes-https-s3", security_group_id=node_sg, description="HTTPS to S3 (gateway endpoint)",
                ip_protocol="tcp", from_port=HTTPS, to_port=HTTPS, prefix_list_id=s3.id, opts=child,
            )
        else:
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-nodes-https-out", security_group_id=node_sg,
                description="HTTPS through the NAT gateway" + (" behind the egress firewall's allow-list"
                                                               if args.egress == "allow-list" else ""),
                ip_protocol="tcp", from_port=HTTPS, to_port=HTTPS, cidr_ipv4="0.0.0.0/0", opts=child,
            )

        # EFA's OS-bypass traffic flows only between interfaces in a group that allows all
        # traffic to and from itself; without both rules NCCL falls back to TCP sockets.
        self.efa_security_group = aws.ec2.SecurityGroup(
            f"{name}-efa",
            vpc_id=self.vpc.id,
            description="EFA interfaces: all traffic to and from this group only",
            tags={"Name": f"{args.prefix}-efa"},
            opts=child,
        )
        efa_sg = self.efa_security_group.id
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-efa-in", security_group_id=efa_sg, description="EFA from EFA",
            ip_protocol=ALL_TRAFFIC, referenced_security_group_id=efa_sg, opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-efa-out", security_group_id=efa_sg, description="EFA to EFA",
            ip_protocol=ALL_TRAFFIC, referenced_security_group_id=efa_sg, opts=child,
        )

    def _flow_logs(self) -> None:
        name, args = self._name, self._args
        child = pulumi.ResourceOptions(parent=self)
        self.flow_log_group = aws.cloudwatch.LogGroup(
            f"{name}-flow-logs",
            name=f"/aws/vpc/{args.prefix}/flow-logs",
            kms_key_id=args.logs_key_arn,
            retention_in_days=args.log_retention_days,
            # Network evidence outlives the stack that produced it.
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        role = aws.iam.Role(
            f"{name}-flow-logs",
            name=f"{args.prefix}-flow-logs",
            description="VPC flow logs delivery to CloudWatch Logs",
            assume_role_policy=json.dumps(iam_spec.flow_log_trust_policy(args.account_id, args.region)),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-flow-logs",
            role=role.name,
            policy=self.flow_log_group.arn.apply(
                lambda arn: json.dumps(iam_spec.policy(iam_spec.flow_log_statements(arn)))
            ),
            opts=child,
        )
        aws.ec2.FlowLog(
            f"{name}-flow-logs",
            vpc_id=self.vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=self.flow_log_group.arn,
            iam_role_arn=role.arn,
            max_aggregation_interval=60,
            tags={"Name": f"{args.prefix}-flow-logs"},
            opts=child,
        )


def _endpoint_of(statuses: list, subnet_id: str) -> str:
    """The firewall endpoint (vpce-...) Network Firewall made in this subnet."""
    for status in statuses or []:
        for state in _get(status, "sync_states") or []:
            for attachment in _get(state, "attachments") or []:
                if _get(attachment, "subnet_id") == subnet_id:
                    return _get(attachment, "endpoint_id")
    raise ValueError(f"the egress firewall reports no endpoint in subnet {subnet_id}")


def _get(value, key: str):
    """A field of an output value: a dict (camelCase or snake_case) or an object."""
    if isinstance(value, dict):
        camel = key.split("_")[0] + "".join(w.title() for w in key.split("_")[1:])
        return value.get(key, value.get(camel))
    return getattr(value, key, None)
