"""The Lustre scratch file system as Kubernetes volumes: a static PersistentVolume per
tenant namespace, bound to a claim named `lustre-scratch` there, of the tenant's own
directory `/<tenant>` and nothing above it; and the one-off Job that gives each tenant its
directory before any workload writes there.

The root of a new Lustre file system belongs to root (mode 0755), and the tenants' pods all
run as the one non-root RUN_AS (their images name it): what keeps a tenant out of another's
files is the group. The Job, in the FSx CSI driver's system namespace through a claim of the
root, makes every `/<tenant>` owned by root with the tenant's group and mode 2770 (setgid:
what is made inside keeps the group), and the tenant's pods run in that group
(components/training_spec.py tenant_pod_security, pinned per namespace by an admission
policy). Each tenant's datasets are linked under its directory (components/lustre_spec.py),
so its mount holds them too. The Job is idempotent (mkdir -p, chown, chmod of the directory
alone): adding a tenant changes the Job's pod template, which Kubernetes cannot update, so
Pulumi replaces the Job and the new one goes over every tenant again, touching nothing inside
the directories. It relies on the file system not squashing root (FSx's default, which
components/lustre.py keeps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from components.addons.values import NAMESPACES
from components.training_spec import SCRATCH_MOUNT

FSX_DRIVER = "fsx.csi.aws.com"
SCRATCH_CLAIM = "lustre-scratch"
# The Job and its claim live beside the FSx CSI driver: a system namespace whose Pod
# Security level admits a root container (components/tenancy_spec.py SYSTEM_NAMESPACES).
DIRECTORIES_NAMESPACE = NAMESPACES["aws-fsx-csi-driver"]
DIRECTORIES_JOB = "lustre-tenant-directories"
DIRECTORIES_CLAIM = "lustre-tenant-directories"
DIRECTORY_MODE = "2770"  # the tenant's group only; setgid, so what is made inside keeps it
# What the Job may do as root and nothing more: create a directory whatever the root's mode
# (DAC_OVERRIDE), give it the tenant's group (CHOWN), set its mode (FOWNER) with setgid on a
# group root is not in (FSETID: without it the kernel drops the bit).
DIRECTORIES_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID")


@dataclass(frozen=True)
class LustreVolume:
    """The scratch file system as the storage component exposes it. The first three may be
    Pulumi outputs; the specs only place them."""

    file_system_id: Any
    dns_name: Any
    mount_name: Any
    capacity_gib: int


def _static_volume(name: str, namespace: str, claim: str, lustre: LustreVolume,
                   labels: dict[str, str], subdirectory: str = "") -> dict[str, Any]:
    """A static PersistentVolume bound to one claim, of the file system's root or, with
    `subdirectory`, of that directory alone (a Lustre fileset mount: the client mounts
    <dnsname>@tcp:/<mountname>/<subdirectory> and sees nothing above it). Retained: deleting
    the claim never touches the file system, which the storage component owns."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "capacity": {"storage": f"{lustre.capacity_gib}Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": namespace, "name": claim},
            "mountOptions": ["flock"],
            "csi": {
                "driver": FSX_DRIVER,
                "volumeHandle": lustre.file_system_id,
                "volumeAttributes": {"dnsname": lustre.dns_name,
                                     "mountname": _under(lustre.mount_name, subdirectory)},
            },
        },
    }


def _under(mount_name: Any, subdirectory: str) -> Any:
    """`<mountname>/<subdirectory>`; the mount name may be a Pulumi output."""
    if not subdirectory:
        return mount_name
    if isinstance(mount_name, str):
        return f"{mount_name}/{subdirectory}"
    return mount_name.apply(lambda name: f"{name}/{subdirectory}")


def _claim(name: str, namespace: str, volume: str, lustre: LustreVolume) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": f"{lustre.capacity_gib}Gi"}},
        },
    }


def scratch_volume(namespace: str, lustre: LustreVolume) -> dict[str, Any]:
    """The tenant's volume, bound to its `lustre-scratch` claim: its own directory of the file
    system (`/<tenant>`, with its datasets under it), never the root, so its pods cannot see
    another tenant's directory whatever they do."""
    return _static_volume(f"lustre-scratch-{namespace}", namespace, SCRATCH_CLAIM, lustre,
                          {"mlplat.io/tenant": namespace}, subdirectory=namespace)


def scratch_claim(namespace: str, lustre: LustreVolume) -> dict[str, Any]:
    return _claim(SCRATCH_CLAIM, namespace, f"lustre-scratch-{namespace}", lustre)


# --- Shared scratch on a customer's cluster ---------------------------------------------

# Each tenant's claim of the customer's ReadWriteMany storage class (CephFS, NFS, a
# parallel file system), mounted where Lustre is on AWS (SCRATCH_MOUNT): its own volume,
# so no Job has to carve directories out of a shared root.
SHARED_SCRATCH_CLAIM = "shared-scratch"


@dataclass(frozen=True)
class SharedScratch:
    storage_class: str  # the descriptor's storageClasses.shared
    capacity_gib: int


def shared_scratch_claim(namespace: str, scratch: SharedScratch) -> dict[str, Any]:
    """Dynamically provisioned: the provider waits for it to bind, or, with a class that
    binds on first use (WaitForFirstConsumer), only for it to be Pending
    (pulumi/pulumi-kubernetes#3130), so it never waits for a job to mount it."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": SHARED_SCRATCH_CLAIM, "namespace": namespace,
                     "labels": {"mlplat.io/tenant": namespace, "app.kubernetes.io/part-of": "mlplat"}},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": scratch.storage_class,
            "resources": {"requests": {"storage": f"{scratch.capacity_gib}Gi"}},
        },
    }


# --- Tenant directories ----------------------------------------------------------------


def tenant_directory(tenant: str) -> str:
    """Where a tenant's workloads write: on a customer's cluster, in the pods' mount of the
    tenant's own volume (training: its jobs' directories are `<this>/<job>`); on Lustre, the
    tenant's directory as the directories Job sees the file system's root."""
    return f"{SCRATCH_MOUNT}/{tenant}"


def directories_volume(lustre: LustreVolume) -> dict[str, Any]:
    return _static_volume(DIRECTORIES_CLAIM, DIRECTORIES_NAMESPACE, DIRECTORIES_CLAIM, lustre,
                          {"app.kubernetes.io/name": DIRECTORIES_JOB, "app.kubernetes.io/part-of": "mlplat"})


def directories_claim(lustre: LustreVolume) -> dict[str, Any]:
    return _claim(DIRECTORIES_CLAIM, DIRECTORIES_NAMESPACE, DIRECTORIES_CLAIM, lustre)


# The directories come in as arguments (`<directory>=<group>`), never inside the script
# text. Plain commands, not an && chain: `sh -e` stops at a failing command only outside
# such chains. Each directory is root's, its group the tenant's, setgid (what is made in it
# keeps the tenant's group): the workloads' shared UID owns nothing there, so only the
# tenant's group gets in.
DIRECTORIES_SCRIPT = (
    'for arg in "$@"; do dir="${arg%=*}"; group="${arg##*=}"; mkdir -p "$dir"; chown "$OWNER:$group" "$dir"; '
    'chmod "$MODE" "$dir"; ls -ldn "$dir"; done'
)


def directories_labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": DIRECTORIES_JOB, "app.kubernetes.io/component": "lustre-directories",
            "app.kubernetes.io/part-of": "mlplat"}


def directories_network_policy() -> dict[str, Any]:
    """The Job's pod talks to nobody: the node mounts Lustre and pulls the image, so the pod
    gets no traffic in or out."""
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": DIRECTORIES_JOB, "namespace": DIRECTORIES_NAMESPACE},
        "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": DIRECTORIES_JOB}},
                 "policyTypes": ["Ingress", "Egress"]},
    }


def directories_job(tenants: Sequence[tuple[str, int]], image: str) -> dict[str, Any]:
    """The Job that makes every tenant's directory. Root is needed because the file
    system's root is root's; the container keeps only DIRECTORIES_CAPABILITIES, no privilege
    escalation, a read-only root file system and no service account token. Kueue leaves it
    alone: it names no queue, in a namespace Kueue never manages."""
    labels = directories_labels()
    container = {
        "name": "mkdir",
        "image": image,
        "imagePullPolicy": "Always",
        "command": ["sh", "-euc", DIRECTORIES_SCRIPT, "sh", *(f"{tenant_directory(t)}={gid}" for t, gid in tenants)],
        "env": [{"name": "OWNER", "value": "0"}, {"name": "MODE", "value": DIRECTORY_MODE}],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        "volumeMounts": [{"name": "lustre", "mountPath": SCRATCH_MOUNT}],
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "runAsGroup": 0,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": list(DIRECTORIES_CAPABILITIES)},
        },
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": DIRECTORIES_JOB, "namespace": DIRECTORIES_NAMESPACE, "labels": labels},
        "spec": {
            "backoffLimit": 4,
            # Mounting Lustre on a node that has not yet loaded the client can take minutes.
            "activeDeadlineSeconds": 900,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "lustre", "persistentVolumeClaim": {"claimName": DIRECTORIES_CLAIM}}],
                },
            },
        },
    }
