"""`mlplat preview --manifests` writes every object a stack applies (every Kubernetes
object is the cluster layer's, so prod's are `prod-cluster`'s): the program's own at
the top, each chart's under charts/<release>/ with the release's chart, version and
values, where a reviewer can read (or validate) each one. Every object of every stack is
validated in-process by the render check (tests/rendered)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml


REPO = Path(__file__).resolve().parents[2]


def test_prod_manifests_through_the_cli(tmp_path):
    out = tmp_path / "manifests"
    done = subprocess.run([sys.executable, "-m", "infra.cli", "preview", "--stack", "prod-cluster", "--manifests", str(out),
                           "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    kinds: dict[str, set[str]] = {}
    for path in out.rglob("*.yaml"):
        if path.name == "release.yaml":
            continue
        body = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        kinds.setdefault(body["kind"], set()).add(body["metadata"].get("namespace") or body["metadata"]["name"])
    tenants = {"research", "applied", "serving"}
    for kind in ("ResourceQuota", "LimitRange", "NetworkPolicy", "Role", "RoleBinding", "LocalQueue",
                 "PersistentVolumeClaim"):
        assert tenants <= kinds.get(kind, set()), kind
    assert tenants | {"monitoring", "kueue-system", "jobset-system", "nvidia-device-plugin"} <= kinds["Namespace"]
    assert kinds["ClusterQueue"] == tenants
    assert kinds["ResourceFlavor"] == {"default", "p5.48xlarge", "g6e.2xlarge"}
    assert "monitoring" in kinds["PrometheusRule"]
    releases = {p.parent.name: yaml.safe_load(p.read_text()) for p in out.glob("charts/*/release.yaml")}
    assert set(releases) == {"nvidia-device-plugin", "aws-efa-k8s-device-plugin", "dcgm-exporter",
                             "kube-prometheus-stack", "kueue", "jobset", "aws-fsx-csi-driver", "prometheus-adapter",
                             "gateway-helm", "argo-rollouts"}
    assert all({"chart", "version", "values", "namespace"} <= set(r) for r in releases.values())
    # The charts' own objects are there, one file each, beside the release.
    assert (out / "charts" / "kueue" / "deployment-kueue-system-kueue-controller-manager.yaml").exists()
    assert len(list((out / "charts" / "kube-prometheus-stack").glob("*.yaml"))) > 60
    crds = list(out.glob("charts/*/customresourcedefinition-*.json"))
    assert {json.loads(p.read_text())["kind"] for p in crds} == {"CustomResourceDefinition"} and len(crds) > 20
    # Secrets keep their keys, each value masked, so the files keep the API's shape.
    secret = yaml.safe_load((out / "charts" / "jobset" / "secret-jobset-system-jobset-webhook-server-cert.yaml")
                            .read_text())
    assert secret["data"] and set(secret["data"].values()) == {"[secret]"}
