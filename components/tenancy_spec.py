"""What each tenant's slice of the cluster looks like, as plain Kubernetes manifests.

A tenant is one team: a namespace that enforces the `restricted` Pod Security level, a
ResourceQuota and a LimitRange, a default-deny NetworkPolicy plus the few flows the
workloads need, and a Role bound to the team's groups (mapped from IAM by the cluster's
access entries). The system namespaces and the Pod Security level each one needs, with
the reason, are written down once here, in SYSTEM_NAMESPACES.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from components.admission_spec import tenant_annotations
from components.training_spec import RUN_AS
from infra.versions import KUBERNETES_VERSION

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
MONITORING_NAMESPACE = "monitoring"
# EKS Pod Identity's agent answers credential requests on this link-local address (port
# 80, from the node's own network namespace): pods that use AWS must be allowed to reach it.
POD_IDENTITY_AGENT = "169.254.170.23/32"
PSA = "pod-security.kubernetes.io"


@dataclass(frozen=True)
class Tenant:
    name: str  # team, namespace and ClusterQueue name
    cpu: int  # cores
    memory_gi: int
    gpu: int  # advertised nvidia.com/gpu (time-sliced replicas count as GPUs)
    efa: int
    cohort: str | None = None  # tenants in one cohort borrow each other's unused quota
    groups: tuple[str, ...] = ()  # Kubernetes groups bound to the developer Role
    role_arns: tuple[str, ...] = ()  # IAM roles mapped to `groups` by EKS access entries
    instance_types: tuple[str, ...] | None = None  # GPU flavors the team may use; None: all
    # The tenant's group: its pods run in it, and only it reaches its scratch directory.
    # Unset: drawn from the name (tenant_gid), never root's.
    gid: int | None = None
    pods: int = 200  # pods at once, whatever made them
    storage_gi: int = 2000  # volume claims' storage
    ephemeral_gi: int = 500  # node-local disk its pods request

    def __post_init__(self) -> None:
        if self.gid is None:
            object.__setattr__(self, "gid", tenant_gid(self.name))


# The tenants' workloads run as one UID, the one their images name (the training image's
# sshd looks it up); what keeps a tenant out of another's files is its group: each
# tenant's scratch directory is root's, its group the tenant's, mode 2770, and its pods run
# in that group alone (an admission policy pins it per namespace). Groups are drawn from a
# range no image or system user uses, stable for a name whatever the order of the tenants.
GID_RANGE = (20000, 60000)
# Groups a tenant may not have: root's, the workloads' shared one, and those images use.
RESERVED_GIDS = {0: "root's group", 10001: "the platform workloads' shared group",
                 65532: "the distroless images' nonroot group", 65534: "nogroup"}


def tenant_gid(name: str) -> int:
    """The group a tenant gets unless its config names one."""
    low, high = GID_RANGE
    return low + zlib.crc32(name.encode()) % (high - low)


def tenants_from_config(configured: Iterable[Any]) -> tuple[Tenant, ...]:
    return tuple(
        Tenant(
            name=t.name, cpu=t.quotas.cpu, memory_gi=t.quotas.memory_gi, gpu=t.quotas.gpu, efa=t.quotas.efa,
            cohort=t.cohort, groups=tuple(t.groups), role_arns=tuple(t.role_arns),
            instance_types=tuple(t.instance_types) if t.instance_types is not None else None,
            gid=t.gid, pods=t.quotas.pods, storage_gi=t.quotas.storage_gi, ephemeral_gi=t.quotas.ephemeral_gi,
        )
        for t in configured
    )


# --- System namespaces ---------------------------------------------------------------


@dataclass(frozen=True)
class SystemNamespace:
    name: str
    level: str  # Pod Security level enforced
    reason: str
    managed: bool = True  # False: EKS owns it; we neither create nor relabel it


# Every exception to `restricted`, with what needs it. Tenant namespaces are always
# `restricted`; nothing here is reachable from a tenant's Role.
SYSTEM_NAMESPACES: dict[str, SystemNamespace] = {ns.name: ns for ns in (
    SystemNamespace(
        "kube-system", "privileged",
        "EKS-owned. The EFA device plugin (hostNetwork; hostPath /dev/infiniband and the kubelet "
        "device-plugin socket), the FSx CSI node plugin (privileged, to mount Lustre on the host) and "
        "the EKS add-ons (VPC CNI, kube-proxy, EBS CSI node) run here.",
        managed=False,
    ),
    SystemNamespace(
        "nvidia-device-plugin", "privileged",
        "The NVIDIA device plugin writes its socket to the kubelet's device-plugin directory "
        "(hostPath); GPU feature discovery runs privileged to read GPU data from the host; the NFD "
        "worker reads /sys and /proc of the host.",
    ),
    SystemNamespace(
        "gpu-operator", "privileged",
        "The GPU Operator's operands (device plugin, feature discovery, DCGM exporter, validator, MIG "
        "manager) need hostPath mounts and privileged containers to manage the GPUs.",
    ),
    SystemNamespace(
        "mlplat-system", "restricted",
        "A customer's cluster: the platform's own record of the customer's infrastructure (the "
        "mlplat-platform ConfigMap: object store, its encryption at rest, registry). No pods run here.",
    ),
    SystemNamespace(
        "nvidia-network-operator", "privileged",
        "A customer's RDMA fabric: the Network Operator's DOCA (MOFED) driver container loads kernel "
        "modules on the host (privileged, hostPath /lib/modules and /run/mellanox) and its RDMA shared "
        "device plugin writes to the kubelet's device-plugin directory (hostPath) and reads /dev/infiniband. "
        "On a customer's bare-metal nodes the GPU Operator's driver and toolkit run in gpu-operator.",
    ),
    SystemNamespace(
        MONITORING_NAMESPACE, "privileged",
        "The node exporter uses hostNetwork, hostPID and hostPath /proc and /sys; the DCGM exporter "
        "runs as root and reads the kubelet pod-resources socket (hostPath) to name the pod per GPU.",
    ),
    SystemNamespace("kueue-system", "restricted", "Kueue's controller needs no host access."),
    SystemNamespace("jobset-system", "restricted", "JobSet's controller needs no host access."),
    SystemNamespace("envoy-gateway-system", "restricted",
                    "Envoy Gateway's controller and the inference gateway's proxies need no host access."),
    SystemNamespace("argo-rollouts", "restricted", "Argo Rollouts' controller needs no host access."),
)}

RESERVED_NAMES = frozenset(SYSTEM_NAMESPACES) | {"default", "kube-public", "kube-node-lease"}
# Kubernetes' own namespaces and the platform's.
RESERVED_PREFIXES = ("kube-", "mlplat")
# Names a tenant would share with a platform identity: its namespace, and the users the
# tracking server makes (an `admin` tenant's user would be the server's admin).
PLATFORM_IDENTITIES = {
    "admin": "the tracking server's administrator",
    "mlflow": "the tracking server's namespace",
    "system": "a Kubernetes identity prefix",
    "anonymous": "a Kubernetes identity (system:anonymous)",
}


def platform_identity(name: str) -> str | None:
    """What platform identity a tenant name would collide with, or None."""
    return PLATFORM_IDENTITIES.get(name)


def pod_security_labels(level: str) -> dict[str, str]:
    # Pinned to the control plane's version, so a Kubernetes upgrade cannot silently
    # change what `restricted` allows.
    version = f"v{KUBERNETES_VERSION}"
    labels = {}
    for mode in ("enforce", "audit", "warn"):
        labels[f"{PSA}/{mode}"] = level
        labels[f"{PSA}/{mode}-version"] = version
    return labels


def system_namespace(ns: SystemNamespace) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": ns.name,
            "labels": {**pod_security_labels(ns.level), "app.kubernetes.io/part-of": "mlplat"},
            "annotations": {"mlplat.io/pod-security-reason": ns.reason},
        },
    }


# --- Tenant objects ------------------------------------------------------------------


def tenant_pools(tenant: Tenant, gpu_pools: Sequence[tuple[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(pools, instance types) of the GPU pools `(name, instance type)` the tenant's queue
    has flavors for: those of its instance types, or every one where it names none."""
    mine = [(pool, itype) for pool, itype in gpu_pools
            if tenant.instance_types is None or itype in tenant.instance_types]
    return tuple(dict.fromkeys(p for p, _ in mine)), tuple(dict.fromkeys(t for _, t in mine))


def tenant_namespace(tenant: Tenant, gpu_pools: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The tenant's Namespace. Its annotations are what the admission policies
    (components/admission_spec.py) hold the tenant's pods to: the workloads' UID, the
    tenant's group, and the GPU pools and instance types its pods may be pinned to."""
    labels = {**pod_security_labels("restricted"), "mlplat.io/tenant": tenant.name,
              "app.kubernetes.io/part-of": "mlplat"}
    if tenant.cohort:
        labels["mlplat.io/cohort"] = tenant.cohort
    pools, types = tenant_pools(tenant, gpu_pools)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": tenant.name, "labels": labels, "annotations": tenant_annotations(RUN_AS, tenant.gid, pools, types)}}


def quota_ceiling(tenant: Tenant, everyone: Sequence[Tenant]) -> Tenant:
    """The most a tenant's pods can ever use: its own quota, plus what it may borrow from
    the rest of its cohort through Kueue."""
    group = [t for t in everyone if t.name == tenant.name or (tenant.cohort and t.cohort == tenant.cohort)]
    return Tenant(
        name=tenant.name,
        cpu=sum(t.cpu for t in group),
        memory_gi=sum(t.memory_gi for t in group),
        gpu=sum(t.gpu for t in group),
        efa=sum(t.efa for t in group),
        cohort=tenant.cohort,
    )


def resource_quota(tenant: Tenant, everyone: Sequence[Tenant], scratch_gi: int = 0) -> dict[str, Any]:
    """A hard backstop under Kueue: pods that bypass the queue still cannot take more than
    the tenant could get by borrowing; nothing is exposed through a load balancer or node
    port. What no queue lends (pod count, claimed storage, node-local disk) is the tenant's
    own: another tenant's pods are not starved of IPs, nodes' disks or the storage budget.
    Claimed storage counts every claim in the namespace, the platform's own scratch claim
    (`scratch_gi`: the Lustre file system's or the customer's scratch size) included, so
    the tenant's `storageGi` comes on top of it."""
    ceiling = quota_ceiling(tenant, everyone)
    return {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "tenant-quota", "namespace": tenant.name},
        "spec": {"hard": {
            "requests.cpu": str(ceiling.cpu),
            "requests.memory": f"{ceiling.memory_gi}Gi",
            f"requests.{GPU_RESOURCE}": str(ceiling.gpu),
            f"requests.{EFA_RESOURCE}": str(ceiling.efa),
            "pods": str(tenant.pods),
            "requests.storage": f"{tenant.storage_gi + scratch_gi}Gi",
            "requests.ephemeral-storage": f"{tenant.ephemeral_gi}Gi",
            "persistentvolumeclaims": "50",
            "services.loadbalancers": "0",
            "services.nodeports": "0",
        }},
    }


def limit_range(tenant: Tenant) -> dict[str, Any]:
    """Defaults for containers that state no resources, so none runs unbounded. Node-local
    disk gets a default request only, which the quota counts: a default limit would evict a
    single-node job checkpointing to its node-local scratch."""
    return {
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": "container-defaults", "namespace": tenant.name},
        "spec": {"limits": [{
            "type": "Container",
            "default": {"cpu": "1", "memory": "2Gi"},
            "defaultRequest": {"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"},
        }]},
    }


def _policy(tenant: Tenant, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": tenant.name}, "spec": spec}


def _namespace_selector(name: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": name}}


def pods_in(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """A NetworkPolicy peer: the pods with `labels` in the namespace of that name (a label
    the API server sets, which no tenant can put on another namespace)."""
    return {"namespaceSelector": _namespace_selector(namespace), "podSelector": {"matchLabels": dict(labels)}}


def network_policies(tenant: Tenant) -> list[dict[str, Any]]:
    """Default deny both ways, then: DNS, traffic inside the namespace (the training
    rendezvous and NCCL's socket bootstrap use many ports), AWS credentials from the Pod
    Identity agent, the tracking server, and scraping by Prometheus. EFA traffic bypasses
    the kernel and needs no rule."""
    return [
        _policy(tenant, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(tenant, "allow-dns", {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{
                "to": [pods_in("kube-system", {"k8s-app": "kube-dns"})],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            }],
        }),
        _policy(tenant, "allow-same-namespace", {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": [{"to": [{"podSelector": {}}]}],
        }),
        _policy(tenant, "allow-pod-identity", {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": [{"protocol": "TCP", "port": 80}]}],
        }),
        # The MLflow tracking server (components/tracking_spec.py), which admits tenants only.
        _policy(tenant, "allow-tracking", {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [pods_in("mlflow", {"app.kubernetes.io/name": "mlflow"})],
                        "ports": [{"protocol": "TCP", "port": 5000}]}],
        }),
        _policy(tenant, "allow-prometheus-scrape", {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [pods_in(MONITORING_NAMESPACE, {"app.kubernetes.io/name": "prometheus"})]}],
        }),
    ]


def endpoint_policy(tenant: Tenant, endpoint_cidrs: Sequence[str]) -> dict[str, Any]:
    """HTTPS to the AWS APIs the VPC reaches privately: the interface endpoints inside the
    VPC's CIDR and the S3 gateway endpoint's prefix list."""
    return _policy(tenant, "allow-vpc-endpoints", {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{
            "to": [{"ipBlock": {"cidr": cidr}} for cidr in endpoint_cidrs],
            "ports": [{"protocol": "TCP", "port": 443}],
        }],
    })


READ = ["get", "list", "watch"]
WRITE = ["get", "list", "watch", "create", "update", "patch", "delete"]

# What a team member may do in the team's namespace: run and inspect workloads, never
# change the fences (quota, limits, network policies, RBAC) around them.
DEVELOPER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods", "services", "configmaps", "secrets", "persistentvolumeclaims",
                                      "serviceaccounts"], "verbs": WRITE},
    {"apiGroups": [""], "resources": ["pods/log", "events", "resourcequotas", "limitranges"], "verbs": READ},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["create"]},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": WRITE},
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "replicasets"], "verbs": WRITE},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": WRITE},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": READ},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": READ},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": READ},
]


def developer_role(tenant: Tenant) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tenant-developer", "namespace": tenant.name},
        "rules": DEVELOPER_RULES,
    }


def developer_binding(tenant: Tenant) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tenant-developers", "namespace": tenant.name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-developer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                     for group in tenant.groups],
    }


def tenant_objects(
    tenant: Tenant, everyone: Sequence[Tenant], endpoint_cidrs: Sequence[str] | None = None, scratch_gi: int = 0
) -> list[dict[str, Any]]:
    """Everything in a tenant's namespace except the namespace itself. The endpoint policy
    is added where the CIDRs are known (the component adds it once the VPC exists)."""
    objects = [resource_quota(tenant, everyone, scratch_gi), limit_range(tenant), *network_policies(tenant),
               developer_role(tenant)]
    if tenant.groups:
        objects.append(developer_binding(tenant))
    if endpoint_cidrs:
        objects.append(endpoint_policy(tenant, endpoint_cidrs))
    return objects
