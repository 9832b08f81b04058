"""ValidatingAdmissionPolicies evaluated as the API server evaluates them, with cel-python.

A request is refused by a policy when one of its bindings matches it and a validation
evaluates to false (its message, or its messageExpression's value), or fails to evaluate
under failurePolicy Fail. Matching follows the API: the policy's resource rules and
operations, then each binding's namespace and object selectors; the variables are
evaluated in order, each seeing the ones before it. `object`, `oldObject`, `request`
(operation and userInfo) and `namespaceObject` are bound; `params` is null (the
platform's policies take none).

`pod_refusals` runs the stack's own policies over the pods its workloads would create
(each from its template, in its namespace, as the controller that makes it), so a preview
refuses a platform workload that its own cluster would refuse.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.checks.apiserver import object_label, pod_specs
from infra.checks.crd_schema import cel_program

# The resource (plural) a kind is requested as; only kinds the platform's policies name.
RESOURCES = {"Pod": "pods", "Service": "services"}
# Who creates a workload's pods: the controller's own identity (kube-controller-manager
# runs each controller as its service account). A JobSet's pods come from its Jobs.
CREATORS = {
    "Job": "job-controller", "CronJob": "job-controller", "JobSet": "job-controller",
    "Deployment": "replicaset-controller", "ReplicaSet": "replicaset-controller",
    "Rollout": "replicaset-controller", "StatefulSet": "statefulset-controller",
    "DaemonSet": "daemon-set-controller",
}
DEPLOYER = "mlplat-deployer"  # whoever applies the stack (a pod the stack declares itself)


@dataclass(frozen=True)
class Request:
    operation: str = "CREATE"
    username: str = DEPLOYER
    subresource: str = ""

    def as_cel(self) -> dict[str, Any]:
        return {"operation": self.operation, "userInfo": {"username": self.username, "groups": []},
                "subResource": self.subresource}


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against labels; an absent or empty selector matches everything."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (op == "In" and (not present or labels[key] not in values)) \
                or (op == "NotIn" and present and labels[key] in values) \
                or (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def namespace_labels(namespace: Mapping[str, Any]) -> dict[str, str]:
    """A namespace's labels as the API server sees them: it adds kubernetes.io/metadata.name."""
    meta = namespace.get("metadata") or {}
    return {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": str(meta.get("name"))}


def _rule_matches(rule: Mapping[str, Any], obj: Mapping[str, Any], request: Request) -> bool:
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    resource = RESOURCES.get(str(obj.get("kind")), "")
    if request.subresource:
        resource = f"{resource}/{request.subresource}"

    def allows(field: str, value: str) -> bool:
        allowed = rule.get(field) or []
        return "*" in allowed or value in allowed

    return (allows("apiGroups", group) and allows("apiVersions", version) and allows("resources", resource)
            and allows("operations", request.operation))


def _matches(match: Mapping[str, Any] | None, obj: Mapping[str, Any], namespace: Mapping[str, Any] | None,
             request: Request, rules_required: bool) -> bool:
    match = match or {}
    rules = match.get("resourceRules")
    if rules_required or rules:
        if not any(_rule_matches(rule, obj, request) for rule in rules or []):
            return False
    if namespace is not None and not selector_matches(match.get("namespaceSelector"), namespace_labels(namespace)):
        return False
    return selector_matches(match.get("objectSelector"), (obj.get("metadata") or {}).get("labels") or {})


def _evaluate(expression: str, activation: Mapping[str, Any]) -> tuple[bool, Any]:
    """(ok, value): ok is False when the expression cannot be evaluated."""
    import celpy

    try:
        result = cel_program(expression).evaluate(dict(activation))
    except (celpy.CELParseError, celpy.CELEvalError) as err:
        return False, err
    if isinstance(result, celpy.CELEvalError):
        return False, result
    return True, result


def _as_error(value: Any) -> Any:
    import celpy

    return value if isinstance(value, celpy.CELEvalError) else celpy.CELEvalError(str(value))


def policy_refusals(policy: Mapping[str, Any], bindings: Sequence[Mapping[str, Any]], obj: Mapping[str, Any],
                    namespace: Mapping[str, Any] | None, request: Request = Request()) -> list[str]:
    """Why `policy` refuses the request for `obj` (empty: admitted or not matched)."""
    import celpy

    spec = policy.get("spec") or {}
    name = (policy.get("metadata") or {}).get("name")
    if not _matches(spec.get("matchConstraints"), obj, namespace, request, rules_required=True):
        return []
    bound = [b for b in bindings if (b.get("spec") or {}).get("policyName") == name
             and "Deny" in ((b.get("spec") or {}).get("validationActions") or [])
             and _matches((b.get("spec") or {}).get("matchResources"), obj, namespace, request, rules_required=False)]
    if not bound:
        return []
    fail_closed = spec.get("failurePolicy", "Fail") == "Fail"
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj), "oldObject": None, "request": celpy.json_to_cel(request.as_cel()),
        "namespaceObject": celpy.json_to_cel(namespace) if namespace is not None else None, "params": None,
    }
    for condition in spec.get("matchConditions") or []:
        ok, value = _evaluate(str(condition.get("expression")), activation)
        if ok and not bool(value):
            return []
    # A variable that fails holds its error, which CEL carries like a value: `false && e`
    # is false, any other use of it fails the expression, as when the API server evaluates
    # the variable where it is used.
    variables: dict[Any, Any] = {}
    for variable in spec.get("variables") or []:
        ok, value = _evaluate(str(variable["expression"]), {**activation, "variables": celpy.celtypes.MapType(variables)})
        variables[celpy.celtypes.StringType(variable["name"])] = value if ok else _as_error(value)
    activation["variables"] = celpy.celtypes.MapType(variables)
    refused = []
    for validation in spec.get("validations") or []:
        expression = str(validation.get("expression"))
        ok, value = _evaluate(expression, activation)
        if not ok:
            if fail_closed:
                reason = str(value.args[0]) if getattr(value, "args", None) else str(value)
                refused.append(f"{name}: {validation.get('message')} (its expression failed: {reason[:160]})")
            continue
        if bool(value):
            continue
        message = validation.get("message") or f"failed expression: {expression}"
        if validation.get("messageExpression"):
            said_ok, said = _evaluate(str(validation["messageExpression"]), activation)
            if said_ok and str(said).strip():
                message = str(said)
        refused.append(f"{name}: {message}")
    return refused


def refusals(policies: Sequence[Mapping[str, Any]], bindings: Sequence[Mapping[str, Any]], obj: Mapping[str, Any],
             namespace: Mapping[str, Any] | None, request: Request = Request()) -> list[str]:
    """Every policy's refusals of one request."""
    return [line for policy in policies for line in policy_refusals(policy, bindings, obj, namespace, request)]


def workload_pods(obj: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """(pod, creator) for each pod a workload object would have created."""
    kind = str(obj.get("kind"))
    if kind == "Pod":
        yield dict(obj), DEPLOYER
        return
    creator = CREATORS.get(kind)
    if creator is None:
        return
    meta = obj.get("metadata") or {}
    for _path, spec in pod_specs(obj):
        yield {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{meta.get('name')}-pod", "namespace": meta.get("namespace")},
               "spec": dict(spec)}, f"system:serviceaccount:kube-system:{creator}"


def pod_refusals(owned: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """What the stack's own admission policies would refuse among the pods and Services its
    objects make; `owned` are (owner, object) pairs. One line per refusal:
    `<owner>: <object>: <policy>: <message>`."""
    objects = [obj for _owner, obj in owned]
    policies = [o for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"]
    if not policies:
        return []
    bindings = [o for o in objects if o.get("kind") == "ValidatingAdmissionPolicyBinding"]
    namespaces = {(o.get("metadata") or {}).get("name"): o for o in objects if o.get("kind") == "Namespace"}

    def namespace_of(name: Any) -> dict[str, Any]:
        return namespaces.get(name) or {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}

    lines = []
    for owner, obj in owned:
        namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        requests = [(obj, DEPLOYER)] if obj.get("kind") == "Service" else list(workload_pods(obj))
        for request_obj, user in requests:
            found = refusals(policies, bindings, request_obj, namespace_of(namespace), Request("CREATE", user))
            lines += [f"{owner}: {object_label(obj)}: admission policy {line}" for line in found]
    return lines
