"""Recorded cluster state, for running the acceptance suite without a cluster.

A replay directory holds `cluster.yaml` (nodes, daemon sets, pods and jobs as
`kubectl get -o yaml` prints their lists, plus the result pods' logs), optionally
`inference-smoke.json` (a smoke client result), and `nodes/<node name>/`, a copy of the
files and programs the node checks read from that node. CI replays the fixtures in
tests/fixtures/acceptance this way; an operator can replay a capture to show a failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from infra.acceptance.cluster import ClusterState
from infra.acceptance.node import NodeView

CLUSTER_FILE = "cluster.yaml"
SMOKE_FILE = "inference-smoke.json"
NODES_DIR = "nodes"


def read_state(directory: Path) -> ClusterState:
    return ClusterState.from_document(yaml.safe_load((directory / CLUSTER_FILE).read_text()) or {})


def read_smoke(directory: Path) -> dict[str, Any] | None:
    path = directory / SMOKE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def node_view(directory: Path, node: str) -> NodeView | str:
    """The recorded root of `node`, or why there is none."""
    import testinfra

    root = directory / NODES_DIR / node
    if not root.is_dir():
        return f"no recording of this node under {root}"
    return NodeView(testinfra.get_host("local://"), root=str(root.resolve()))
