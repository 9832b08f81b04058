"""What the API server refuses in tenant namespaces, as ValidatingAdmissionPolicies (CEL,
built into Kubernetes since 1.30): the side doors Pod Security's `restricted` level leaves
open between tenants.

- A Service with `externalIPs` (CVE-2020-8554) makes kube-proxy on every node send traffic
  for those addresses to the Service: pointed at the VPC endpoints, the database or the
  Kubernetes API, it takes their traffic. Refused in every namespace.
- A `system-*` priority class preempts everyone, the platform's daemons included.
- A tenant's pods run as the workloads' UID in the tenant's own group and no other: the
  group is what reaches its scratch directory (components/addons/volumes.py), and a pod
  that picked another tenant's group, or took the groups its image's /etc/group lists
  (`supplementalGroupsPolicy: Strict` turns that off), would reach theirs.
- A pod that tolerates the GPU taint must be pinned to the tenant's own GPU pools, by pool
  or instance type: else it could land on, and starve, another's (or Triton's). `nodeName`
  is refused at creation: it skips the scheduler, and so the taint.
- A pod that asks for an accelerator (any extended resource, or a DRA claim) must come from
  a Job, which Kueue holds until the tenant's queue admits it (components/addons/values.py
  manages every Job in a tenant namespace, labelled or not): a bare pod, a Deployment or
  a StatefulSet would take GPUs outside the queue.

What varies per tenant is on its Namespace (which tenants cannot edit), as annotations the
policies read through `namespaceObject`: its UID and group, and one key per pool and
instance type it may use (tenancy_spec.tenant_namespace). A policy that cannot read them
refuses (failurePolicy Fail). infra/checks/admission.py evaluates these policies as the
API server does, for the preview and the tests.
"""

from __future__ import annotations

from typing import Any

API_VERSION = "admissionregistration.k8s.io/v1"
TENANT_LABEL = "mlplat.io/tenant"
UID_ANNOTATION = "mlplat.io/uid"
GID_ANNOTATION = "mlplat.io/gid"
# One annotation per pool and instance type the tenant may pin its GPU pods to.
POOL_ANNOTATION = "pool.mlplat.io/"
INSTANCE_TYPE_ANNOTATION = "instance-type.mlplat.io/"
POOL_LABEL = "mlplat.io/pool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_TAINT_KEY = "nvidia.com/gpu"
# The identity kube-controller-manager's Job controller creates pods with (EKS, kubeadm and
# k3s all run the controllers with their own service accounts).
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"

TENANT_NAMESPACES = {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}

EXTERNAL_IPS_POLICY = "mlplat-no-external-ips"
TENANT_PODS_POLICY = "mlplat-tenant-pods"


def _policy(name: str, resources: list[str], variables: list[tuple[str, str]],
            validations: list[dict[str, str]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": resources,
        }]},
        "validations": validations,
    }
    if variables:
        spec["variables"] = [{"name": n, "expression": e} for n, e in variables]
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "mlplat"}}, "spec": spec}


def _binding(policy: str, namespaces: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": policy, "validationActions": ["Deny"]}
    if namespaces is not None:
        spec["matchResources"] = {"namespaceSelector": namespaces}
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy, "labels": {"app.kubernetes.io/part-of": "mlplat"}}, "spec": spec}


def _rule(expression: str, message: str, message_expression: str | None = None) -> dict[str, str]:
    rule = {"expression": expression, "message": message, "reason": "Forbidden"}
    if message_expression:
        rule["messageExpression"] = message_expression
    return rule


def external_ips_policy() -> dict[str, Any]:
    return _policy(EXTERNAL_IPS_POLICY, ["services"], [], [_rule(
        "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
        "spec.externalIPs is not allowed: kube-proxy would send every node's traffic for those addresses to this "
        "Service (CVE-2020-8554); use the gateway or a ClusterIP Service",
    )])


# Every container of the pod, debug containers included (they come in as an UPDATE of
# pods/ephemeralcontainers).
_CONTAINERS = ("object.spec.containers"
               " + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
               " + (has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])")
# Typed map<string, string>; a namespace without annotations fails every rule that reads
# it, so the pod is refused (failurePolicy Fail).
_ANNOTATIONS = "namespaceObject.metadata.annotations"
_POD_SECURITY = "has(object.spec.securityContext) ? object.spec.securityContext : {}"
_TOLERATES_GPU = (f"has(object.spec.tolerations) && object.spec.tolerations.exists(t, !has(t.key) || t.key == '' "
                  f"|| t.key == '{GPU_TAINT_KEY}')")


def _allowed(prefix: str, value: str) -> str:
    return f"('{prefix}' + {value}) in variables.annotations"


# Pinned: the nodeSelector names one of the tenant's pools or instance types, or every
# term of the required node affinity does (terms are ORed; a term's expressions ANDed).
_SELECTED_POOL = f"object.spec.nodeSelector['{POOL_LABEL}']"
_SELECTED_TYPE = f"object.spec.nodeSelector['{INSTANCE_TYPE_LABEL}']"
_PINNED = (
    f"(has(object.spec.nodeSelector) && ("
    f"('{POOL_LABEL}' in object.spec.nodeSelector && {_allowed(POOL_ANNOTATION, _SELECTED_POOL)})"
    f" || ('{INSTANCE_TYPE_LABEL}' in object.spec.nodeSelector && {_allowed(INSTANCE_TYPE_ANNOTATION, _SELECTED_TYPE)})))"
    " || (has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity)"
    " && has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution)"
    " && object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.all("
    "term, has(term.matchExpressions) && term.matchExpressions.exists(e, e.operator == 'In' && ("
    f"(e.key == '{POOL_LABEL}' && e.values.all(v, {_allowed(POOL_ANNOTATION, 'v')}))"
    f" || (e.key == '{INSTANCE_TYPE_LABEL}' && e.values.all(v, {_allowed(INSTANCE_TYPE_ANNOTATION, 'v')}))))))"
)
_ACCELERATOR = (
    "variables.containers.exists(c, has(c.resources) && ("
    "(has(c.resources.limits) && c.resources.limits.exists(r, r.contains('/')))"
    " || (has(c.resources.requests) && c.resources.requests.exists(r, r.contains('/')))))"
    " || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"
)


def tenant_pods_policy() -> dict[str, Any]:
    uid = f"variables.annotations['{UID_ANNOTATION}']"
    gid = f"variables.annotations['{GID_ANNOTATION}']"
    variables = [
        ("annotations", _ANNOTATIONS),
        ("containers", _CONTAINERS),
        ("security", _POD_SECURITY),
        ("tolerates_gpu", _TOLERATES_GPU),
        ("accelerator", _ACCELERATOR),
    ]
    validations = [
        _rule("!has(object.spec.priorityClassName) || !object.spec.priorityClassName.startsWith('system-')",
              "a tenant's pod may not use a system-* priority class: it would preempt the platform's and other "
              "tenants' pods; leave priorityClassName unset"),
        _rule(f"has(namespaceObject.metadata.annotations) && '{UID_ANNOTATION}' in variables.annotations"
              f" && '{GID_ANNOTATION}' in variables.annotations",
              f"this tenant namespace has no {UID_ANNOTATION} and {GID_ANNOTATION} annotations; the platform sets "
              "them (mlplat up)"),
        _rule(f"has(variables.security.runAsUser) && string(variables.security.runAsUser) == {uid}"
              f" && variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.runAsUser)"
              f" || string(c.securityContext.runAsUser) == {uid})",
              "a tenant's pod runs as the workloads' UID: set securityContext.runAsUser to the namespace's "
              f"{UID_ANNOTATION} and no other in any container",
              f"'securityContext.runAsUser must be ' + {uid} + ' (the namespace\\'s {UID_ANNOTATION}), in the pod "
              "and every container that sets it'"),
        _rule(f"has(variables.security.runAsGroup) && string(variables.security.runAsGroup) == {gid}"
              f" && has(variables.security.fsGroup) && string(variables.security.fsGroup) == {gid}"
              " && has(variables.security.supplementalGroupsPolicy)"
              " && variables.security.supplementalGroupsPolicy == 'Strict'"
              f" && (!has(variables.security.supplementalGroups)"
              f" || variables.security.supplementalGroups.all(g, string(g) == {gid}))"
              f" && variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.runAsGroup)"
              f" || string(c.securityContext.runAsGroup) == {gid})",
              "a tenant's pod runs in the tenant's group alone: set securityContext.runAsGroup and fsGroup to the "
              f"namespace's {GID_ANNOTATION}, supplementalGroupsPolicy: Strict, and no other group",
              f"'securityContext.runAsGroup and fsGroup must be ' + {gid} + ' (the namespace\\'s "
              f"{GID_ANNOTATION}), with supplementalGroupsPolicy: Strict and no other group in the pod or a "
              "container'"),
        _rule(f"!variables.tolerates_gpu || {_PINNED}",
              "a pod that tolerates the GPU taint must be pinned to the tenant's own GPU pools: a nodeSelector or "
              f"required node affinity on {POOL_LABEL} or {INSTANCE_TYPE_LABEL} naming only pools and instance "
              f"types the namespace's {POOL_ANNOTATION}* and {INSTANCE_TYPE_ANNOTATION}* annotations list"),
        _rule("request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''",
              "spec.nodeName is not allowed in a tenant's pod: it skips the scheduler and the GPU pools' taint; "
              "let the scheduler place the pod"),
        _rule(f"request.operation != 'CREATE' || !variables.accelerator || request.userInfo.username == "
              f"'{JOB_CONTROLLER}'",
              "a pod that asks for GPUs, EFA or any other device must come from a Job (or a JobSet), which the "
              "tenant's Kueue queue admits; a bare pod, Deployment or StatefulSet would take them outside the "
              "queue"),
    ]
    return _policy(TENANT_PODS_POLICY, ["pods", "pods/ephemeralcontainers"], variables, validations)


def admission_objects() -> list[dict[str, Any]]:
    """The policies and their bindings: external IPs everywhere, the pod rules in tenant
    namespaces."""
    return [external_ips_policy(), _binding(EXTERNAL_IPS_POLICY, None),
            tenant_pods_policy(), _binding(TENANT_PODS_POLICY, TENANT_NAMESPACES)]


def tenant_annotations(uid: int, gid: int, pools: tuple[str, ...], instance_types: tuple[str, ...]) -> dict[str, str]:
    """What the policies read from a tenant's Namespace."""
    return {
        UID_ANNOTATION: str(uid), GID_ANNOTATION: str(gid),
        **{f"{POOL_ANNOTATION}{pool}": "allowed" for pool in pools},
        **{f"{INSTANCE_TYPE_ANNOTATION}{itype}": "allowed" for itype in instance_types},
    }
