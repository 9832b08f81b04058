"""Values keys a chart never reads, found by perturbation.

A key the chart's templates never read is a setting that silently does nothing: a typo,
a key from another chart version, or a value the chart hard-codes. For each leaf of the
values we pass, `unread` changes that one leaf, renders again, and compares the output
with the unchanged render; a leaf whose change alters nothing is unread. A leaf set to
None asks Helm to delete a chart default: it is unread when the chart has no such default.

Changing a leaf: a bool is negated, a number incremented, a string extended, and a list
gets one more element (a copy of its last). A render that fails after a change counts as
read: the chart looked at the key.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from infra.render import RenderError, ReleaseSpec, templates

Path_ = tuple[str, ...]

# Values keys the render check accepts as unread, (chart, dotted path) -> why. Empty: every
# key the platform passes changes what some chart renders.
ACCEPTED_UNREAD: dict[tuple[str, str], str] = {}


def leaves(values: Mapping[str, Any], prefix: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """(path, value) of every leaf: anything but a non-empty mapping."""
    for key, value in values.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            yield from leaves(value, path)
        else:
            yield path, value


def perturbed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, copy.deepcopy(value[-1]) if value else "mlplat-probe"]
    if isinstance(value, Mapping):  # an empty map
        return {"mlplat-probe": "x"}
    return value


def _with(values: Mapping[str, Any], path: Path_, new: Any) -> dict[str, Any]:
    out = copy.deepcopy(dict(values))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return out


def _chart_default(defaults: Mapping[str, Any], path: Path_) -> bool:
    node: Any = defaults
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


def unread(spec: ReleaseSpec, chart_defaults: Mapping[str, Any], skip: frozenset[Path_] = frozenset(),
           api_versions: tuple[str, ...] = ()) -> list[str]:
    """Dotted paths of the values leaves that change nothing in the render. Paths in
    `skip` (already proven read elsewhere) are not rendered again."""
    base = templates(spec, api_versions=api_versions)
    found = []
    for path, value in leaves(spec.values):
        if path in skip:
            continue
        if value is None:
            if not _chart_default(chart_defaults, path):
                found.append(".".join(path))
            continue
        try:
            changed = templates(replace(spec, values=_with(spec.values, path, perturbed(value))),
                                api_versions=api_versions)
        except RenderError:
            continue  # the chart read the key, and refused the changed value
        if changed == base:
            found.append(".".join(path))
    return found
