"""What the platform sets on chart objects that no chart value reaches.

Some charts render containers whose resources no value controls (the NVIDIA device plugin
chart's config-manager init and sidecar containers, for one). A container without limits
can starve its node's daemons, so every chart object passes through
`with_default_resources` (a Pulumi transform on each Chart, applied by the engine to the
objects the provider registers, and by the offline preview to the objects it renders):
a container that sets no limits gets `DEFAULT_RESOURCES`. Containers that set any limit
keep theirs untouched. Pure data in, pure data out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from components.addons.values import SMALL

DEFAULT_RESOURCES = SMALL
CONTAINER_LISTS = ("initContainers", "containers")


def _pod_specs(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        if isinstance(value.get("containers"), list):
            return [value]
        for child in value.values():
            found += _pod_specs(child)
    elif isinstance(value, list):
        for child in value:
            found += _pod_specs(child)
    return found


def _missing_limits(spec: Any) -> bool:
    return any(isinstance(c, dict) and not (c.get("resources") or {}).get("limits")
               for pod in _pod_specs(spec) for group in CONTAINER_LISTS for c in pod.get(group) or [])


def with_default_resources(obj: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The object with limits on every container, and the containers that got the
    defaults (empty: nothing changed). CRDs describe pods but hold none: left alone."""
    if obj.get("kind") == "CustomResourceDefinition" or not _missing_limits(obj.get("spec")):
        return dict(obj), []
    out = copy.deepcopy(dict(obj))
    filled = []
    for spec in _pod_specs(out.get("spec")):
        for group in CONTAINER_LISTS:
            for container in spec.get(group) or []:
                if isinstance(container, dict) and not (container.get("resources") or {}).get("limits"):
                    container["resources"] = copy.deepcopy(DEFAULT_RESOURCES)
                    filled.append(str(container.get("name")))
    return out, filled
