"""The Lustre scratch file system as Kubernetes volumes: a static PersistentVolume per
tenant namespace, bound to a claim named `lustre-scratch` there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FSX_DRIVER = "fsx.csi.aws.com"
SCRATCH_CLAIM = "lustre-scratch"


@dataclass(frozen=True)
class LustreVolume:
    """The scratch file system as the storage component exposes it. The first three may be
    Pulumi outputs; the specs only place them."""

    file_system_id: Any
    dns_name: Any
    mount_name: Any
    capacity_gib: int


def scratch_volume(namespace: str, lustre: LustreVolume) -> dict[str, Any]:
    """A static PersistentVolume bound to one namespace's claim. Retained: deleting the
    claim never touches the file system, which the storage component owns."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"lustre-scratch-{namespace}", "labels": {"mlplat.io/tenant": namespace}},
        "spec": {
            "capacity": {"storage": f"{lustre.capacity_gib}Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": namespace, "name": SCRATCH_CLAIM},
            "mountOptions": ["flock"],
            "csi": {
                "driver": FSX_DRIVER,
                "volumeHandle": lustre.file_system_id,
                "volumeAttributes": {"dnsname": lustre.dns_name, "mountname": lustre.mount_name},
            },
        },
    }


def scratch_claim(namespace: str, lustre: LustreVolume) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": SCRATCH_CLAIM, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": f"lustre-scratch-{namespace}",
            "resources": {"requests": {"storage": f"{lustre.capacity_gib}Gi"}},
        },
    }
