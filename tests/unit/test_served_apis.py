"""The built-in API versions the cluster serves (infra/versions.py SERVED_APIS) exist in
the Kubernetes version's own OpenAPI schemas, kind by kind."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate

from infra.versions import KUBERNETES_VERSION, SERVED_APIS, built_in_api_versions

SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{KUBERNETES_VERSION}.0-local-strict"


def test_every_served_kind_is_in_the_versions_schemas():
    known = set()
    for path in SCHEMAS.glob("*.json"):
        body = json.loads(path.read_text())
        for gvk in body.get("x-kubernetes-group-version-kind", []) if isinstance(body, dict) else []:
            group_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            known.add((group_version, gvk["kind"]))
    listed = {(gv, kind) for gv, kinds in SERVED_APIS.items() for kind in kinds}
    assert listed - known == set()


def test_only_ga_versions_are_served_by_default():
    # Beta APIs introduced since 1.24 are off unless a cluster enables them, and the old
    # betas were removed: apiregistration.k8s.io/v1beta1, for one, since 1.22.
    assert all("beta" not in gv and "alpha" not in gv for gv in SERVED_APIS)
    apis = built_in_api_versions()
    assert "apiregistration.k8s.io/v1" in apis and "apps/v1/Deployment" in apis
    assert "apiregistration.k8s.io/v1beta1" not in apis
