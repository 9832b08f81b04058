"""Recorded acceptance fixtures (tests/fixtures/acceptance) turned into something to check.

A node fixture becomes a directory standing in for the node's root file system: its files,
its directory entries, and each recorded command as a small program that prints what was
recorded, and refuses any other arguments, so the checks run the real collector through
testinfra against it. A cluster fixture becomes a `ClusterState`. Both kinds may name a
`base` fixture and override parts of it; a null value removes an entry.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from infra.acceptance.cluster import ClusterState

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "acceptance"

_NODE_SECTIONS = ("files", "directories", "programs")
_CLUSTER_LISTS = ("nodes", "daemonSets", "pods", "jobs", "services")


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def node_fixture(name: str) -> dict[str, Any]:
    """A node fixture with its base merged in: sections merge key by key."""
    doc = _load(FIXTURES / "nodes" / name)
    base = doc.pop("base", None)
    if base is None:
        return doc
    merged = node_fixture(base)
    for section in _NODE_SECTIONS:
        entries = {**merged.get(section, {}), **doc.get(section, {})}
        merged[section] = {k: v for k, v in entries.items() if v is not None}
    for key, value in doc.items():
        if key not in _NODE_SECTIONS:
            merged[key] = value
    return merged


def _program(path: str, spec: Mapping[str, Any]) -> str:
    args = str(spec.get("args", ""))
    return (
        "#!/bin/sh\n"
        f"# recorded output of: {path} {args}\n"
        f'if [ "$*" != {shlex.quote(args)} ]; then\n'
        f'  printf "%s\\n" "{path}: no recording for arguments: $*" >&2\n'
        "  exit 64\n"
        "fi\n"
        f"printf '%s' {shlex.quote(str(spec.get('stdout', '')))}\n"
        f"printf '%s' {shlex.quote(str(spec.get('stderr', '')))} >&2\n"
        f"exit {int(spec.get('exit', 0))}\n"
    )


def build_node_root(fixture: Mapping[str, Any], root: Path) -> Path:
    """Write `fixture` out as a node root file system under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for path, text in fixture.get("files", {}).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for path, entries in fixture.get("directories", {}).items():
        directory = root / path.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for entry in entries:
            (directory / entry).touch()  # character devices on a real node
    for path, spec in fixture.get("programs", {}).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_program(path, spec))
        target.chmod(0o755)
    return root


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta["name"]


def log_text(value: str | list[Any]) -> str:
    """A log as the pod printed it: a list is one line per item, objects as JSON."""
    if isinstance(value, str):
        return value
    return "".join((json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v)) + "\n" for v in value)


def cluster_document(name: str) -> dict[str, Any]:
    """A cluster fixture with its base merged in: objects replace the base's objects of the
    same namespace and name (or are added); `remove` lists "kind/namespace/name" to drop."""
    doc = _load(FIXTURES / "clusters" / name)
    doc["logs"] = {pod: log_text(text) for pod, text in (doc.get("logs") or {}).items()}
    base = doc.pop("base", None)
    if base is None:
        return doc
    merged = cluster_document(base)
    removed = set(doc.pop("remove", []) or [])
    for kind in _CLUSTER_LISTS:
        objects = {_key(o): o for o in (merged.get(kind) or {}).get("items", [])}
        for obj in (doc.get(kind) or {}).get("items", []):
            objects[_key(obj)] = obj
        kept = [o for k, o in objects.items() if f"{kind}/{k[0]}/{k[1]}" not in removed]
        merged[kind] = {"items": kept}
    merged["logs"] = {**(merged.get("logs") or {}), **(doc.get("logs") or {})}
    for key, value in doc.items():
        if key not in (*_CLUSTER_LISTS, "logs"):
            merged[key] = value  # e.g. inferenceSmoke: replaced whole
    return merged


def cluster_state(name: str) -> ClusterState:
    return ClusterState.from_document(cluster_document(name))


def scenario(name: str) -> dict[str, Any]:
    """A scenario of scenarios.yaml with its base merged in."""
    scenarios = _load(FIXTURES / "scenarios.yaml")
    doc = dict(scenarios[name])
    base = doc.pop("base", None)
    if base is None:
        return doc
    merged = scenario(base)
    for key in ("pools", "nodes"):
        merged[key] = {**merged.get(key, {}), **doc.pop(key, {})}
    return {**merged, **doc}


def build_replay(name: str, directory: Path) -> str:
    """Write scenario `name` as a replay directory (see infra/acceptance/replay.py);
    returns its stack."""
    spec = scenario(name)
    document = cluster_document(spec["cluster"])
    directory.mkdir(parents=True, exist_ok=True)
    smoke = document.pop("inferenceSmoke", None)
    kept = {k: v for k, v in document.items() if not k.startswith("x-")}
    (directory / "cluster.yaml").write_text(yaml.safe_dump(kept, sort_keys=False))
    if smoke is not None:
        (directory / "inference-smoke.json").write_text(json.dumps(smoke))
    for node in document["nodes"]["items"]:
        node_name = node["metadata"]["name"]
        pool = node["metadata"]["labels"]["mlplat.io/pool"]
        fixture = spec.get("nodes", {}).get(node_name) or spec["pools"][pool]
        build_node_root(node_fixture(fixture), directory / "nodes" / node_name)
    return spec["stack"]
