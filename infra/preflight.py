"""Checks that need the cloud but must fail before anything is created: is each pool's
instance type offered in the zone it must run in?

A p5 pool pinned to a zone without p5 capacity would otherwise sit in CREATING until
the node group times out, tens of minutes later, with a message about the ASG.
"""

from __future__ import annotations

from collections.abc import Iterable

import pulumi
import pulumi_aws as aws

from infra.config import PROJECT, ConfigError, NodePoolConfig, PlatformConfig


def choose_zones(
    index: int, pool: NodePoolConfig, region: str, network_zones: Iterable[str], offered: set[str]
) -> tuple[str, ...]:
    """The zones the pool's nodes go to: its pinned zone, or every network zone that
    offers its type. One clear ConfigError when there is none."""
    network_zones = tuple(network_zones)
    offered_here = [z for z in network_zones if z in offered]
    where = ", ".join(offered_here) or "none of the network's zones"
    pinned = pool.pinned_zone_id
    if pinned is not None:
        if pinned not in offered:
            key = "placementGroupZoneId" if pool.placement_group_zone_id else "zoneId"
            raise ConfigError(
                f"preflight: {PROJECT}:nodePools[{index}].{key}: {pool.instance_type} is not offered in {pinned} "
                f"({region}); offered in: {where}. Pick one of those zones or another instance type"
            )
        return (pinned,)
    if not offered_here:
        raise ConfigError(
            f"preflight: {PROJECT}:nodePools[{index}].instanceType: {pool.instance_type} is not offered in any zone "
            f"of the network ({', '.join(network_zones)}) in {region}; choose another instance type"
        )
    return tuple(offered_here)


def pool_zones(config: PlatformConfig, opts: pulumi.InvokeOptions) -> dict[str, tuple[str, ...]]:
    """Zone ids per pool name, from one offerings lookup for all the stack's types."""
    if not config.node_pools:
        return {}
    types = sorted({pool.instance_type for pool in config.node_pools})
    result = aws.ec2.get_instance_type_offerings(
        filters=[
            aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=types),
            aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="location", values=list(config.zone_ids)),
        ],
        location_type="availability-zone-id",
        opts=opts,
    )
    offered: dict[str, set[str]] = {}
    for instance_type, zone in zip(result.instance_types, result.locations, strict=True):
        offered.setdefault(instance_type, set()).add(zone)
    return {
        pool.name: choose_zones(index, pool, config.region, config.zone_ids, offered.get(pool.instance_type, set()))
        for index, pool in enumerate(config.node_pools)
    }
