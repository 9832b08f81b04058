"""Turn a plain manifest into the matching pulumi_kubernetes resource.

Core kinds become their typed resources (so policies see `kubernetes:core/v1:Namespace`
and friends); custom kinds (Kueue, Prometheus rules) become CustomResources. The manifest
dict is passed through as is: camelCase keys reach the engine unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

_TYPED = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ResourceQuota"): k8s.core.v1.ResourceQuota,
    ("v1", "LimitRange"): k8s.core.v1.LimitRange,
    ("v1", "PersistentVolume"): k8s.core.v1.PersistentVolume,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("autoscaling/v2", "HorizontalPodAutoscaler"): k8s.autoscaling.v2.HorizontalPodAutoscaler,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("batch/v1", "CronJob"): k8s.batch.v1.CronJob,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
}


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def resource_name(manifest: dict[str, Any]) -> str:
    """A Pulumi name unique per object: kind, namespace and name."""
    meta = manifest["metadata"]
    parts = [manifest["kind"].lower(), meta.get("namespace"), meta["name"]]
    return "-".join(p for p in parts if p)


def create(manifest: dict[str, Any], opts: pulumi.ResourceOptions, name: str | None = None) -> pulumi.CustomResource:
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    name = name or resource_name(manifest)
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    typed = _TYPED.get((api_version, kind))
    if typed is not None:
        return typed(name, opts=opts, **{_snake(k): v for k, v in body.items()})
    return k8s.apiextensions.CustomResource(name, api_version=api_version, kind=kind, opts=opts, **body)


def create_fenced(namespace: dict[str, Any], policies: list[dict[str, Any]],
                  opts: pulumi.ResourceOptions) -> list[pulumi.CustomResource]:
    """A namespace, then the NetworkPolicies that fence it. Whatever runs there depends on
    the whole list, so no pod of it starts before its fences."""
    created = create(namespace, opts)
    after = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[created]))
    return [created, *(create(policy, after) for policy in policies)]
