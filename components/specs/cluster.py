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


# --- A cluster the customer runs -------------------------------------------------------

# The platform's record of the customer's infrastructure, where the policy pack and people
# read it (policies/platform_policies/customer_cluster.py judges its encryption statement).
PLATFORM_NAMESPACE = "mlplat-system"
PLATFORM_CONFIG_MAP = "mlplat-platform"
# The CA that signed the customer's services' certificates (the descriptor's
# objectStorage.caBundle): each namespace whose pods reach them gets it in this ConfigMap,
# mounted at CA_DIR, where AWS_CA_BUNDLE points (and a PostgreSQL DSN's sslrootcert may).
CA_CONFIG_MAP = "customer-ca"
CA_KEY = "ca.crt"
CA_DIR = "/etc/mlplat/ca"
CA_FILE = f"{CA_DIR}/{CA_KEY}"


def platform_config_map(facts: dict[str, str]) -> dict[str, Any]:
    """`facts`: flat keys (objectStore.endpoint, objectStore.encryptionAtRest, ...)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": PLATFORM_CONFIG_MAP, "namespace": PLATFORM_NAMESPACE,
                         "labels": {"app.kubernetes.io/part-of": "mlplat"}},
            "data": dict(sorted(facts.items()))}


def ca_config_map(namespace: str, pem: str, name: str = CA_CONFIG_MAP) -> dict[str, Any]:
    """The customer's CA in a namespace; `name`: a copy of a component's own, beside another."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/part-of": "mlplat"}},
            "data": {CA_KEY: pem}}
