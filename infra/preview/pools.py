"""The node pools of a preview in one line each, read back from what the engine received:
instance type, sizes, EFA interfaces per node, placement group and zone."""

from __future__ import annotations

from collections import Counter

from infra.preview.mocks import Registration

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"


def node_pool_lines(registrations: list[Registration]) -> list[str]:
    by_urn = {r.urn: r for r in registrations}
    placement_groups = {
        r.inputs().get("name"): r.inputs().get("strategy") for r in registrations if r.type == PLACEMENT_GROUP
    }
    lines = []
    for group in (r for r in registrations if r.type == NODE_GROUP):
        inputs = group.inputs()
        scaling = inputs.get("scalingConfig") or {}
        template = next(
            (by_urn[u].inputs() for u in group.property_dependencies.get("launchTemplate", []) if u in by_urn), {}
        )
        zones = sorted(
            by_urn[u].inputs().get("availabilityZoneId", "?")
            for u in group.property_dependencies.get("subnetIds", [])
            if u in by_urn
        )
        kinds = Counter(nic.get("interfaceType") for nic in template.get("networkInterfaces") or [])
        efa = kinds.get("efa", 0) + kinds.get("efa-only", 0)
        parts = [
            f"{inputs.get('nodeGroupName')}: {', '.join(inputs.get('instanceTypes') or [])}",
            f"{scaling.get('minSize')}-{scaling.get('maxSize')} nodes (desired {scaling.get('desiredSize')})",
            inputs.get("amiType", ""),
            f"{efa} EFA interfaces per node ({kinds.get('efa', 0)} efa + {kinds.get('efa-only', 0)} efa-only)"
            if efa
            else "no EFA",
        ]
        group_name = (template.get("placement") or {}).get("groupName")
        if group_name:
            parts.append(f"placement group {group_name} ({placement_groups.get(group_name, '?')})")
        parts.append(f"zones {', '.join(zones)}")
        lines.append("  " + ", ".join(p for p in parts if p))
    return ["Node pools:", *lines] if lines else []
