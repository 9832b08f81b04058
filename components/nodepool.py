"""`GpuNodePool`: an EKS managed node group on its own launch template. GPU pools get the
NVIDIA AMI, every EFA interface the type has, a cluster placement group and local NVMe
as RAID0; CPU pools (system add-ons, the smb stack) are the same component without
those parts."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.specs import nodepool as spec
from infra import catalog


@dataclass(frozen=True)
class GpuNodePoolArgs:
    prefix: str  # e.g. "mlplat-prod": the node group is "<prefix>-<pool>"
    pool: str
    role: str  # system | cpu | gpu | inference
    instance_type: str  # a catalog entry
    min_size: int
    max_size: int
    desired_size: int
    cluster_name: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    subnet_ids: tuple[pulumi.Input[str], ...]  # one subnet when the pool is pinned to a zone
    security_group_ids: tuple[pulumi.Input[str], ...]  # cluster and node security groups
    volumes_key_arn: pulumi.Input[str]  # root volume CMK
    root_volume_gib: int
    efa: bool = False
    efa_security_group_id: pulumi.Input[str] | None = None
    placement_group: bool = False  # a cluster placement group (subnets already pinned to its zone)
    capacity_reservation_id: str | None = None
    capacity_block: bool = False
    instance_tags: dict[str, str] = field(default_factory=dict)  # instances, volumes, interfaces


class GpuNodePool(pulumi.ComponentResource):
    launch_template: aws.ec2.LaunchTemplate
    node_group: aws.eks.NodeGroup
    placement_group: aws.ec2.PlacementGroup | None
    labels: dict[str, str]
    taints: list[dict[str, str]]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:nodepool:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        instance = catalog.lookup(args.instance_type)
        if args.efa and args.efa_security_group_id is None:
            raise ValueError(f"node pool {args.pool}: EFA needs the EFA security group")
        full_name = f"{args.prefix}-{args.pool}"

        self.placement_group = None
        if args.placement_group:
            self.placement_group = aws.ec2.PlacementGroup(
                name, name=full_name, strategy="cluster", tags={"Name": full_name}, opts=child
            )

        security_groups = list(args.security_group_ids)
        if args.efa:
            interfaces = [
                aws.ec2.LaunchTemplateNetworkInterfaceArgs(**nic)
                for nic in spec.efa_interfaces(instance, [*security_groups, args.efa_security_group_id])
            ]
        else:
            interfaces = None
        user_data = spec.nodeadm_user_data(instance, efa=args.efa)

        self.launch_template = aws.ec2.LaunchTemplate(
            name,
            name=full_name,
            description=f"{full_name}: {instance.name}" + (f", {instance.efa_interfaces} EFA" if args.efa else ""),
            update_default_version=True,
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=spec.ROOT_DEVICE,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=args.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        kms_key_id=args.volumes_key_arn,
                        delete_on_termination="true",
                    ),
                )
            ],
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=spec.IMDS_HOP_LIMIT,
                instance_metadata_tags="disabled",
            ),
            # With network interfaces in the template, security groups go on the
            # interfaces; EKS then adds none of its own, so the cluster group is listed.
            network_interfaces=interfaces,
            vpc_security_group_ids=None if interfaces else security_groups,
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=self.placement_group.name)
            if self.placement_group
            else None,
            capacity_reservation_specification=aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=args.capacity_reservation_id
                )
            )
            if args.capacity_reservation_id
            else None,
            instance_market_options=aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
            if args.capacity_block
            else None,
            user_data=base64.b64encode(user_data.encode()).decode() if user_data else None,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(
                    resource_type=kind, tags={**args.instance_tags, "Name": full_name, "mlplat.io/pool": args.pool}
                )
                for kind in ("instance", "volume", "network-interface")
            ],
            opts=child,
        )

        self.labels = spec.node_labels(args.pool, args.role, instance, args.efa)
        self.taints = spec.node_taints(instance)
        self.node_group = aws.eks.NodeGroup(
            name,
            cluster_name=args.cluster_name,
            node_group_name=full_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=list(args.subnet_ids),
            instance_types=[instance.name],
            ami_type=spec.ami_type(instance),
            capacity_type="CAPACITY_BLOCK" if args.capacity_block else "ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=args.min_size, max_size=args.max_size, desired_size=args.desired_size
            ),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.launch_template.id, version=self.launch_template.latest_version.apply(str)
            ),
            labels=self.labels,
            taints=[aws.eks.NodeGroupTaintArgs(**taint) for taint in self.taints],
            tags={"Name": full_name},
            # The cluster autoscaler owns the desired size once the pool exists. Nodes
            # wait for what the component was told to wait for (the CNI add-on).
            opts=pulumi.ResourceOptions(
                parent=self, ignore_changes=["scalingConfig.desiredSize"], depends_on=opts.depends_on if opts else None
            ),
        )
        self.register_outputs(
            {
                "nodeGroup": self.node_group.node_group_name,
                "launchTemplateId": self.launch_template.id,
                "efaInterfaces": instance.efa_interfaces if args.efa else 0,
                "labels": self.labels,
            }
        )
