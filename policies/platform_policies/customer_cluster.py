"""Rules for a stack on a customer's own in-country GPU cluster (issue 21): nothing of AWS,
object storage only at the customer's allow-listed endpoints over TLS, nothing reachable
from outside the cluster, and the object store's encryption at rest stated.

They judge only a customer-cluster stack: each takes `deployment` in its policy config,
`aws` by default (the rule declares itself not applicable, so AWS stacks are judged exactly
as before) and `customer-cluster` in policies/config/<env>.json of such a stack. Images and
charts from the customer's registry, by digest, are the Kubernetes rules' (kubernetes.py),
with that registry as their `allowedRegistries`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import yaml  # PyYAML, a dependency of the pulumi SDK the pack runs on
from pulumi_policy import ReportViolation, ResourceValidationArgs, StackValidationArgs

from .common import AWS_PROVIDER_TYPE, UNKNOWN, Settings, flag, get, is_aws, items, resource_rule, stack_rule
from .controls import ENCRYPTED_AT_REST, IN_STATE, iso
from .kubernetes import ALLOW_LIST_PROPERTY, kubernetes_object
from .workloads import (
    HELM_CHART,
    HELM_RELEASE,
    containers,
    helm_flags,
    operator_images,
    operator_parts,
    pod_specs,
    workload,
)

CUSTOMER_CLUSTER = "customer-cluster"
DEPLOYMENT_PROPERTY = {
    "type": "string",
    "enum": ["aws", CUSTOMER_CLUSTER],
    "default": "aws",
    "description": "Where the stack runs: `aws` (the default; this rule does not apply) or `customer-cluster` (the "
    "cluster layer on a customer's own in-country cluster: the rule applies). Every customer-cluster rule of a "
    "stack's config says the same.",
}
DEPLOYMENT_SCHEMA = {"deployment": DEPLOYMENT_PROPERTY}
TAG = "customer-cluster"

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SECRETS = "kubernetes:core/v1:Secret"  # the type of Kubernetes Secrets
KUBERNETES_PROVIDER = "pulumi:providers:kubernetes"


def _customer_cluster_only(args: Any, settings: Settings) -> None:
    if settings["deployment"] != CUSTOMER_CLUSTER:
        args.not_applicable(f"judges customer-cluster stacks only (deployment: {settings['deployment']})")


def _label(args: ResourceValidationArgs) -> str:
    return str(workload(args.resource_type, args.props, args.name))


# --- No AWS resource --------------------------------------------------------------------


def _check_no_aws(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    """Judges every resource, so the evidence counts all a customer-cluster stack holds."""
    _customer_cluster_only(args, settings)
    if not is_aws(args.resource_type):
        return
    what = "an AWS provider" if args.resource_type == AWS_PROVIDER_TYPE else "an AWS resource"
    report(f"{args.resource_type} '{args.name}' is {what}: a customer-cluster stack creates nothing in AWS, the "
           "platform and its data stay on the customer's own in-country infrastructure")


no_aws_resources_on_customer_cluster = resource_rule(
    name="no-aws-resources-on-customer-cluster",
    description="A customer-cluster stack has no `aws:` resource and no AWS provider: the platform runs on the "
    "customer's own cluster, storage and registry in the country, not in an AWS region.",
    applies=lambda _resource_type: True,
    check=_check_no_aws,
    config=DEPLOYMENT_SCHEMA,
    framework=IN_STATE,
    remediation="Remove the resource (and the pulumi_aws import that made it) from the cluster layer; the "
    "customer-cluster descriptor in stack config names the customer's object store, registry and services instead.",
    tags=["residency", TAG],
)


# --- Object-store endpoints -------------------------------------------------------------

# Environment variables S3 clients read their endpoint from: boto3/botocore and the AWS CLI
# (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3), MLflow's artifact client, Feast's S3 registry,
# and the common S3_ENDPOINT_URL.
ENDPOINT_VARIABLES = frozenset({"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "MLFLOW_S3_ENDPOINT_URL",
                                "FEAST_S3_ENDPOINT_URL", "S3_ENDPOINT_URL"})
# Keys that hold an endpoint in configuration files (Feast's feature_store.yaml
# `s3_endpoint_override`, boto-style `endpoint_url`) and in the platform ConfigMap.
ENDPOINT_KEYS = ENDPOINT_VARIABLES | {"s3_endpoint_override", "s3_endpoint_url", "endpoint_url", "endpointUrl",
                                      "objectStore.endpoint"}
# MLflow server flags whose value is where artifacts go.
ARTIFACT_FLAGS = ("--artifacts-destination", "--default-artifact-root")
# Object stores of other clouds, whose SDKs never read an S3 endpoint.
FOREIGN_STORE = re.compile(r"\b(?:gs|gcs|wasbs?|abfss?|az|azure|oss|cos)://[^\s'\"`,;]+")
S3_URI = re.compile(r"\bs3a?://[^\s'\"`,;]+")
# Triton's form for an S3-compatible store: s3://https://host:port/bucket/path.
S3_WITH_ENDPOINT = re.compile(r"\bs3://(https?://[^/\s'\"`]+)")

ENDPOINTS_SCHEMA = {
    **DEPLOYMENT_SCHEMA,
    "allowedEndpoints": {
        "type": "array",
        "items": {"type": "string", "pattern": "^https://[^/?#@\\s]+/?$"},
        "default": [],
        "description": "The customer's object-store endpoints, each https://<host>[:<port>] (port 443 unless "
        "named). Empty by default: no endpoint is allowed.",
    },
}


def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


def _shown(value: str) -> str:
    """A URL as a message may show it: without credentials written into it (user:key@)."""
    return re.sub(r"(://)[^/@\s]*@", r"\1", value.strip())


def _endpoint_problem(value: str, allowed: list[str]) -> str | None:
    origin = _origin(value)
    if origin is None:
        return "is not an endpoint URL; write it as https://<host>[:<port>]"
    if origin[0] == "http":
        return "is plain http: the object store is reached only over TLS; use its https:// endpoint"
    if origin not in {_origin(entry) for entry in allowed}:
        return f"is not an allowed object-store endpoint (allowed: {allowed})"
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in items(value) if isinstance(v, str)]


def _flag_values(args: list[str], flags: tuple[str, ...]) -> Iterator[str]:
    for i, arg in enumerate(args):
        for name in flags:
            if arg == name and i + 1 < len(args):
                yield args[i + 1]
            elif arg.startswith(name + "="):
                yield arg[len(name) + 1:]


def _in_text(where: str, text: str) -> Iterator[tuple[str, str, str]]:
    """(kind, where, value) of what free text (env values, args, scripts) says about object
    storage: `endpoint` for s3://https://host URLs, `foreign` for another cloud's store."""
    for match in S3_WITH_ENDPOINT.finditer(text):
        yield "endpoint", where, match.group(1)
    for match in FOREIGN_STORE.finditer(text):
        yield "foreign", where, match.group(0)


def _in_config(where: str, value: Any) -> Iterator[tuple[str, str, str]]:
    """Endpoints in a parsed configuration document (YAML or JSON), at any depth."""
    if isinstance(value, Mapping):
        for key, child in value.items():
            if key in ENDPOINT_KEYS and isinstance(child, str):
                yield "endpoint", f"{where}.{key}", child
            else:
                yield from _in_config(f"{where}.{key}", child)
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _in_config(f"{where}[{i}]", child)
    elif isinstance(value, str):
        yield from _in_text(where, value)


def _in_data(where: str, key: str, text: str) -> Iterator[tuple[str, str, str]]:
    """One ConfigMap or Secret entry: an endpoint variable (for envFrom), or a file."""
    if key in ENDPOINT_KEYS:
        yield "endpoint", f"{where}[{key}]", text
        return
    if any(name in text for name in ENDPOINT_KEYS):
        try:
            document = yaml.safe_load(text)  # JSON is YAML too
        except yaml.YAMLError:
            document = None
        if isinstance(document, (Mapping, list)):
            yield from _in_config(f"{where}[{key}]", document)
            return
    yield from _in_text(f"{where}[{key}]", text)


def _data_entries(args: ResourceValidationArgs) -> Iterator[tuple[str, str, str]]:
    if args.resource_type == CONFIG_MAP:
        sources = [("data", get(args.props, "data"), False)]
    else:
        sources = [("stringData", get(args.props, "stringData"), False), ("data", get(args.props, "data"), True)]
    for field, data, encoded in sources:
        if not isinstance(data, Mapping):
            continue
        for key in data:
            value = get(data, key)
            if not isinstance(value, str):
                continue
            if encoded:
                try:
                    value = base64.b64decode(value, validate=True).decode()
                except (binascii.Error, UnicodeDecodeError):
                    continue
            yield from _in_data(field, str(key), value)


def _container_storage(spec_path: str, path: str, container: Any) -> tuple[list[tuple[str, str, str]], list[str], bool]:
    """What one container says about object storage: (kind, where, value) findings, the
    s3:// locations it uses, and whether it sets an endpoint (or may, through envFrom)."""
    where = f"{spec_path}.{path} ({get(container, 'name')})"
    found: list[tuple[str, str, str]] = []
    s3: list[str] = []
    has_endpoint = bool(items(get(container, "envFrom")))  # its ConfigMap or Secret is judged on its own
    for variable in items(get(container, "env")):
        name, value = get(variable, "name"), get(variable, "value")
        if name in ENDPOINT_VARIABLES:
            has_endpoint = True
            if isinstance(value, str):
                found.append(("endpoint", f"{where} env {name}", value))
            continue  # valueFrom: judged on the ConfigMap or Secret it names
        if isinstance(value, str):
            found.extend(_in_text(f"{where} env {name}", value))
            s3.extend(S3_URI.findall(value))
    words = _strings(get(container, "command")) + _strings(get(container, "args"))
    for destination in _flag_values(words, ARTIFACT_FLAGS):
        if destination.startswith(("http://", "https://")):
            found.append(("endpoint", f"{where} artifacts destination", destination))
    for word in words:
        found.extend(_in_text(f"{where} args", word))
        s3.extend(S3_URI.findall(word))
    s3 = [uri for uri in s3 if not S3_WITH_ENDPOINT.match(uri)]
    return found, s3, has_endpoint


def _helm_values_storage(values: Any, path: str = "values") -> Iterator[tuple[str, str, str]]:
    """Endpoints in a Helm release's values: endpoint keys, and `{name, value}` env entries."""
    if isinstance(values, Mapping):
        name, value = get(values, "name"), get(values, "value")
        if name in ENDPOINT_VARIABLES and isinstance(value, str):
            yield "endpoint", f"{path} {name}", value
        for key in values:
            child = get(values, key)
            if key in ENDPOINT_KEYS and isinstance(child, str):
                yield "endpoint", f"{path}.{key}", child
            elif isinstance(child, str):
                yield from _in_text(f"{path}.{key}", child)
            else:
                yield from _helm_values_storage(child, f"{path}.{key}")
    else:
        for i, child in enumerate(items(values)):
            yield from _helm_values_storage(child, f"{path}[{i}]")


def _check_endpoints(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    _customer_cluster_only(args, settings)
    if args.resource_type == HELM_CHART:
        args.not_applicable("helm.v4.Chart: judged on each object it renders")
    found: list[tuple[str, str, str]] = []
    missing: list[tuple[str, list[str]]] = []
    uses_storage = False  # a container uses s3:// locations, with its endpoint set
    if args.resource_type in (CONFIG_MAP, SECRETS):
        found = list(_data_entries(args))
    elif args.resource_type == HELM_RELEASE:
        found = list(_helm_values_storage(get(args.props, "values")))
    else:
        for spec_path, spec in pod_specs(args.props):
            for path, container in containers(spec):
                mine, s3, has_endpoint = _container_storage(spec_path, path, container)
                found.extend(mine)
                uses_storage = uses_storage or bool(s3)
                if s3 and not has_endpoint:
                    missing.append((f"{spec_path}.{path} ({get(container, 'name')})", s3))
    if not found and not uses_storage:
        args.not_applicable("names no object-store endpoint or location")
    allowed = list(settings["allowedEndpoints"])
    label = _label(args)
    for kind, where, value in found:
        if kind == "foreign":
            report(f"{label}: {where} uses {_shown(value)}, another cloud's object store; the platform's data goes only to "
                   f"the customer's S3-compatible store at an allowed endpoint {allowed}")
            continue
        problem = _endpoint_problem(value, allowed)
        if problem:
            report(f"{label}: {where} {_shown(value)} {problem}")
    for where, s3 in missing:
        report(f"{label}: {where} uses {s3[0]} but sets no object-store endpoint "
               f"({', '.join(sorted(ENDPOINT_VARIABLES))}): its S3 client would go to AWS S3; set "
               "AWS_ENDPOINT_URL_S3 to the customer's store")


object_store_endpoints_allowed = resource_rule(
    name="object-store-endpoints-allowed",
    description="On a customer-cluster stack, every object-store endpoint in pod templates (env such as "
    "AWS_ENDPOINT_URL_S3 or MLFLOW_S3_ENDPOINT_URL, an MLflow --artifacts-destination, Triton's "
    "s3://https://host/ form), in ConfigMaps and Secrets (Feast's s3_endpoint_override in feature_store.yaml, "
    "envFrom variables) and in Helm values is an https:// endpoint of the allow-list; plain http is refused on "
    "its own; a container that uses s3:// without an endpoint (its client would go to AWS S3) and another "
    "cloud's object store (gs://, wasbs://, abfss://, ...) are refused.",
    applies=lambda t: kubernetes_object(t) or t in (CONFIG_MAP, SECRETS),
    check=_check_endpoints,
    config=ENDPOINTS_SCHEMA,
    framework=IN_STATE,
    remediation="Take the endpoint from the customer-cluster descriptor (its object store's https:// endpoint, "
    "listed in allowedEndpoints of policies/config/<env>.json) and set AWS_ENDPOINT_URL_S3 (and "
    "MLFLOW_S3_ENDPOINT_URL for MLflow) on every container that reads or writes s3:// locations.",
    tags=["residency", "encryption-in-transit", TAG],
)


# --- Nothing exposed outside the cluster -------------------------------------------------

SERVICE = "kubernetes:core/v1:Service"
INGRESSES = frozenset({"kubernetes:networking.k8s.io/v1:Ingress", "kubernetes:networking.k8s.io/v1beta1:Ingress",
                       "kubernetes:extensions/v1beta1:Ingress"})
GATEWAYS = frozenset(f"kubernetes:gateway.networking.k8s.io/{v}:Gateway" for v in ("v1", "v1beta1"))
GATEWAY_CLASSES = frozenset(f"kubernetes:gateway.networking.k8s.io/{v}:GatewayClass" for v in ("v1", "v1beta1"))
ENVOY_PROXY = "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy"
ENVOY_CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
EXPOSING_SERVICE_TYPES = {
    "LoadBalancer": "asks the cluster's load-balancer controller (MetalLB, kube-vip, a hardware balancer) for an "
                    "address outside the cluster",
    "NodePort": "opens its ports on every node's own address",
}

NODE_AGENTS_SCHEMA = {
    **DEPLOYMENT_SCHEMA,
    "allowedNodeAgents": {
        **ALLOW_LIST_PROPERTY,
        "description": "Node agents that may use the host network or host ports, each with the reason a reviewer "
        "accepted (kind is the object's kind, or Release for a Helm release). Services, Ingresses and Gateways are "
        "never allow-listed here.",
    },
}


def _node_agent(args: ResourceValidationArgs, settings: Settings) -> str | None:
    """The reason an allow-listed node agent may use the host network, or None."""
    this = workload(args.resource_type, args.props, args.name)
    for entry in settings["allowedNodeAgents"] or []:
        if isinstance(entry, Mapping) and this.matches(entry):
            return f"allow-listed node agent {this}: {entry.get('reason')}"
    return None


def _service_exposure(props: Any) -> list[str]:
    problems = []
    service_type = get(props, "spec", "type")
    if isinstance(service_type, str) and service_type in EXPOSING_SERVICE_TYPES:
        problems.append(f"type {service_type} {EXPOSING_SERVICE_TYPES[service_type]}; use ClusterIP")
    addresses = [a for a in items(get(props, "spec", "externalIPs")) if a is not UNKNOWN]
    if addresses:
        problems.append(f"externalIPs {addresses} take traffic for addresses outside the cluster; remove them")
    return problems


def _envoy_proxy_exposure(props: Any) -> list[str]:
    provider = get(props, "spec", "provider")
    if get(provider, "type") not in (None, "Kubernetes", UNKNOWN):
        return []
    service = get(provider, "kubernetes", "envoyService")
    service_type = get(service, "type")
    problems = []
    if service_type is not UNKNOWN and service_type != "ClusterIP":
        said = f"envoyService.type {service_type}" if service_type else "no envoyService.type, so Envoy Gateway's " \
            "default LoadBalancer"
        problems.append(f"spec.provider.kubernetes: {said} gives each Gateway an address outside the cluster; set "
                        "envoyService.type: ClusterIP")
    patched = get(service, "patch", "value", "spec", "type")
    if isinstance(patched, str) and patched != "ClusterIP":
        problems.append(f"spec.provider.kubernetes.envoyService.patch sets the Service's type to {patched}; remove it")
    return problems


def _gateway_class_exposure(props: Any) -> list[str]:
    controller = get(props, "spec", "controllerName")
    if controller is UNKNOWN:
        return []
    if controller != ENVOY_CONTROLLER:
        return [f"controller {controller}: Gateway implementations give each Gateway a LoadBalancer Service unless "
                "told otherwise, and the pack can tell only Envoy Gateway's (an EnvoyProxy with envoyService.type "
                "ClusterIP); use Envoy Gateway, or exempt this class with the reason its Gateways stay inside"]
    ref = get(props, "spec", "parametersRef")
    if get(ref, "kind") != "EnvoyProxy" or get(ref, "group") != "gateway.envoyproxy.io":
        return ["spec.parametersRef names no EnvoyProxy, so Envoy Gateway gives each Gateway of this class a "
                "LoadBalancer Service; point it at an EnvoyProxy whose envoyService.type is ClusterIP"]
    return []


def _port(value: Any) -> Any:
    try:
        return int(float(value))  # the engine sends numbers as floats
    except (TypeError, ValueError):
        return value


def _pod_exposure(args: ResourceValidationArgs) -> list[str]:
    problems = []
    specs = pod_specs(args.props)
    for spec_path, spec in specs:
        if flag(get(spec, "hostNetwork")) is True:
            problems.append(f"{spec_path}.hostNetwork is true: the pod listens on the node's own addresses, outside "
                            "the cluster's network (and its network policies)")
        for path, container in containers(spec):
            for i, port in enumerate(items(get(container, "ports"))):
                host_port = _port(get(port, "hostPort"))
                if host_port not in (None, UNKNOWN, 0):
                    problems.append(f"{spec_path}.{path} ({get(container, 'name')}) ports[{i}].hostPort {host_port} "
                                    "opens the port on the node's own address")
    if not specs:
        # An operator's custom resource: the pods its operator makes (a ClusterPolicy
        # component switched to hostNetwork).
        for path, part in operator_parts(args.resource_type, args.props):
            problems.extend(f"{flagged} is true: the operator runs those pods on the node's own network"
                            for flagged in helm_flags(part, frozenset({"hostNetwork"}), path))
    return problems


def _check_exposure(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    _customer_cluster_only(args, settings)
    kind, props = args.resource_type, args.props
    label = _label(args)
    if kind == HELM_CHART:
        args.not_applicable("helm.v4.Chart: judged on each object it renders")
    if kind == SERVICE:
        problems = _service_exposure(props)
    elif kind in INGRESSES:
        problems = ["an Ingress is a way in from outside the cluster; serve through the in-cluster gateway, which the "
                    "customer's own network fronts"]
    elif kind in GATEWAYS:
        addresses = items(get(props, "spec", "addresses"))
        problems = [f"spec.addresses asks for addresses outside the cluster "
                    f"({[get(a, 'value') for a in addresses]}); remove them"] if addresses else []
    elif kind in GATEWAY_CLASSES:
        problems = _gateway_class_exposure(props)
    elif kind == ENVOY_PROXY:
        problems = _envoy_proxy_exposure(props)
    elif kind == HELM_RELEASE:
        values = get(props, "values")
        if not isinstance(values, Mapping):
            args.not_applicable("Helm release without values")
        problems = [] if _node_agent(args, settings) is not None else \
            [f"{path} is true: the chart's pods would listen on the node's own addresses"
             for path in helm_flags(values, frozenset({"hostNetwork"}))]
        problems += [f"{path} is {value}: the chart's Service would be reachable from outside the cluster"
                     for path, value in _helm_service_types(values)]
    else:
        if not pod_specs(props) and not operator_images(kind, props):
            args.not_applicable("no Service, Ingress, Gateway or pod")
        agent = _node_agent(args, settings)
        if agent is not None:
            args.not_applicable(agent)
        problems = _pod_exposure(args)
    for problem in problems:
        report(f"{label}: {problem}")


def _helm_service_types(values: Any, path: str = "values") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(values, Mapping):
        for key in values:
            child = get(values, key)
            if key == "type" and isinstance(child, str) and child in EXPOSING_SERVICE_TYPES:
                found.append((f"{path}.type", child))
            elif isinstance(child, Mapping) or items(child):
                found.extend(_helm_service_types(child, f"{path}.{key}"))
    else:
        for i, child in enumerate(items(values)):
            found.extend(_helm_service_types(child, f"{path}[{i}]"))
    return found


# Node agents. On bare metal nothing stands between a node's own addresses and the
# customer's network (no security groups; network policies do not cover the host network),
# so a pod on the host network, or a host port, is reachable from outside the cluster. No
# node agent is excepted by default:
# - the GPU Operator's and the Network Operator's node daemons (driver and DOCA driver
#   containers, container toolkit, device plugins, RDMA shared device plugin, CNI plugins)
#   are not objects of the stack: the operators make them at run time from the ClusterPolicy
#   and NicClusterPolicy, which this rule judges (a ClusterPolicy component switched to
#   hostNetwork is refused; the Network Operator's daemons use the host network by its own
#   design, which no field of a NicClusterPolicy changes, and listen for no client);
# - what the charts render for them runs off the host network (the operators' Deployments,
#   node-feature-discovery's master, worker and gc: hostNetwork false in both charts);
# - the Prometheus node exporter does use it by default (kube-prometheus-stack:
#   hostNetwork true, listening on the node's address on 9100): run it with hostNetwork false
#   on a customer's cluster, or allow-list it by name with the reason.
# allowedNodeAgents is for such a case, each by kind, namespace and name with the reason.


nothing_exposed_outside_the_cluster = resource_rule(
    name="nothing-exposed-outside-the-cluster",
    description="On a customer-cluster stack nothing is reachable from outside the cluster: no LoadBalancer or "
    "NodePort Service and no externalIPs, no Ingress, no Gateway asking for addresses, Envoy Gateway's proxies "
    "behind ClusterIP (an EnvoyProxy with envoyService.type ClusterIP, named by the GatewayClass; other Gateway "
    "controllers are refused, as they default to LoadBalancer), and no pod on the host network or with a host "
    "port, a GPU Operator ClusterPolicy component on the host network included. A node agent that needs the host "
    "network is allow-listed by name with the reason (allowedNodeAgents; none by default: the NVIDIA operators' "
    "node daemons are made by the operators at run time, not objects of the stack).",
    applies=kubernetes_object,
    check=_check_exposure,
    config=NODE_AGENTS_SCHEMA,
    framework=iso("A.8.22", "Segregation of networks: the platform is reachable only inside the customer's "
                  "cluster; the customer's own network decides what reaches it there."),
    remediation="Use ClusterIP Services; serve models through the in-cluster gateway (Envoy Gateway with an "
    "EnvoyProxy whose envoyService.type is ClusterIP) and let the customer's network front it; keep pods off the "
    "host network; allow-list a node agent that truly needs it in allowedNodeAgents of policies/config/<env>.json "
    "with the reason.",
    tags=["exposure", TAG],
)


# --- Encryption at rest of the object store, stated ---------------------------------------

# The cluster layer writes the descriptor's facts about the customer's infrastructure here;
# the object store's encryption at rest is the storage's own, so the descriptor states it.
PLATFORM_NAMESPACE = "mlplat-system"
PLATFORM_CONFIG_MAP = "mlplat-platform"
ENCRYPTION_KEY = "objectStore.encryptionAtRest"
# Values that state no encryption.
NOT_ENCRYPTED = frozenset({"", "none", "no", "false", "off", "disabled", "unencrypted", "plaintext", "n/a", "na",
                           "unknown", "tbd", "todo", "-"})


def _is_platform_config_map(resource_type: str, props: Any) -> bool:
    return resource_type == CONFIG_MAP and get(props, "metadata", "name") == PLATFORM_CONFIG_MAP \
        and get(props, "metadata", "namespace") == PLATFORM_NAMESPACE


def _check_encryption_named(args: ResourceValidationArgs, report: ReportViolation, settings: Settings) -> None:
    _customer_cluster_only(args, settings)
    if not _is_platform_config_map(args.resource_type, args.props):
        args.not_applicable(f"not the platform ConfigMap {PLATFORM_NAMESPACE}/{PLATFORM_CONFIG_MAP}")
    stated = get(args.props, "data", ENCRYPTION_KEY)
    if stated is UNKNOWN:
        return
    where = f"ConfigMap {PLATFORM_NAMESPACE}/{PLATFORM_CONFIG_MAP}"
    if stated is None:
        report(f"{where} has no data[{ENCRYPTION_KEY}]: state how the customer's object store encrypts data at rest")
    elif not isinstance(stated, str) or stated.strip().lower() in NOT_ENCRYPTED:
        report(f"{where}: data[{ENCRYPTION_KEY}] is {stated!r}, which names no encryption: the object store must "
               "encrypt data at rest, and the descriptor says how (e.g. SSE-KMS with the customer's KMS, or "
               "self-encrypting disks)")


object_store_encryption_named = resource_rule(
    name="object-store-encryption-named",
    description="On a customer-cluster stack, the encryption at rest that the platform ConfigMap "
    f"({PLATFORM_NAMESPACE}/{PLATFORM_CONFIG_MAP}, data[{ENCRYPTION_KEY}]) states names a method: an empty "
    "value, or none, disabled, false and the like, is refused as the ConfigMap registers.",
    applies=frozenset({CONFIG_MAP}),
    check=_check_encryption_named,
    config=DEPLOYMENT_SCHEMA,
    framework=ENCRYPTED_AT_REST,
    remediation="State the object store's encryption at rest in the customer-cluster descriptor (how the "
    "customer's MinIO or Ceph RGW encrypts: e.g. SSE-KMS with the customer's KMS, or encrypted disks); the "
    "cluster layer writes it to the platform ConfigMap.",
    tags=["encryption", TAG],
)


def _check_encryption_stated(args: StackValidationArgs, report: Any, settings: Settings) -> None:
    _customer_cluster_only(args, settings)
    if any(_is_platform_config_map(r.resource_type, r.props) for r in args.resources):
        return  # what it states is object-store-encryption-named's, judged as it registers
    providers = [r.urn for r in args.resources if r.resource_type == KUBERNETES_PROVIDER]
    report(f"no ConfigMap {PLATFORM_NAMESPACE}/{PLATFORM_CONFIG_MAP} states the object store's encryption at rest "
           f"(data[{ENCRYPTION_KEY}]): a customer-cluster stack says how the customer's store encrypts the "
           "platform's data", providers[0] if providers else None)


object_store_encryption_stated = stack_rule(
    name="object-store-encryption-stated",
    description="A customer-cluster stack states how the customer's object store encrypts data at rest: it has the "
    f"platform ConfigMap {PLATFORM_NAMESPACE}/{PLATFORM_CONFIG_MAP} with data[{ENCRYPTION_KEY}] (what it says is "
    "object-store-encryption-named's). Reported on the stack's Kubernetes provider.",
    scope=frozenset({CONFIG_MAP, KUBERNETES_PROVIDER}),
    check=_check_encryption_stated,
    config=DEPLOYMENT_SCHEMA,
    framework=ENCRYPTED_AT_REST,
    remediation="State the object store's encryption at rest in the customer-cluster descriptor; the cluster layer "
    f"writes it as data[{ENCRYPTION_KEY}] of the ConfigMap {PLATFORM_NAMESPACE}/{PLATFORM_CONFIG_MAP}.",
    tags=["encryption", TAG],
)
