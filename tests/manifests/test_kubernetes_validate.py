"""Every Kubernetes object a stack renders passes `kubernetes-validate --strict` for the
cluster's Kubernetes version; the custom resources it has no schema for are listed below
with the reason, and get the checks that can be made without one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.preview.report import write_manifests
from infra.versions import KUBERNETES_VERSION
from tests.conftest import STACKS, preview

REPO = Path(__file__).resolve().parents[2]
VALIDATE = [str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", "-k", f"{KUBERNETES_VERSION}.0"]

# kubernetes-validate ships the schemas of Kubernetes' own APIs only. These kinds come from
# CRDs that the add-on charts install; their schemas live in those charts, not here.
NO_SCHEMA = {
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): "Kueue CRD (installed by the kueue chart)",
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): "Kueue CRD (installed by the kueue chart)",
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): "Kueue CRD (installed by the kueue chart)",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "Prometheus Operator CRD (installed by kube-prometheus-stack)",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "Prometheus Operator CRD (installed by kube-prometheus-stack)",
    ("monitoring.coreos.com/v1", "PodMonitor"): "Prometheus Operator CRD (installed by kube-prometheus-stack)",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "JobSet CRD (installed by the jobset chart)",
}
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ResourceFlavor", "ClusterQueue",
                  "ClusterRole", "ClusterRoleBinding"}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def rendered(stack: str, directory: Path) -> dict[Path, dict]:
    write_manifests(preview(stack), directory)
    files = sorted(directory.glob("*.yaml"))
    return {path: yaml.safe_load(path.read_text()) for path in files}


def validate(paths: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([*VALIDATE, *map(str, paths)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_is_schema_valid(stack, tmp_path):
    objects = rendered(stack, tmp_path)
    assert objects, f"{stack}: no Kubernetes objects rendered"
    with_schema = [p for p, body in objects.items() if (body["apiVersion"], body["kind"]) not in NO_SCHEMA]
    done = validate(with_schema)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("INFO") and " passed " in line}
    assert passed == {str(p) for p in with_schema}, done.stdout + done.stderr


@pytest.mark.parametrize("stack", STACKS)
def test_objects_without_schema_are_only_the_listed_crds(stack, tmp_path):
    objects = rendered(stack, tmp_path)
    custom = [p for p, body in objects.items() if (body["apiVersion"], body["kind"]) in NO_SCHEMA]
    # The list stays honest: the validator really has no schema for these kinds.
    if custom:
        done = validate(custom)
        assert done.stdout.count("Couldn't find schema") == len(custom), done.stdout
    for path in custom:
        body = objects[path]
        assert set(body) == {"apiVersion", "kind", "metadata", "spec"}, path
        assert DNS_SUBDOMAIN.match(body["metadata"]["name"]), path
        assert ("namespace" in body["metadata"]) == (body["kind"] not in CLUSTER_SCOPED), path
        assert isinstance(body["spec"], dict), path


def test_prod_renders_tenancy_and_scheduling_through_the_cli(tmp_path):
    out = tmp_path / "manifests"
    done = subprocess.run([sys.executable, "-m", "infra.cli", "preview", "--stack", "prod", "--manifests", str(out),
                           "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    kinds: dict[str, set[str]] = {}
    for path in out.glob("*.yaml"):
        body = yaml.safe_load(path.read_text())
        kinds.setdefault(body["kind"], set()).add(body["metadata"].get("namespace") or body["metadata"]["name"])
    tenants = {"research", "applied", "serving"}
    for kind in ("ResourceQuota", "LimitRange", "NetworkPolicy", "Role", "RoleBinding", "LocalQueue",
                 "PersistentVolumeClaim"):
        assert tenants <= kinds.get(kind, set()), kind
    assert tenants | {"monitoring", "kueue-system", "jobset-system", "nvidia-device-plugin"} <= kinds["Namespace"]
    assert kinds["ClusterQueue"] == tenants
    assert kinds["ResourceFlavor"] == {"default", "p5.48xlarge", "g6e.2xlarge"}
    assert kinds["PrometheusRule"] == {"monitoring"}
    releases = {p.stem for p in (out / "helm").glob("*.yaml")}
    assert releases == {"nvidia-device-plugin", "aws-efa-k8s-device-plugin", "dcgm-exporter",
                        "kube-prometheus-stack", "kueue", "jobset", "aws-fsx-csi-driver", "prometheus-adapter"}
