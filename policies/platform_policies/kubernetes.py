"""Kubernetes guardrails: where images come from, how they are pinned, what pods may ask
of the node (limits, GPUs, privilege, host namespaces, root)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import UNKNOWN, Settings, get, is_kubernetes, items, resource_rule
from .controls import cis_eks, iso
from .decoding import KnownProperties, _IdentityCache, known, serialized
from .pod_security import CONTROLS, Finding
from .pod_security import findings as pod_findings
from .workloads import (
    HELM_CHART,
    HELM_RELEASE,
    ImageRef,
    containers,
    helm_flags,
    helm_images,
    helm_root_requests,
    operator_images,
    operator_parts,
    parse_image,
    pin_problem,
    pod_images,
    pod_specs,
    pod_templates,
    registry_allowed,
    built_in,
    wildcard,
    workload,
)

HELM_TYPES = frozenset({HELM_RELEASE, HELM_CHART})


def _chart_objects_judged(args: ResourceValidationArgs) -> None:
    """A helm.v4.Chart's pods are judged on the objects it renders, each its own resource;
    judging its values as well would report one setting twice."""
    if args.resource_type == HELM_CHART:
        args.not_applicable("helm.v4.Chart: judged on each object it renders")


# Kinds that describe no pod and name no image: a CRD's schema mentions containers and
# images without holding any, and walking a few megabytes of schema costs the pack seconds.
NO_WORKLOAD_TYPES = frozenset({
    "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
    "kubernetes:core/v1:ConfigMap",
    "kubernetes:core/v1:Secret",
})


def kubernetes_object(resource_type: str) -> bool:
    return is_kubernetes(resource_type) and resource_type not in NO_WORKLOAD_TYPES


# Kubernetes' own kinds that hold a pod template; its other kinds (Services, roles, network
# policies, ...) never make a pod nor name an image, while any custom resource may.
POD_KINDS = frozenset({"Pod", "PodTemplate", "ReplicationController", "Deployment", "StatefulSet", "DaemonSet",
                       "ReplicaSet", "Job", "CronJob"})


def pod_bearing(resource_type: str) -> bool:
    """A Kubernetes object that may make pods or name images: a built-in workload kind, a
    custom resource, or a Helm release."""
    return kubernetes_object(resource_type) and (not built_in(resource_type)
                                                 or resource_type.rsplit(":", 1)[-1] in POD_KINDS)


# Three rules read each object's images; the pack hands them the same copy (decoding.known).
_IMAGES = _IdentityCache()


def _images(args: ResourceValidationArgs) -> list[tuple[str, ImageRef]]:
    """Images an object makes the cluster pull: its pods' containers, a Helm release's
    values, or, for an object with no pod spec, what its operator deploys from it (the GPU
    Operator's ClusterPolicy, the Network Operator's NicClusterPolicy, an EnvoyProxy)."""
    data = serialized(args.props)
    if data is not None and b"image" not in data and b"repository" not in data:
        # Every image is read from an `image` or `repository` key (or a container's `image`),
        # and keys are verbatim in the bytes: an object with neither names none. Spares
        # decoding the many custom resources that make no pods (alert rules, monitors).
        return []
    props = known(args.props) if not isinstance(args.props, dict) else args.props
    if isinstance(props, KnownProperties):
        return _IMAGES.get(props, args.resource_type, lambda: _find_images(args.resource_type, props))
    return _find_images(args.resource_type, props)


def _find_images(resource_type: str, props: Any) -> list[tuple[str, ImageRef]]:
    if resource_type in HELM_TYPES:
        return helm_images(get(props, "values"))
    specs = pod_specs(props)
    if not specs:
        return operator_images(resource_type, props)
    found = []
    for spec_path, spec in specs:
        for path, image in pod_images(spec):
            if isinstance(image, str) and image:
                found.append((f"{spec_path}.{path}", parse_image(image)))
    return found


def _label(args: ResourceValidationArgs) -> str:
    return str(workload(args.resource_type, args.props, args.name))


# --- Registries -------------------------------------------------------------------------

REGISTRY_SCHEMA = {
    "allowedRegistries": {
        "type": "array",
        "items": {"type": "string", "minLength": 1, "pattern": r"^[^*?\[]+$"},
        "default": [],
        "description": "Registries images and charts may come from, each a host, optionally with a repository prefix: "
        "the environment's own account's ECR in its region (<account>.dkr.ecr.<region>.amazonaws.com), the region's "
        "EKS add-on registry only with the prefix of what EKS publishes, or a customer's registry project. Never a "
        "wildcard: an entry with one allows nothing. Default: none (the stack's config names its account).",
    },
}


# The EKS add-on registries (the accounts AWS publishes EKS's own images from: 759879836304
# in me-central-1, 602401143452 in most older regions) and the repositories EKS publishes
# there. An allow-list entry for such a registry must name one of these prefixes: the account
# also serves images no add-on of ours runs.
EKS_ADDON_ACCOUNTS = frozenset({"759879836304", "602401143452"})
EKS_PUBLISHED = ("eks", "amazon-k8s-cni", "amazon-k8s-cni-init", "amazon/aws-network-policy-agent")


def _too_broad(pattern: str) -> bool:
    host, _, prefix = pattern.partition("/")
    if wildcard(pattern):
        return True
    if host.split(".", 1)[0] in EKS_ADDON_ACCOUNTS and ".dkr.ecr." in host:
        return not any(prefix.strip("/") == p or prefix.startswith(p + "/") for p in EKS_PUBLISHED)
    return False


def _allowed_registries(settings: Settings) -> tuple[list[str], str]:
    """The allow-list, and a note on entries it ignores: wildcards, and an EKS add-on
    registry without the prefix of what EKS publishes."""
    allowed = [str(p) for p in settings["allowedRegistries"] or []]
    ignored = [p for p in allowed if _too_broad(p)]
    note = (f" (ignored: {', '.join(ignored)}; a registry is named by its account, never a wildcard, and the EKS "
            f"add-on registry only with the prefix of what EKS publishes: {', '.join(EKS_PUBLISHED)})"
            if ignored else "")
    return [p for p in allowed if not _too_broad(p)], note


def _check_registries(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    images = _images(args)
    if not images:
        args.not_applicable("names no container image")
    allowed, note = _allowed_registries(settings)
    for path, image in images:
        if not registry_allowed(image, allowed):
            report(f"{_label(args)}: {path} pulls {image.raw} from {image.host}, which is not an allowed registry "
                   f"{allowed}{note}")


k8s_images_from_allowed_registries = resource_rule(
    name="k8s-images-from-allowed-registries",
    description="Containers, Helm values and the custom resources operators make pods from (ClusterPolicy, "
    "NicClusterPolicy, EnvoyProxy, ...) pull images only from the allowed registries (by default the stack's "
    "in-region ECR; on a customer's cluster, its in-country registry), so no pod pulls code from outside the region.",
    applies=pod_bearing,
    check=_check_registries,
    config=REGISTRY_SCHEMA,
    framework=cis_eks("5.1.4", "Minimize Container Registries to only those approved"),
    remediation="Mirror the image into the in-region ECR (infra/versions.py IMAGES) and reference it through "
    "image_uri(); set every chart's image registry/repository to the mirror.",
    tags=["kubernetes", "residency"],
)


def _check_chart_sources(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    if args.resource_type not in HELM_TYPES:
        args.not_applicable("not a Helm chart or release")
    allowed, note = _allowed_registries(settings)
    chart = get(args.props, "chart")
    repository = get(args.props, "repositoryOpts", "repo")
    if chart is UNKNOWN or repository is UNKNOWN:
        return
    if isinstance(repository, str) and repository:
        report(f"{_label(args)}: chart {chart} is fetched from the chart repository {repository}; install it from "
               f"the stack's OCI mirror in an allowed registry ({allowed}){note}")
        return
    if not isinstance(chart, str) or not chart.startswith("oci://"):
        report(f"{_label(args)}: chart {chart!r} names no registry; install it from the stack's OCI mirror "
               f"(oci://<registry>/...; allowed: {allowed}){note}")
        return
    source = parse_image(chart.removeprefix("oci://"), tag_required=False)
    if not registry_allowed(source, allowed):
        report(f"{_label(args)}: chart {chart} comes from {source.host}, which is not an allowed registry "
               f"{allowed}{note}")


k8s_charts_from_allowed_registries = resource_rule(
    name="k8s-charts-from-allowed-registries",
    description="Helm charts are installed from an OCI repository in the allowed registries (by default the stack's "
    "in-region ECR; on a customer's cluster, its in-country registry), never from a chart repository abroad at "
    "deploy time.",
    applies=lambda resource_type: resource_type in HELM_TYPES,
    check=_check_chart_sources,
    config=REGISTRY_SCHEMA,
    framework=cis_eks("5.1.4", "Minimize Container Registries to only those approved"),
    remediation="Mirror the chart into the in-region ECR (`mlplat mirror`) and install it from "
    "oci://<account>.dkr.ecr.<region>.amazonaws.com/mlplat/<environment>/charts/<chart>.",
    tags=["kubernetes", "residency"],
)


# --- Pinned images ----------------------------------------------------------------------


PINNED_SCHEMA = {
    "awaitingPin": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"repository": {"type": "string", "minLength": 1},
                           "reason": {"type": "string", "minLength": 1}},
            "required": ["repository", "reason"],
            "additionalProperties": False,
        },
        "default": [],
        "description": "Mirrors whose digest is not pinned yet (a repository path, or its last segments), each with "
        "why: previews name them by tag meanwhile, and `mlplat mirror` and `pulumi up` refuse them until pinned. "
        "Empty by default.",
    },
}


def _awaiting_pin(image: Any, awaiting: list[Any]) -> bool:
    entries = [str(get(entry, "repository")).strip("/") for entry in awaiting]
    return any(image.path == entry or image.path.endswith("/" + entry) for entry in entries)


def _check_pinned(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    _chart_objects_judged(args)
    images = _images(args)
    if not images:
        args.not_applicable("names no container image")
    awaiting = list(settings["awaitingPin"])
    for path, image in images:
        if not image.digest and _awaiting_pin(image, awaiting):
            continue
        problem = pin_problem(image)
        if problem:
            report(f"{_label(args)}: {path} {image.raw} {problem}; reference it by digest "
                   "(<repository>:<tag>@sha256:<digest>)")


k8s_images_pinned = resource_rule(
    name="k8s-images-pinned",
    description="Images are referenced by digest, so a tag pushed again upstream never changes what runs.",
    applies=pod_bearing,
    check=_check_pinned,
    config=PINNED_SCHEMA,
    framework=iso("A.8.32", "Change management: what runs changes only through a reviewed change."),
    remediation="Reference images as <registry>/<repository>:<version>@sha256:<digest> (infra/versions.py pins "
    "every mirror's digest; image_uri() writes the reference).",
    tags=["kubernetes"],
)


# --- Resource limits --------------------------------------------------------------------

LIMITS_SCHEMA = {
    "requiredLimits": {
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "default": ["cpu", "memory"],
        "description": "Resources every container (init containers included) must set a limit for.",
    },
}


def _pod_specs_or_skip(args: ResourceValidationArgs) -> list[tuple[str, Any]]:
    if args.resource_type in HELM_TYPES:
        args.not_applicable("Helm release: its pod specs are rendered by the chart")
    specs = pod_specs(args.props)
    if not specs:
        args.not_applicable("no pod spec")
    return specs


def _check_limits(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    required = list(settings["requiredLimits"])
    for spec_path, spec in _pod_specs_or_skip(args):
        for path, container in containers(spec):
            if path.startswith("ephemeralContainers"):
                continue  # the API forbids resources on ephemeral containers
            limits = get(container, "resources", "limits")
            if limits is UNKNOWN:
                continue
            missing = [r for r in required if not isinstance(limits, Mapping) or get(limits, r) in (None, "")]
            if missing:
                report(f"{_label(args)}: {spec_path}.{path} ({get(container, 'name')}) has no {' or '.join(missing)} "
                       "limit")


k8s_containers_have_limits = resource_rule(
    name="k8s-containers-have-limits",
    description="Every container has CPU and memory limits, so no pod can starve its node's daemons.",
    applies=pod_bearing,
    check=_check_limits,
    config=LIMITS_SCHEMA,
    framework=iso("A.8.6", "Capacity management: use of resources is monitored and adjusted."),
    remediation="Set resources.limits (and requests) for cpu and memory on every container and init container.",
    tags=["kubernetes"],
)


# --- GPU pods ---------------------------------------------------------------------------

GPU_SCHEMA = {
    "gpuResource": {"type": "string", "default": "nvidia.com/gpu",
                    "description": "The extended resource GPU pods ask for."},
    "gpuTaintKey": {"type": "string", "default": "nvidia.com/gpu",
                    "description": "The taint GPU node pools carry (components/specs/nodepool.py)."},
    "gpuTaintEffect": {"type": "string", "default": "NoSchedule", "description": "The GPU taint's effect."},
}


def tolerates(tolerations: Any, key: str, effect: str) -> bool:
    for toleration in items(tolerations):
        if not isinstance(toleration, Mapping):
            continue
        their_key = get(toleration, "key")
        their_effect = get(toleration, "effect")
        operator = get(toleration, "operator") or "Equal"
        if their_effect not in (None, "", effect):
            continue
        if their_key in (None, "") and operator == "Exists":
            return True  # tolerates every taint
        if their_key == key:
            return True  # Exists, or Equal to the taint's value: either way this key is tolerated
    return False


def _check_gpu(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    gpu = settings["gpuResource"]
    judged = False
    for spec_path, spec in _pod_specs_or_skip(args):
        gpu_containers = [
            (path, c) for path, c in containers(spec)
            if get(c, "resources", "limits", gpu) is not None or get(c, "resources", "requests", gpu) is not None
        ]
        if not gpu_containers:
            continue
        judged = True
        for path, container in gpu_containers:
            limit = get(container, "resources", "limits", gpu)
            request = get(container, "resources", "requests", gpu)
            where = f"{_label(args)}: {spec_path}.{path} ({get(container, 'name')})"
            if limit is None:
                report(f"{where} requests {gpu} without a limit; GPUs are asked for as limits")
            elif request is not None and str(request) != str(limit):
                report(f"{where}: {gpu} request {request} differs from its limit {limit}; set only the limit")
        if not tolerates(get(spec, "tolerations"), settings["gpuTaintKey"], settings["gpuTaintEffect"]):
            report(f"{_label(args)}: {spec_path} asks for {gpu} but does not tolerate the "
                   f"{settings['gpuTaintKey']}:{settings['gpuTaintEffect']} taint, so it can never be scheduled on "
                   "a GPU node")
    if not judged:
        args.not_applicable(f"no container asks for {gpu}")


k8s_gpu_pods_use_limits_and_tolerate_taint = resource_rule(
    name="k8s-gpu-pods-use-limits-and-tolerate-taint",
    description="Pods that use GPUs ask for nvidia.com/gpu as limits (a request, if any, equal to the limit) and "
    "tolerate the GPU node taint.",
    applies=pod_bearing,
    check=_check_gpu,
    config=GPU_SCHEMA,
    framework=iso("A.8.6", "Capacity management: scarce GPU capacity is allotted only to pods that declare it."),
    remediation="Put nvidia.com/gpu under resources.limits and add the toleration {key: nvidia.com/gpu, operator: "
    "Exists, effect: NoSchedule}.",
    tags=["kubernetes"],
)


# --- Pod Security Standards ------------------------------------------------------------

_NAMED = {"type": "string", "minLength": 1}


def workload_entries(description: str, **extra: dict[str, Any]) -> dict[str, Any]:
    """A config property listing workloads: each {kind, namespace, name, ...extra, reason}, all
    required. kind is the object's kind, or Release for a helm.v3 Release's values."""
    properties = {"kind": _NAMED, "namespace": _NAMED, "name": _NAMED, **extra, "reason": _NAMED}
    return {"type": "array", "default": [], "description": description,
            "items": {"type": "object", "properties": properties, "required": list(properties),
                      "additionalProperties": False}}


ALLOW_LIST_PROPERTY = workload_entries("Workloads a rule does not judge, each with the reason a reviewer accepted.")
SYSTEM_WORKLOADS_PROPERTY = workload_entries(
    "Platform components that need more than the restricted profile (node agents, device plugins, CSI drivers, "
    "operators): each names the object, every image repository it runs (optionally @sha256:<digest>), the controls "
    "it may break and why. An object that matches the name but runs an image the entry does not name is judged in "
    "full.",
    images={"type": "array", "minItems": 1, "items": _NAMED},
    controls={"type": "array", "minItems": 1, "items": {"type": "string", "enum": sorted(CONTROLS)}},
)

# What Helm values and operators' custom resources may ask for, as the control each breaks.
VALUE_FLAGS = {"privileged": "privileged", "hostNetwork": "hostNamespaces", "hostPID": "hostNamespaces",
               "hostIPC": "hostNamespaces", "allowPrivilegeEscalation": "allowPrivilegeEscalation"}


def _repository(image: ImageRef) -> str:
    return f"{image.host}/{image.path}"


def _unnamed_images(entry: Mapping[str, Any], images: list[tuple[str, ImageRef]]) -> list[str]:
    """The images of an object that an exemption entry does not name (repository, and digest
    where the entry pins one)."""
    named = [parse_image(str(i), tag_required=False) for i in entry.get("images") or []]
    out = []
    for path, image in images:
        if not any(_repository(image) == _repository(n) and (n.digest is None or n.digest == image.digest)
                   for n in named):
            out.append(f"{path} {image.raw}")
    return out


def _exemption(args: ResourceValidationArgs, settings: Settings, images: list[tuple[str, ImageRef]],
               report: ReportViolation) -> frozenset[str]:
    """The controls an exemption waives for this object (none if it runs an image the
    matching entry does not name)."""
    this = workload(args.resource_type, args.props, args.name)
    for entry in settings["systemWorkloads"] or []:
        if not (isinstance(entry, Mapping) and this.matches(entry)):
            continue
        unnamed = _unnamed_images(entry, images)
        if unnamed:
            report(f"{this}: matches the pod-security exemption for {entry.get('kind')} {entry.get('namespace')}/"
                   f"{entry.get('name')} by name, but runs images it does not name ({'; '.join(unnamed)}): the "
                   "exemption does not apply")
            return frozenset()
        return frozenset(str(c) for c in entry.get("controls") or [])
    return frozenset()


def _value_findings(values: Any, path: str) -> list[Finding]:
    """What Helm values (or an operator's custom resource) ask of the pods they make."""
    found = [Finding(VALUE_FLAGS[where.rsplit(".", 1)[-1]], where, "is true")
             for where in helm_flags(values, frozenset(VALUE_FLAGS), path)]
    found += [Finding("runAsNonRoot" if where.endswith("runAsNonRoot") else "runAsUser", where, "asks to run as root")
              for where in helm_root_requests(values, path)]
    return found


def _check_pod_security(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    _chart_objects_judged(args)
    if args.resource_type in HELM_TYPES:
        values = get(args.props, "values")
        if not isinstance(values, Mapping):
            args.not_applicable("Helm release without values")
        found = [("", f) for f in _value_findings(values, "values")]
    else:
        templates = pod_templates(args.props)
        if templates:
            found = [(t.path, f) for t in templates for f in pod_findings(t)]
        else:
            parts = operator_parts(args.resource_type, args.props)
            if not parts:
                args.not_applicable("no pod template")
            found = [("", f) for path, part in parts for f in _value_findings(part, path)]
    waived = _exemption(args, settings, _images(args), report)
    for path, finding in found:
        if finding.control not in waived:
            report(f"{_label(args)}: {finding.describe(path)}")


k8s_pod_security_standards = resource_rule(
    name="k8s-pod-security-standards",
    description="Every pod template (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, JobSet, "
    "Rollout and any object holding a pod spec, init and ephemeral containers included, in every namespace) meets "
    "every control of the Kubernetes 1.34 restricted Pod Security profile; Helm values and operators' custom "
    "resources ask for nothing it forbids. Platform components that need more are exempted per object, image and "
    "control, with the reason.",
    applies=pod_bearing,
    check=_check_pod_security,
    config={"systemWorkloads": SYSTEM_WORKLOADS_PROPERTY},
    framework=cis_eks("4.2.1-4.2.9", "Pod Security Standards: privileged containers, host PID/IPC/network, "
                      "privilege escalation, root, NET_RAW and added capabilities (the restricted profile, whole)"),
    remediation="Set on the pod: securityContext {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}; on "
    "every container: securityContext {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}; no host "
    "namespaces, host ports, hostPath or other non-restricted volumes. A node agent that truly needs more goes in "
    "systemWorkloads of policies/config/<env>.json with its images, the controls it breaks and why.",
    tags=["kubernetes"],
)


# --- The feature server stays in the cluster ------------------------------------------

FEATURE_LABEL = "app.kubernetes.io/part-of"
FEATURE_PART = "mlplat-features"
FEATURE_SERVER = "feature-server"
SERVICE = "kubernetes:core/v1:Service"
INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
ROUTES = frozenset(f"kubernetes:gateway.networking.k8s.io/{v}:{k}" for v in ("v1", "v1beta1", "v1alpha2")
                   for k in ("HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute"))


def _backend_names(props: Any, kind: str) -> list[tuple[str, Any]]:
    """(path, service name) of every backend an Ingress or a Gateway API route sends to."""
    found = []
    if kind == INGRESS:
        default = get(props, "spec", "defaultBackend", "service", "name")
        if default is not None:
            found.append(("spec.defaultBackend", default))
        for i, rule in enumerate(items(get(props, "spec", "rules"))):
            for j, path in enumerate(items(get(rule, "http", "paths"))):
                found.append((f"spec.rules[{i}].http.paths[{j}]", get(path, "backend", "service", "name")))
    else:
        for i, rule in enumerate(items(get(props, "spec", "rules"))):
            for j, ref in enumerate(items(get(rule, "backendRefs"))):
                found.append((f"spec.rules[{i}].backendRefs[{j}]", get(ref, "name")))
    return found


def _check_feature_server(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    kind, props = args.resource_type, args.props
    if kind == SERVICE:
        labels = get(props, "metadata", "labels")
        name = get(props, "metadata", "name")
        if not (isinstance(labels, Mapping) and labels.get(FEATURE_LABEL) == FEATURE_PART) and name != FEATURE_SERVER:
            args.not_applicable("not a feature-store Service")
        where = f"Service {get(props, 'metadata', 'namespace')}/{name}"
        service_type = get(props, "spec", "type")
        if service_type not in (None, "ClusterIP", UNKNOWN):
            report(f"{where}: type {service_type} exposes the feature server outside the cluster; use ClusterIP")
        if items(get(props, "spec", "externalIPs")):
            report(f"{where}: externalIPs expose the feature server outside the cluster; remove them")
        return
    backends = [(path, n) for path, n in _backend_names(props, kind) if n == FEATURE_SERVER]
    if not backends:
        args.not_applicable("sends nothing to the feature server")
    for path, _ in backends:
        report(f"{kind.rsplit(':', 1)[-1]} {get(props, 'metadata', 'namespace')}/{get(props, 'metadata', 'name')}: "
               f"{path} routes to the feature server; it serves its tenant's pods inside the cluster only")


feature_server_in_cluster = resource_rule(
    name="feature-server-in-cluster",
    description="The feature store's servers are reached from inside the cluster only: their Services are "
    "ClusterIP without external IPs, and no Ingress or Gateway API route sends traffic to them.",
    applies=lambda t: t in (SERVICE, INGRESS) or t in ROUTES,
    check=_check_feature_server,
    framework=iso("A.8.22", "Segregation of networks: services are reachable only from the networks that need them."),
    remediation="Keep the feature server's Service ClusterIP; tenants' pods call it in-cluster "
    "(http://feature-server.<tenant>.svc:6566). Serve features to outside callers through the model's API.",
    tags=["kubernetes", "exposure"],
)
