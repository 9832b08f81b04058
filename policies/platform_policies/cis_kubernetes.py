"""What the CIS benchmark asks of a cluster beyond the Pod Security profile itself: every
Namespace enforces a Pod Security level (restricted unless an entry says why not), no workload
runs in the `default` namespace, and a pod gets a service-account token only where it says it
needs one."""

from __future__ import annotations

from collections.abc import Mapping

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import UNKNOWN, Settings, flag, get, resource_rule
from .controls import cis_eks
from .kubernetes import pod_bearing
from .workloads import pod_templates, workload

NAMESPACE = "kubernetes:core/v1:Namespace"
ENFORCE = "pod-security.kubernetes.io/enforce"
# Pod Security levels, weakest last.
LEVELS = ("restricted", "baseline", "privileged")

WEAKER_NAMESPACES_PROPERTY = {
    "type": "array",
    "default": [],
    "description": "Namespaces that enforce a level weaker than restricted, each with the level and why (the node "
    "agents that run there).",
    "items": {
        "type": "object",
        "properties": {
            "namespace": {"type": "string", "minLength": 1},
            "level": {"type": "string", "enum": ["baseline", "privileged"]},
            "reason": {"type": "string", "minLength": 1},
        },
        "required": ["namespace", "level", "reason"],
        "additionalProperties": False,
    },
}


def _check_namespace_labels(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    name = get(args.props, "metadata", "name")
    labels = get(args.props, "metadata", "labels")
    level = get(labels, ENFORCE) if isinstance(labels, Mapping) else None
    if level is UNKNOWN or name is UNKNOWN:
        return
    where = f"Namespace {name}"
    if level is None:
        report(f"{where}: no {ENFORCE} label, so the API server admits any pod there; label it restricted")
        return
    if level not in LEVELS:
        report(f"{where}: {ENFORCE}={level!r} is no Pod Security level ({', '.join(LEVELS)})")
        return
    if level == "restricted":
        return
    allowed = [e for e in settings["weakerNamespaces"] or []
               if isinstance(e, Mapping) and e.get("namespace") == name]
    if not any(LEVELS.index(level) <= LEVELS.index(str(e.get("level"))) for e in allowed if e.get("level") in LEVELS):
        granted = f" (its entry allows {allowed[0].get('level')})" if allowed else ""
        report(f"{where}: enforces {level}, weaker than restricted, and no weakerNamespaces entry allows it{granted}")


k8s_namespaces_enforce_pod_security = resource_rule(
    name="k8s-namespaces-enforce-pod-security",
    description="Every Namespace the stack creates carries the Pod Security Admission enforce label: restricted, or "
    "a weaker level only where the stack's policy config names the namespace, the level and why.",
    applies=frozenset({NAMESPACE}),
    check=_check_namespace_labels,
    config={"weakerNamespaces": WEAKER_NAMESPACES_PROPERTY},
    framework=cis_eks("4.2", "Pod Security Standards: apply the restricted policy through Pod Security Admission on "
                      "every namespace with workloads"),
    remediation="Label the namespace pod-security.kubernetes.io/enforce: restricted (with -version pinned to the "
    "cluster's); a node agent's namespace may enforce baseline or privileged with a weakerNamespaces entry in "
    "policies/config/<env>.json saying why.",
    tags=["kubernetes"],
)


def _check_default_namespace(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    if not pod_templates(args.props):
        args.not_applicable("no pod template")
    namespace = get(args.props, "metadata", "namespace")
    if namespace is UNKNOWN:
        return
    if namespace in (None, "", "default"):
        shown = "the default namespace" if namespace == "default" else \
            "no namespace (the provider's default namespace, `default` unless it names another)"
        report(f"{workload(args.resource_type, args.props, args.name)}: runs pods in {shown}; give it a namespace "
               "of its own")


k8s_no_workloads_in_default_namespace = resource_rule(
    name="k8s-no-workloads-in-default-namespace",
    description="No object that makes pods lives in the default namespace (or names none, which puts it there): "
    "every workload is in a namespace with its own Pod Security level, quota and network policy.",
    applies=pod_bearing,
    check=_check_default_namespace,
    framework=cis_eks("4.5.2", "The default namespace should not be used"),
    remediation="Set metadata.namespace to the tenant's or the component's namespace.",
    tags=["kubernetes"],
)


def _check_tokens(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    templates = pod_templates(args.props)
    if not templates:
        args.not_applicable("no pod template")
    for template in templates:
        automount = get(template.spec, "automountServiceAccountToken")
        if automount is UNKNOWN or flag(automount) is not None:
            continue
        report(f"{workload(args.resource_type, args.props, args.name)}: {template.path}.automountServiceAccountToken "
               "is not set, so the pod gets its service account's token by default; set it false, or true where the "
               "pod calls the API server")


k8s_service_account_tokens_where_needed = resource_rule(
    name="k8s-service-account-tokens-where-needed",
    description="Every pod template says whether it mounts a service-account token (automountServiceAccountToken), "
    "so a token reaches only the pods that call the API server: the default mounts one in every pod.",
    applies=pod_bearing,
    check=_check_tokens,
    framework=cis_eks("4.1.6", "Ensure that Service Account Tokens are only mounted where necessary"),
    remediation="Set automountServiceAccountToken: false on the pod template, or true on the pods that call the API "
    "server (a chart's controllers: components/addons/charts.py API_CLIENTS says why each needs one).",
    tags=["kubernetes"],
)

