"""The API server's own validation, where OpenAPI schemas cannot see it.

A schema checks each field on its own; the API server also checks fields against each
other (`ValidatePodSpec`, `ValidateSecurityContext`, `validateResourceRequirements`,
`ValidateDeploymentSpec` and friends in kubernetes/pkg/apis/core/validation and
apps/validation). Each rule here is one of those, with the API server's own message, so
an object that passes here is not refused for these reasons by a 1.34 cluster.

`problems(obj)` returns `Problem`s naming the object, the field, the rule and the
message; an empty list means the API server would accept what these rules cover.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

# An object larger than this is refused by etcd ("request is too large").
MAX_OBJECT_BYTES = 1_572_864
# Total size of an object's annotations (ValidateAnnotationsSize).
MAX_ANNOTATIONS_BYTES = 262_144

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
IANA_SVC_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUANTITY = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$")

# Kinds whose pod template's restartPolicy must be Always (ValidatePodTemplateSpec for
# controllers that keep pods running).
LONG_RUNNING = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController"}
APPS_SELECTOR = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet"}
NAMESPACED_NAME_KINDS_LABEL = {"Namespace", "Service"}  # names must be DNS-1123 labels
VOLUME_SOURCES = {
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
}
HOST_PATH_TYPES = {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                   "BlockDevice"}
TOLERATION_EFFECTS = {"", "NoSchedule", "PreferNoSchedule", "NoExecute"}
SELECTOR_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}


@dataclass(frozen=True)
class Problem:
    object: str  # Kind namespace/name
    field: str  # where, as the API server names it
    rule: str  # the validation function that refuses it
    message: str

    def __str__(self) -> str:
        return f"{self.object}: {self.field}: {self.message} ({self.rule})"


def object_label(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {namespace}{meta.get('name')}"


def problems(obj: Mapping[str, Any]) -> list[Problem]:
    label = object_label(obj)
    found = [Problem(label, field, rule, message) for field, rule, message in _object_rules(obj)]
    for path, spec in pod_specs(obj):
        found += [Problem(label, f"{path}.{field}" if field else path, rule, message)
                  for field, rule, message in _pod_spec_rules(spec, obj.get("kind"), path, _claim_volumes(obj, path))]
    return found


def _claim_volumes(obj: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A StatefulSet's volumeClaimTemplates, which its pods mount by the claim's name
    (ValidateStatefulSetSpec adds them to the template's volumes before it validates it)."""
    if obj.get("kind") != "StatefulSet" or path != "spec.template.spec":
        return {}
    claims = (obj.get("spec") or {}).get("volumeClaimTemplates") or []
    return {c["metadata"]["name"]: {"persistentVolumeClaim": {"claimName": c["metadata"]["name"]}}
            for c in claims if isinstance(c, Mapping) and isinstance(c.get("metadata"), Mapping)
            and c["metadata"].get("name")}


# --- The object ---------------------------------------------------------------------------


def _object_rules(obj: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    kind = obj.get("kind")
    size = len(json.dumps(obj, separators=(",", ":")))
    if size > MAX_OBJECT_BYTES:
        yield "", "etcd request size", f"object is {size} bytes; etcd refuses more than {MAX_OBJECT_BYTES}"
    if not name:
        yield "metadata.name", "ValidateObjectMeta", "Required value: name or generateName is required"
    elif kind in NAMESPACED_NAME_KINDS_LABEL and not (DNS1123_LABEL.match(name) and len(name) <= 63):
        yield "metadata.name", "ValidateObjectMeta", f"Invalid value: {name!r}: must be a DNS-1123 label"
    elif kind not in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding") and not (
            DNS1123_SUBDOMAIN.match(name) and len(name) <= 253):
        yield "metadata.name", "ValidateObjectMeta", f"Invalid value: {name!r}: must be a DNS-1123 subdomain"
    for key, value in (meta.get("labels") or {}).items():
        if not _qualified_key(str(key)):
            yield f"metadata.labels[{key}]", "ValidateLabels", "Invalid value: not a qualified name"
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            yield f"metadata.labels[{key}]", "ValidateLabels", f"Invalid value: {value!r}: not a valid label value"
    annotations = meta.get("annotations") or {}
    total = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if total > MAX_ANNOTATIONS_BYTES:
        yield ("metadata.annotations", "ValidateAnnotationsSize",
               f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes")
    for key, value in annotations.items():
        if not isinstance(value, str):
            yield f"metadata.annotations[{key}]", "ValidateAnnotations", "Invalid value: annotation values are strings"
    spec = obj.get("spec") or {}
    if kind in APPS_SELECTOR and isinstance(spec, Mapping):
        yield from _selector_rules(spec)
    if kind == "Service" and isinstance(spec, Mapping):
        yield from _service_rules(spec)


def _qualified_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and not (DNS1123_SUBDOMAIN.match(prefix) and len(prefix) <= 253):
        return False
    return bool(QUALIFIED_NAME.match(name)) and len(name) <= 63


def _selector_rules(spec: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, Mapping) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        yield "spec.selector", "ValidateDeploymentSpec", "Required value: empty selector is invalid for deployment"
        return
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            yield ("spec.template.metadata.labels", "ValidatePodTemplateSpecForReplicaSet",
                   "Invalid value: `selector` does not match template `labels`")
            return


def _service_rules(spec: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    ports = [p for p in spec.get("ports") or [] if isinstance(p, Mapping)]
    names = [p.get("name") for p in ports]
    if len(ports) > 1 and not all(names):
        yield "spec.ports", "ValidateService", "Required value: port names are required when a Service has many ports"
    if len([n for n in names if n]) != len({n for n in names if n}):
        yield "spec.ports", "ValidateService", "Duplicate value: port names must be unique"
    for i, port in enumerate(ports):
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            yield f"spec.ports[{i}].port", "ValidateService", f"Invalid value: {number!r}: must be 1-65535"


# --- Pod specs ----------------------------------------------------------------------------


def pod_specs(obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, pod spec) for every pod spec in an object, however deep its template."""
    found: list[tuple[str, Mapping[str, Any]]] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Mapping):
            if isinstance(value.get("containers"), list):
                found.append((path, value))
                return
            for key, child in value.items():
                walk(child, f"{path}.{key}")
        elif isinstance(value, list):
            for i, child in enumerate(value):
                walk(child, f"{path}[{i}]")

    if obj.get("kind") != "CustomResourceDefinition":  # a CRD's schema describes pods; it holds none
        walk(obj.get("spec"), "spec")
    return found


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for group in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(spec.get(group) or []):
            if isinstance(container, Mapping):
                yield f"{group}[{i}]", container


def _pod_spec_rules(spec: Mapping[str, Any], kind: Any, path: str,
                    claims: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    restart = spec.get("restartPolicy", "Always")
    if kind in LONG_RUNNING and restart != "Always":
        yield ("restartPolicy", "ValidatePodTemplateSpec",
               f"Unsupported value: {restart!r}: supported values: \"Always\"")
    if kind in ("Job", "CronJob") and restart not in ("OnFailure", "Never"):
        yield ("restartPolicy", "ValidateJobSpec",
               f"Unsupported value: {restart!r}: supported values: \"OnFailure\", \"Never\"")
    if spec.get("shareProcessNamespace") and spec.get("hostPID"):
        yield "securityContext.shareProcessNamespace", "validatePodSpecSecurityContext", \
            "Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled"
    volumes = {}
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name")
        if name in volumes:
            yield f"volumes[{i}].name", "ValidateVolumes", f"Duplicate value: {name!r}"
        volumes[name] = volume
        sources = [k for k in volume if k in VOLUME_SOURCES]
        if len(sources) != 1:
            message = "Forbidden: may not specify more than 1 volume type" if sources else \
                "Required value: must specify a volume type"
            yield f"volumes[{i}]", "validateVolumeSource", message
        host_path = volume.get("hostPath")
        if isinstance(host_path, Mapping) and str(host_path.get("type", "")) not in HOST_PATH_TYPES:
            yield f"volumes[{i}].hostPath.type", "validateHostPathType", \
                f"Unsupported value: {host_path.get('type')!r}"
    volumes.update(claims)  # the controller's claim wins over a template volume of the same name
    names: set[str] = set()
    host_network = bool(spec.get("hostNetwork"))
    for where, container in containers(spec):
        yield from ((f"{where}.{f}" if f else where, r, m)
                    for f, r, m in _container_rules(container, names, volumes, host_network, where))
    yield from _toleration_rules(spec.get("tolerations") or [])
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for t, term in enumerate(required.get("nodeSelectorTerms") or []):
        for e, expression in enumerate(term.get("matchExpressions") or []):
            yield from ((f"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{t}]"
                         f".matchExpressions[{e}].{f}", r, m) for f, r, m in _requirement_rules(expression))


def _requirement_rules(expression: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    operator, values = expression.get("operator"), expression.get("values") or []
    if operator not in SELECTOR_OPERATORS:
        yield ("operator", "ValidateNodeSelectorRequirement",
               f"Invalid value: {operator!r}: not a valid selector operator")
    elif operator in ("In", "NotIn") and not values:
        yield ("values", "ValidateNodeSelectorRequirement",
               "Required value: must be specified when `operator` is 'In' or 'NotIn'")
    elif operator in ("Exists", "DoesNotExist") and values:
        yield ("values", "ValidateNodeSelectorRequirement",
               "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")


def _toleration_rules(tolerations: list[Any]) -> Iterator[tuple[str, str, str]]:
    for i, toleration in enumerate(tolerations):
        if not isinstance(toleration, Mapping):
            continue
        where = f"tolerations[{i}]"
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" and toleration.get("value"):
            yield (f"{where}.operator", "ValidateTolerations",
                   "Invalid value: value must be empty when `operator` is 'Exists'")
        if operator not in ("Equal", "Exists"):
            yield f"{where}.operator", "ValidateTolerations", f"Unsupported value: {operator!r}"
        if not toleration.get("key") and operator != "Exists":
            yield (f"{where}.operator", "ValidateTolerations",
                   "Invalid value: operator must be Exists when `key` is empty")
        effect = toleration.get("effect", "")
        if effect not in TOLERATION_EFFECTS:
            yield f"{where}.effect", "ValidateTolerations", f"Unsupported value: {effect!r}"
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            yield f"{where}.effect", "ValidateTolerations", \
                "Invalid value: effect must be 'NoExecute' when `tolerationSeconds` is set"


def _container_rules(container: Mapping[str, Any], names: set[str], volumes: Mapping[str, Any], host_network: bool,
                     where: str) -> Iterator[tuple[str, str, str]]:
    name = str(container.get("name") or "")
    if not DNS1123_LABEL.match(name):
        yield "name", "validateContainers", f"Invalid value: {name!r}: must be a DNS-1123 label"
    if name in names:
        yield "name", "validateContainers", f"Duplicate value: {name!r}"
    names.add(name)
    if not container.get("image") and not where.startswith("ephemeral"):
        yield "image", "validateContainers", "Required value"
    port_names: set[str] = set()
    for i, port in enumerate(container.get("ports") or []):
        port_name = port.get("name")
        if port_name:
            if len(port_name) > 15 or not IANA_SVC_NAME.match(port_name):
                yield (f"ports[{i}].name", "validateContainerPorts",
                       f"Invalid value: {port_name!r}: must be an IANA_SVC_NAME (at most 15 characters)")
            if port_name in port_names:
                yield f"ports[{i}].name", "validateContainerPorts", f"Duplicate value: {port_name!r}"
            port_names.add(port_name)
        number = port.get("containerPort")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            yield f"ports[{i}].containerPort", "validateContainerPorts", f"Invalid value: {number!r}: must be 1-65535"
        if host_network and port.get("hostPort") not in (None, number):
            yield f"ports[{i}].hostPort", "validateHostNetwork", \
                "Invalid value: must match `containerPort` when `hostNetwork` is true"
    mount_paths: set[str] = set()
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if mount.get("name") not in volumes:
            yield f"volumeMounts[{i}].name", "ValidateVolumeMounts", f"Not found: {mount.get('name')!r}"
        path = mount.get("mountPath")
        if path in mount_paths:
            yield f"volumeMounts[{i}].mountPath", "ValidateVolumeMounts", "Invalid value: must be unique"
        mount_paths.add(path)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        yield from _probe_rules(container.get(probe), probe)
    yield from _resource_rules(container.get("resources") or {})
    yield from _security_context_rules(container.get("securityContext") or {})


def _probe_rules(probe: Any, field: str) -> Iterator[tuple[str, str, str]]:
    if not isinstance(probe, Mapping):
        return
    handlers = [h for h in ("exec", "httpGet", "tcpSocket", "grpc") if probe.get(h) is not None]
    if len(handlers) != 1:
        yield field, "validateHandler", "Required value: must specify a handler type" if not handlers else \
            "Forbidden: may not specify more than 1 handler type"
    if field in ("livenessProbe", "startupProbe") and probe.get("successThreshold", 1) != 1:
        yield f"{field}.successThreshold", "validateProbe", "Invalid value: must be 1"


def parse_quantity(text: Any) -> Decimal | None:
    """A resource quantity's value (`500m` -> 0.5, `2Gi` -> 2147483648); None when it is
    not a quantity the API server would parse."""
    value = str(text).strip()
    if not QUANTITY.match(value):
        return None
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": Decimal("1e-9"),
                "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                "P": 10**15, "E": 10**18}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if value.endswith(suffix) and not value.endswith(("e" + suffix, "E" + suffix)):
            try:
                return Decimal(value[: -len(suffix)]) * Decimal(suffixes[suffix])
            except InvalidOperation:
                return None
    try:
        return Decimal(value)
    except InvalidOperation:
        return None


def _resource_rules(resources: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for group, values in (("requests", requests), ("limits", limits)):
        for resource, quantity in values.items():
            if parse_quantity(quantity) is None:
                yield f"resources.{group}[{resource}]", "ValidateResourceQuantityValue", \
                    f"Invalid value: {quantity!r}: quantities must match the regular expression"
    for resource, request in requests.items():
        request_value = parse_quantity(request)
        limit = limits.get(resource)
        limit_value = parse_quantity(limit) if limit is not None else None
        if resource.startswith("hugepages-"):
            if limit_value is None or request_value != limit_value:
                yield f"resources.requests[{resource}]", "validateResourceRequirements", \
                    f"Invalid value: {request!r}: must be equal to {resource} limit"
        elif "/" in resource and "kubernetes.io/" not in resource:
            if limit_value is None or request_value != limit_value:
                yield f"resources.requests[{resource}]", "validateResourceRequirements", \
                    f"Invalid value: {request!r}: must be equal to {resource} limit (extended resources are not " \
                    "overcommitted)"
        elif limit_value is not None and request_value is not None and request_value > limit_value:
            yield f"resources.requests[{resource}]", "validateResourceRequirements", \
                f"Invalid value: {request!r}: must be less than or equal to {resource} limit of {limit}"
    if any(r.startswith("hugepages-") for r in {**requests, **limits}) and not (
            "cpu" in limits or "memory" in limits or "cpu" in requests or "memory" in requests):
        yield "resources", "validateResourceRequirements", \
            "Forbidden: HugePages require cpu or memory"


def _security_context_rules(sc: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    if sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged") is True:
            yield "securityContext", "ValidateSecurityContext", \
                "Invalid value: cannot set `allowPrivilegeEscalation` to false and `privileged` to true"
        for cap in ((sc.get("capabilities") or {}).get("add") or []):
            if cap == "CAP_SYS_ADMIN":
                yield "securityContext", "ValidateSecurityContext", \
                    "Invalid value: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"
    user = sc.get("runAsUser")
    if isinstance(user, int) and not 0 <= user <= 2**31 - 1:
        yield "securityContext.runAsUser", "ValidateSecurityContext", "Invalid value: must be between 0 and 2147483647"
    if sc.get("runAsNonRoot") is True and user == 0:
        # Accepted by the API server but refused by the kubelet at start: the pod never runs.
        yield "securityContext.runAsNonRoot", "kubelet verifyRunAsNonRoot", \
            "container's runAsUser breaks non-root policy: runAsNonRoot with runAsUser 0 never starts"
