"""Checks that need the cloud but must fail before anything is created, each one line:

- each pool's instance type is offered in the zone it must run in;
- the account's On-Demand vCPU quotas hold every pool at maxSize;
- a pool of a type AWS seldom has on demand names a reservation or a Capacity Block (or
  says `onDemand: true`), and a Capacity Block it names holds its type, zone and size;
- the pinned EKS add-on versions are published in the region;
- every VPC endpoint service the network makes exists in the region;
- the deployer and break-glass roles the cluster names exist (`mlplat bootstrap` makes
  them): EKS refuses an access entry for a role that is not there, late in the update;
- every zone the network spreads over is one AWS reports `available` now, and at least
  two are (EKS needs subnets in two zones). Zones are lost: two of me-central-1's three
  went offline in March 2026, and a stack file's list cannot know that.

A p5 pool pinned to a zone without p5 capacity, or beyond the vCPU quota, would otherwise
sit in CREATING until the node group times out, tens of minutes later, with a message
about the ASG. Offline, the preview's fixtures answer (infra/preview/fixtures.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pulumi
import pulumi_aws as aws

from components.specs.network import INTERFACE_ENDPOINT_SERVICES, endpoint_service_name
from infra.catalog import lookup
from infra.config import PROJECT, ConfigError, NodePoolConfig, PlatformConfig
from infra.versions import EKS_ADDONS


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


# --- Quotas: the account's On-Demand vCPU quotas for the pools at their largest --------

# EC2 counts running On-Demand instances (capacity reservations included) in vCPUs, per
# group of families. A Capacity Block's instances are checked against the block instead.
STANDARD_QUOTA = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
ON_DEMAND_VCPU_QUOTAS: dict[str, tuple[str, str]] = {  # for the families of infra/catalog.py
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
}
QUOTA_NAMES = dict((STANDARD_QUOTA, *ON_DEMAND_VCPU_QUOTAS.values()))


def vcpu_quota(instance_type: str) -> tuple[str, str]:
    """(quota code, quota name) of the On-Demand vCPU quota `instance_type` counts against:
    by the letters its family starts with (p5en -> p, c7i -> the standard quota)."""
    letters = re.match(r"[a-z]+", instance_type)
    return ON_DEMAND_VCPU_QUOTAS.get(letters.group(0) if letters else "", STANDARD_QUOTA)


def vcpu_needs(config: PlatformConfig) -> dict[str, tuple[int, list[str]]]:
    """vCPUs per quota code with every pool at maxSize, and which pools need them."""
    needs: dict[str, tuple[int, list[str]]] = {}
    for pool in config.node_pools:
        if pool.capacity_block:
            continue
        code, _ = vcpu_quota(pool.instance_type)
        vcpus = lookup(pool.instance_type).vcpus * pool.max_size
        total, pools = needs.get(code, (0, []))
        needs[code] = (total + vcpus, [*pools, f"{pool.name} {pool.max_size} x {pool.instance_type}"])
    return needs


def check_quotas(config: PlatformConfig, quotas: Mapping[str, float]) -> None:
    """One ConfigError for the first quota this stack's pools alone would exceed at
    maxSize (other stacks' instances in the account are not counted)."""
    for code, (vcpus, pools) in sorted(vcpu_needs(config).items()):
        quota = quotas[code]
        if vcpus > quota:
            raise ConfigError(
                f"preflight: {PROJECT}:nodePools: {', '.join(pools)} need {vcpus} vCPUs of '{QUOTA_NAMES[code]}' "
                f"({code}) but the account's quota in {config.region} is {int(quota)}; request an increase in "
                "Service Quotas or lower maxSize")


# --- Capacity: Capacity Blocks that exist, fit and are live; pools that need one ------
# (An On-Demand Capacity Reservation is not looked up: pulumi-aws has no data source for
# one. EC2 launches outside it when it does not fit.)

BLOCK_STATES = ("active", "scheduled", "payment-pending")


def check_capacity_block(index: int, pool: NodePoolConfig, block: Any, zone_id: str) -> None:
    """The Capacity Block a pool names holds its type, in its zone, for maxSize nodes."""
    where = f"preflight: {PROJECT}:nodePools[{index}].capacityReservationId: {pool.capacity_reservation_id}"
    if block.instance_type != pool.instance_type:
        raise ConfigError(f"{where} is a Capacity Block of {block.instance_type}, not {pool.instance_type}; "
                          "name the block bought for this pool's type")
    if block.availability_zone_id != zone_id:
        raise ConfigError(f"{where} is in {block.availability_zone_id}, not the pool's zone {zone_id}; "
                          f"set zoneId: {block.availability_zone_id}")
    if block.state not in BLOCK_STATES:
        raise ConfigError(f"{where} is {block.state}; buy a new block and name it")
    if block.instance_count < pool.max_size:
        raise ConfigError(f"{where} holds {block.instance_count} instances, fewer than maxSize {pool.max_size}; "
                          f"set maxSize to {block.instance_count} or extend the block")


def check_on_demand_acknowledged(config: PlatformConfig) -> None:
    """Pools of types AWS seldom has on demand in one spine need a reservation, a Capacity
    Block, or `onDemand: true` saying the stack takes its chances; and then they start
    empty. A node group created at minSize > 0 stays CREATING while EC2 has no capacity
    (tens of minutes), and the update waits on it: no first deploy may wait on GPUs."""
    for index, pool in enumerate(config.node_pools):
        instance = lookup(pool.instance_type)
        if not instance.reservation_advised or pool.capacity_reservation_id is not None:
            continue
        if not pool.on_demand:
            raise ConfigError(
                f"preflight: {PROJECT}:nodePools[{index}]: {pool.instance_type} x {pool.max_size} on demand will most "
                "likely fail with InsufficientInstanceCapacity; set capacityReservationId (with capacityBlock: true "
                "for a Capacity Block), or onDemand: true to launch on demand anyway")
        starting = pool.desired_size if pool.desired_size is not None else pool.min_size
        if pool.min_size or starting:
            raise ConfigError(
                f"preflight: {PROJECT}:nodePools[{index}]: {pool.instance_type} on demand starts at {starting} "
                f"node(s), and the deploy would wait while EC2 has none to give; start at minSize: 0 with no "
                "desiredSize and raise them once capacity is there, or name capacityReservationId")


# --- Add-on versions and endpoint services the region must offer ----------------------


ADDON_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:-[a-z]+)*-eksbuild\.(\d+)$")


def addon_release(version: str) -> tuple[int, ...]:
    """`v1.20.4-eksbuild.2` -> (1, 20, 4, 2): comparable across builds."""
    match = ADDON_VERSION.match(version)
    if match is None:
        raise ConfigError(f"preflight: EKS add-on version {version!r} is not of the form v<x.y.z>-eksbuild.<n>; "
                          "fix the pin in infra/versions.py EKS_ADDONS")
    return (*(int(p) for p in match.group(1).split(".")), int(match.group(2)))


def check_addon(name: str, pinned: str, newest: str | None, kubernetes: str, region: str, detail: str = "") -> None:
    """DescribeAddonVersions gives the newest release of an add-on for a Kubernetes
    version in the region; a pin past it (or an add-on not offered) is not there yet."""
    if newest is None or addon_release(pinned) > addon_release(newest):
        # Only the newest release is asked for: a pin below it is taken to be there too.
        offered = f"the newest there is {newest}" if newest else f"it offers none{f': {detail}' if detail else ''}"
        raise ConfigError(
            f"preflight: EKS add-on {name} {pinned} is not published in {region} for Kubernetes {kubernetes} "
            f"({offered}); pin a version the region has in infra/versions.py EKS_ADDONS")


def check_endpoint_service(service: str, region: str, found: bool, detail: str = "") -> None:
    if not found:
        raise ConfigError(
            f"preflight: VPC endpoint service {endpoint_service_name(region, service)} does not exist in {region}"
            f"{f' ({detail})' if detail else ''}; drop it from INTERFACE_ENDPOINT_SERVICES "
            "(components/specs/network.py) or deploy to a region that has it")


# --- Zones AWS says are available now ---------------------------------------------------


def check_zones(config: PlatformConfig, available: Iterable[str]) -> None:
    """Every zone of the network, and every pool's pinned zone, is available; at least two
    are. `available` is AWS's answer (DescribeAvailabilityZones, state available)."""
    available = set(available)
    where = ", ".join(sorted(available)) or "none"
    for index, pool in enumerate(config.node_pools):
        pinned = pool.pinned_zone_id
        if pinned is not None and pinned not in available:
            key = "placementGroupZoneId" if pool.placement_group_zone_id else "zoneId"
            raise ConfigError(
                f"preflight: {PROJECT}:nodePools[{index}].{key}: {pinned} is not available in {config.region} now "
                f"(available: {where}); pin an available zone, or wait for AWS to restore it")
    gone = [zone for zone in config.zone_ids if zone not in available]
    if len(config.zone_ids) - len(gone) < 2:
        raise ConfigError(
            f"preflight: {PROJECT}:network.zoneIds: {config.region} has {len(available)} available zone(s) now "
            f"({where}) of the network's {', '.join(config.zone_ids)}; EKS needs two. Run in-country on the "
            "customer's own cluster until AWS restores a second zone (docs/onprem.md)")
    if gone:
        raise ConfigError(
            f"preflight: {PROJECT}:network.zoneIds: {', '.join(gone)} {'is' if len(gone) == 1 else 'are'} not "
            f"available in {config.region} now (available: {where}); list only available zones")


# --- All of it, before anything is created --------------------------------------------


def preflight(config: PlatformConfig, opts: pulumi.InvokeOptions) -> dict[str, tuple[str, ...]]:
    """Every check above against the region; the zones each pool may use."""
    check_zones(config, aws.get_availability_zones(state="available", opts=opts).zone_ids)
    for key, role in (("deployerRole", config.cluster.deployer_role), ("breakGlassRole", config.cluster.break_glass_role)):
        if role is None or role.startswith("arn:") and role.split(":")[4] != _account(opts):
            continue  # another account's role: not ours to look up
        name = role.rsplit("/", 1)[-1]
        found, reason = region_lookup(lambda name=name: aws.iam.get_role(name=name, opts=opts))
        if found is None:
            raise ConfigError(
                f"preflight: {PROJECT}:cluster.{key}: role {name} does not exist in this account ({reason}); run "
                f"`mlplat bootstrap` (docs/bring-up.md), or name an existing role")
    check_on_demand_acknowledged(config)
    zones = pool_zones(config, opts)
    quotas = {code: aws.servicequotas.get_service_quota(service_code="ec2", quota_code=code, opts=opts).value
              for code in vcpu_needs(config)}
    check_quotas(config, quotas)
    for index, pool in enumerate(config.node_pools):
        if pool.capacity_block:
            block, reason = region_lookup(lambda pool=pool: aws.ec2.get_capacity_block_reservation(
                id=pool.capacity_reservation_id, opts=opts))
            if block is None:
                raise ConfigError(
                    f"preflight: {PROJECT}:nodePools[{index}].capacityReservationId: {pool.capacity_reservation_id} "
                    f"is no Capacity Block of this account in {config.region} ({reason}); name the block's cr- id")
            check_capacity_block(index, pool, block, zones[pool.name][0])
    for addon in EKS_ADDONS.values():
        found, detail = region_lookup(lambda addon=addon: aws.eks.get_addon_version(
            addon_name=addon.name, kubernetes_version=config.cluster.version, most_recent=True, opts=opts))
        check_addon(addon.name, addon.version, found.version if found is not None else None,
                    config.cluster.version, config.region, detail)
    for service in INTERFACE_ENDPOINT_SERVICES:
        found, detail = region_lookup(lambda service=service: aws.ec2.get_vpc_endpoint_service(
            service_name=endpoint_service_name(config.region, service), opts=opts))
        check_endpoint_service(service, config.region, found is not None, detail)
    return zones


def _account(opts: pulumi.InvokeOptions) -> str:
    return aws.get_caller_identity(opts=opts).account_id


# What AWS (through the provider) says when a lookup finds nothing. Anything else (no
# permission, throttling, expired credentials) is not an answer about the region: it is
# raised as it came.
NOT_FOUND = ("no matching", "not found", "notfound", "does not exist", "no versions", "couldn't find", "cannot be found",
             "nosuchentity")


def region_lookup(invoke: Callable[[], Any]) -> tuple[Any | None, str]:
    """(result, "") or, where the lookup found nothing, (None, the provider's reason)."""
    try:
        return invoke(), ""
    except Exception as err:
        reason = _reason(err)
        if not any(marker in reason.lower() for marker in NOT_FOUND):
            raise
        return None, reason


def _reason(err: Exception) -> str:
    """The provider's reason, on one line: its `* ...` line where it lists errors, else
    the text after the engine's `invoke of <token> failed:`."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    listed = [line.removeprefix("* ") for line in lines if line.startswith("* ")]
    line = listed[-1] if listed else (lines[0] if lines else type(err).__name__)
    return line.split(" failed: ", 1)[-1].removesuffix(" ()")[:160]
