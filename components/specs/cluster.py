"""Cluster specs: control-plane logs, access policies, the kubeconfig, the default
StorageClass."""

from __future__ import annotations

import hashlib
from typing import Any

# Every control-plane log type EKS offers; audit and authenticator are what an incident
# review needs, the others explain scheduling and controller behaviour.
CONTROL_PLANE_LOG_TYPES: tuple[str, ...] = ("api", "audit", "authenticator", "controllerManager", "scheduler")

ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"

FORBIDDEN_PUBLIC_CIDRS = frozenset({"0.0.0.0/0", "::/0"})


def control_plane_log_group(cluster_name: str) -> str:
    # EKS writes to exactly this name; creating it first lets us choose key and retention.
    return f"/aws/eks/{cluster_name}/cluster"


def principal_key(principal_arn: str) -> str:
    """A stable, short resource-name suffix for an IAM principal (order-independent)."""
    return hashlib.sha256(principal_arn.encode()).hexdigest()[:8]


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> dict[str, Any]:
    """A kubeconfig that holds no secret: tokens come from `aws eks get-token` at use."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [
            {
                "name": cluster_name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region,
                                 "--output", "json"],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
    }


def default_storage_class(kms_key_arn: str) -> dict[str, Any]:
    """gp3 volumes encrypted with the volumes key. Retained on delete: a PVC removed by
    mistake must not take its data with it."""
    return {
        "metadata": {
            "name": "gp3-encrypted",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "encrypted": "true", "kmsKeyId": kms_key_arn, "fsType": "ext4"},
        "reclaim_policy": "Retain",
        "volume_binding_mode": "WaitForFirstConsumer",
        "allow_volume_expansion": True,
    }


# The VPC CNI's network policy agent enforces NetworkPolicy objects; without it the
# tenants' default-deny policies would exist and do nothing.
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
