"""What a change opens, for a security reviewer: the security section that heads a preview
diff, and whether the change broadens access (`mlplat preview --against BASE
--require-approval broadening`).

Each resource's grants are read from its inputs in the base's and the head's reports, parsed,
never shown as strings:
- the statements of every IAM policy document an input holds (identity and inline policies,
  trust policies, bucket, key, queue, topic, repository and secret policies): effect,
  principal, actions, resources, conditions;
- attachments: managed policies on roles, EKS access entries and access policies, pod
  identity associations, ElastiCache users' access strings;
- security-group rules, inline or each its own resource: direction, protocol, ports, peer;
- Kubernetes RBAC: a role's rules, and a binding's subjects with the role they get;
- NetworkPolicy rules: direction, peer, ports;
- the pod settings a Pod Security review reads: privileged, privilege escalation, host
  namespaces, host paths and ports, added capabilities, root, the service account and its
  token.

Below the grants, the requests the change opens and closes: the project's IAM path table
and each tenant's paths, decided on both sides by the real evaluator
(infra/preview/request_paths.py). A path opened broadens access.

A grant the head adds broadens access unless the base already had one, where the grant
applies (the same role, bucket, security group, Kubernetes object), that covers it: an IAM
statement whose principals, action and resource patterns take in the new one's with no more
conditions; a rule over a wider CIDR or port range; an RBAC rule with more verbs, resources
or groups. A Deny the head removes broadens unless a Deny it adds covers it. So a change
that only narrows never trips the verdict. Values the reports mask stay masked: a policy
held as a secret is shown as `[secret]`, and any change to it counts as broadening, since
what it allows cannot be read.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from infra.checks.iam.stack import NotReadable, policy_document
from infra.preview.markdown import md_code, md_text
from infra.preview.request_paths import PathsDiff, path_diff

IAM, ATTACHMENT, SG_RULE = "IAM statement", "attachment", "security-group rule"
RBAC_RULE, RBAC_SUBJECT, NETPOL_RULE, POD = "RBAC rule", "RBAC subject", "NetworkPolicy rule", "pod setting"
KINDS = (IAM, ATTACHMENT, SG_RULE, RBAC_RULE, RBAC_SUBJECT, NETPOL_RULE, POD)
MASKED = "[secret]"
# Inputs read, however hostile the base report: policy documents up to this size, and this
# many statements, rules or subjects per resource (a real stack's largest is far below).
DOCUMENT_LIMIT = 256 << 10
GRANTS_PER_RESOURCE = 2_000
# And per report, with the coverage comparisons a diff may make (prod's two layers: about 730
# grants, a few thousand comparisons). Past either, what is left is not judged but counted as
# widening, with a line saying so: a pull request cannot hide a grant behind a flood of them.
GRANTS_PER_REPORT = 50_000
COMPARISONS = 2_000_000
MARKDOWN_BUDGET = 3_500  # characters of a stack's PR comment (half of its share, infra/preview/diff.py)
CELL = 160  # characters of one table cell

# Inputs that name what a grant applies to, so that a grant moved between two resources of
# the same target (an inline policy split in two, a rule resource replaced) is compared
# with the base's grants on that target.
TARGET_INPUTS = ("role", "bucket", "securityGroupId", "queueUrl", "repository", "keyId", "arn", "secretArn")
ROLE_KINDS = frozenset({"Role", "ClusterRole"})
BINDING_KINDS = frozenset({"RoleBinding", "ClusterRoleBinding"})
POD_TEMPLATES = {"Pod": ("spec",), "CronJob": ("spec", "jobTemplate", "spec", "template", "spec")}
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController",
                            "PodTemplate"})


@dataclass(frozen=True)
class Grant:
    kind: str
    scope: str  # what the grant applies to: coverage is judged among grants of one scope
    where: str  # the input that holds it
    columns: tuple[tuple[str, str], ...]  # (heading, value), as the tables show it
    key: str  # what is compared: the grant's canonical form
    deny: bool = False
    data: Any = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class GrantChange:
    sign: str  # "+" added, "-" removed
    resource: str  # the resource's label
    urn: str
    grant: Grant
    broadens: bool


@dataclass
class SecurityDiff:
    changes: list[GrantChange]
    unjudged: int = 0  # grants past the limits, counted as widening: to be reviewed by hand
    paths: PathsDiff = field(default_factory=PathsDiff)

    @property
    def broadening(self) -> bool:
        return self.unjudged > 0 or any(c.broadens for c in self.changes) or bool(self.paths.opened) \
            or self.paths.unjudged > 0

    def summary(self) -> str:
        opened, widened = len(self.paths.opened), sum(c.broadens for c in self.changes)
        if not self.changes and not self.unjudged and not opened and not self.paths.unjudged:
            return "security: nothing changes in who may do what"
        why = ([f"opens {opened} request path{'s' if opened != 1 else ''}"] if opened else []) + \
            ([f"{widened} grant{'s' if widened != 1 else ''} widened"] if widened else []) + \
            ([f"{self.paths.unjudged} changed request paths not decided"] if self.paths.unjudged else [])
        verdict = f"BROADENS access ({', '.join(why)})" if why else "does not broaden access"
        added = sum(c.sign == "+" for c in self.changes)
        judged = f"; {self.unjudged} grants past the diff's limits, not judged: review by hand" if self.unjudged else ""
        return f"security: {verdict}; {added} grants added, {len(self.changes) - added} removed{judged}"


# --- reading grants --------------------------------------------------------------------------


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    return sorted({v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values})


def _short(values: list[str], limit: int = 6) -> str:
    shown = ", ".join(values[:limit]) + (f", … ({len(values) - limit} more)" if len(values) > limit else "")
    return shown or "—"


def _policy_document(value: Any) -> Any:
    """The policy document a string input holds, or None when it holds none (read as the
    request paths read one: infra/checks/iam/stack.py)."""
    if not isinstance(value, str) or "Statement" not in value:
        return None
    try:
        document = policy_document(value, "", DOCUMENT_LIMIT)
    except NotReadable:
        return None
    return document if "Statement" in document else None


def _principals(value: Any) -> list[str]:
    if value == "*":
        return ["*"]
    if isinstance(value, dict):
        return sorted({f"{kind}:{p}" for kind, listed in value.items() for p in _listed(listed)})
    return _listed(value)


def _conditions(value: Any) -> dict[str, dict[str, list[str]]]:
    if not isinstance(value, dict):
        return {}
    return {str(op): {str(k): _listed(v) for k, v in keys.items()} if isinstance(keys, dict) else {"": _listed(keys)}
            for op, keys in value.items()}


def _statement(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "effect": str(raw.get("Effect", "")),
        "principal": _principals(raw.get("Principal")) if "Principal" in raw else None,
        "notPrincipal": _principals(raw.get("NotPrincipal")) if "NotPrincipal" in raw else None,
        "action": [a.lower() for a in _listed(raw.get("Action"))],
        "notAction": [a.lower() for a in _listed(raw.get("NotAction"))] if "NotAction" in raw else None,
        "resource": _listed(raw.get("Resource")),
        "notResource": _listed(raw.get("NotResource")) if "NotResource" in raw else None,
        "condition": _conditions(raw.get("Condition")),
    }


def _iam_grants(scope: str, where: str, document: dict[str, Any], holder: str) -> Iterator[Grant]:
    """The statements of a policy document; `holder` is who an identity policy's statements
    (no Principal) are granted to."""
    statements = document.get("Statement")
    for raw in statements if isinstance(statements, list) else [statements]:
        if not isinstance(raw, dict):
            continue
        s = _statement(raw)
        who = s["principal"] if s["principal"] is not None else (
            [f"NOT {p}" for p in s["notPrincipal"]] if s["notPrincipal"] is not None else [holder])
        actions = s["action"] if s["notAction"] is None else [f"NOT {a}" for a in s["notAction"]]
        resources = s["resource"] if s["notResource"] is None else [f"NOT {r}" for r in s["notResource"]]
        conditions = [f"{op} {key} {'|'.join(values)}".strip() for op, keys in sorted(s["condition"].items())
                      for key, values in sorted(keys.items())]
        yield Grant(IAM, scope, where, (("effect", s["effect"]), ("principal", _short(who)),
                                        ("actions", _short(actions)), ("resources", _short(resources)),
                                        ("conditions", _short(conditions, 3))),
                    json.dumps(s, sort_keys=True), deny=s["effect"].lower() == "deny", data=s)


def _policy_inputs(inputs: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, value) of the inputs that may hold a policy document: top-level strings, and
    the strings of a list of mappings one level down (a role's inlinePolicies)."""
    for key, value in inputs.items():
        if isinstance(value, str):
            yield str(key), value
        elif isinstance(value, list):
            for i, item in enumerate(value[:GRANTS_PER_RESOURCE]):
                if isinstance(item, dict):
                    for inner, text in item.items():
                        if isinstance(text, str):
                            yield f"{key}[{i}].{inner}", text


def _attachment(scope: str, where: str, what: str, to: str) -> Grant:
    return Grant(ATTACHMENT, scope, where, (("grants", what), ("to", to)), json.dumps([where, what, to]))


def _aws_grants(type_: str, inputs: dict[str, Any], scope: str) -> Iterator[Grant]:
    for path, value in _policy_inputs(inputs):
        if value == MASKED and path.lower().endswith("policy"):  # a policy held as a secret: unreadable
            yield Grant(IAM, scope, path, (("effect", "?"), ("principal", "?"), ("actions", MASKED),
                                           ("resources", "?"), ("conditions", "?")), json.dumps([path, MASKED]))
            continue
        document = _policy_document(value)
        if document is not None:
            holder = f"role {inputs['role']}" if isinstance(inputs.get("role"), str) else \
                f"role {inputs.get('name') or '(this one)'}" if type_.endswith(":Role") else "(who holds it)"
            yield from _iam_grants(scope, path, document, holder)
    name = type_.rsplit(":", 1)[-1]
    if name == "Role":
        for arn in _listed(inputs.get("managedPolicyArns")):
            yield _attachment(scope, "managedPolicyArns", arn, "this role")
    elif name == "RolePolicyAttachment":
        yield _attachment(scope, "policyArn", str(inputs.get("policyArn")), f"role {inputs.get('role')}")
    elif name == "AccessPolicyAssociation":
        access = inputs.get("accessScope") if isinstance(inputs.get("accessScope"), dict) else {}
        where = f"{access.get('type', '?')} {','.join(_listed(access.get('namespaces')))}".strip()
        yield _attachment(scope, "policyArn", f"{inputs.get('policyArn')} ({where})", str(inputs.get("principalArn")))
    elif name == "AccessEntry":
        for group in _listed(inputs.get("kubernetesGroups")) or ["(no group)"]:
            yield _attachment(scope, "kubernetesGroups", f"cluster access as {group}", str(inputs.get("principalArn")))
    elif name == "PodIdentityAssociation":
        yield _attachment(scope, "roleArn", str(inputs.get("roleArn")),
                          f"service account {inputs.get('namespace')}/{inputs.get('serviceAccount')}")
    elif name == "User" and "accessString" in inputs:  # ElastiCache
        yield _attachment(scope, "accessString", str(inputs.get("accessString")), f"user {inputs.get('userName')}")
    yield from _sg_grants(name, inputs, scope)


# --- security groups -----------------------------------------------------------------------


def _port(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a port of 1e400 in a hostile base
        return None


def _protocol(value: Any) -> str:
    text = str(value).lower()
    return {"6": "tcp", "17": "udp", "1": "icmp", "all": "-1"}.get(text, text)


def _sg_rule(scope: str, where: str, direction: str, protocol: Any, low: Any, high: Any, peer: str) -> Grant:
    rule = {"direction": direction, "protocol": _protocol(protocol), "from": _port(low), "to": _port(high),
            "peer": peer}
    ports = "all" if rule["protocol"] == "-1" else f"{rule['from']}-{rule['to']}"
    return Grant(SG_RULE, scope, where, (("direction", direction), ("protocol", rule["protocol"]),
                                         ("ports", ports), ("peer", peer)),
                 json.dumps(rule, sort_keys=True), data=rule)


def _peers(rule: dict[str, Any], keys: dict[str, str]) -> list[str]:
    found = []
    for key, label in keys.items():
        for value in _listed(rule.get(key)):
            found.append(f"{label}{value}")
    if rule.get("self") is True:
        found.append("sg:self")
    return found or ["(none)"]


_INLINE_PEERS = {"cidrBlocks": "", "ipv6CidrBlocks": "", "securityGroups": "sg:", "prefixListIds": "pl:"}
_RULE_PEERS = {"cidrBlocks": "", "ipv6CidrBlocks": "", "sourceSecurityGroupId": "sg:", "prefixListIds": "pl:"}
_VPC_PEERS = {"cidrIpv4": "", "cidrIpv6": "", "referencedSecurityGroupId": "sg:", "prefixListId": "pl:"}


def _sg_grants(name: str, inputs: dict[str, Any], scope: str) -> Iterator[Grant]:
    if name == "SecurityGroup":
        for direction in ("ingress", "egress"):
            rules = inputs.get(direction)
            for i, rule in enumerate(rules[:GRANTS_PER_RESOURCE] if isinstance(rules, list) else []):
                if isinstance(rule, dict):
                    for peer in _peers(rule, _INLINE_PEERS):
                        yield _sg_rule(scope, f"{direction}[{i}]", direction, rule.get("protocol"),
                                       rule.get("fromPort"), rule.get("toPort"), peer)
    elif name == "SecurityGroupRule":
        for peer in _peers(inputs, _RULE_PEERS):
            yield _sg_rule(scope, "rule", str(inputs.get("type")), inputs.get("protocol"), inputs.get("fromPort"),
                           inputs.get("toPort"), peer)
    elif name in ("SecurityGroupIngressRule", "SecurityGroupEgressRule"):
        direction = "ingress" if name == "SecurityGroupIngressRule" else "egress"
        for peer in _peers(inputs, _VPC_PEERS):
            yield _sg_rule(scope, "rule", direction, inputs.get("ipProtocol"), inputs.get("fromPort"),
                           inputs.get("toPort"), peer)


# --- Kubernetes ------------------------------------------------------------------------------


def _rbac_grants(kind: str, inputs: dict[str, Any], scope: str) -> Iterator[Grant]:
    if kind in ROLE_KINDS:
        rules = inputs.get("rules")
        for i, rule in enumerate(rules[:GRANTS_PER_RESOURCE] if isinstance(rules, list) else []):
            if not isinstance(rule, dict):
                continue
            data = {key: _listed(rule.get(key)) for key in ("apiGroups", "resources", "verbs", "resourceNames",
                                                             "nonResourceURLs")}
            yield Grant(RBAC_RULE, scope, f"rules[{i}]",
                        (("verbs", _short(data["verbs"])), ("resources", _short(data["resources"]
                                                                                 or data["nonResourceURLs"])),
                         ("api groups", _short(['""' if g == "" else g for g in data["apiGroups"]])),
                         ("names", _short(data["resourceNames"]) if data["resourceNames"] else "any")),
                        json.dumps(data, sort_keys=True), data=data)
    elif kind in BINDING_KINDS:
        ref = inputs.get("roleRef") if isinstance(inputs.get("roleRef"), dict) else {}
        role = f"{ref.get('kind', '?')} {ref.get('name', '?')}"
        subjects = inputs.get("subjects")
        for i, subject in enumerate(subjects[:GRANTS_PER_RESOURCE] if isinstance(subjects, list) else []):
            if not isinstance(subject, dict):
                continue
            who = f"{subject.get('kind', '?')} " + "/".join(str(subject[k]) for k in ("namespace", "name")
                                                           if subject.get(k))
            yield Grant(RBAC_SUBJECT, scope, f"subjects[{i}]", (("subject", who), ("gets", role)),
                        json.dumps([who, role]))


def _netpol_grants(inputs: dict[str, Any], scope: str) -> Iterator[Grant]:
    spec = inputs.get("spec") if isinstance(inputs.get("spec"), dict) else {}
    selected = json.dumps(spec.get("podSelector", {}), sort_keys=True)
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        rules = spec.get(direction)
        for i, rule in enumerate(rules[:GRANTS_PER_RESOURCE] if isinstance(rules, list) else []):
            if not isinstance(rule, dict):
                continue
            peers = rule.get(peers_key) if isinstance(rule.get(peers_key), list) else None
            ports = rule.get("ports") if isinstance(rule.get("ports"), list) else None
            for peer in [json.dumps(p, sort_keys=True) for p in peers] if peers else ["any"]:
                for port in [f"{p.get('protocol', 'TCP')}/{p.get('port', 'any')}"
                             + (f"-{p['endPort']}" if p.get("endPort") else "")
                             for p in ports if isinstance(p, dict)] if ports else ["any"]:
                    data = {"direction": direction, "pods": selected, "peer": peer, "port": port}
                    yield Grant(NETPOL_RULE, scope, f"spec.{direction}[{i}]",
                                (("direction", direction), ("pods", selected), ("peer", peer), ("port", port)),
                                json.dumps(data, sort_keys=True), data=data)


def _pod_spec(kind: str, inputs: dict[str, Any]) -> Any:
    path = POD_TEMPLATES.get(kind, ("spec", "template", "spec") if kind in WORKLOAD_KINDS else None)
    if path is None:
        return None
    spec: Any = inputs
    for step in path:
        spec = spec.get(step) if isinstance(spec, dict) else None
    return spec if isinstance(spec, dict) else None


def _pod_settings(spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key) is True:
            yield "pod", f"{key}: true"
    if spec.get("serviceAccountName"):
        yield "pod", f"service account {spec['serviceAccountName']}"
    if spec.get("automountServiceAccountToken") is True:
        yield "pod", "service-account token mounted"
    context = spec.get("securityContext") if isinstance(spec.get("securityContext"), dict) else {}
    if context.get("runAsNonRoot") is False or context.get("runAsUser") == 0:
        yield "pod", "may run as root"
    volumes = spec.get("volumes") if isinstance(spec.get("volumes"), list) else []
    for volume in volumes[:GRANTS_PER_RESOURCE]:
        if isinstance(volume, dict) and isinstance(volume.get("hostPath"), dict):
            yield "pod", f"hostPath {volume['hostPath'].get('path')}"
    for group in ("initContainers", "containers", "ephemeralContainers"):
        containers = spec.get(group) if isinstance(spec.get(group), list) else []
        for container in containers[:GRANTS_PER_RESOURCE]:
            if not isinstance(container, dict):
                continue
            name = str(container.get("name", "?"))
            context = container.get("securityContext") if isinstance(container.get("securityContext"), dict) else {}
            if context.get("privileged") is True:
                yield name, "privileged"
            if context.get("allowPrivilegeEscalation") is True:
                yield name, "allowPrivilegeEscalation: true"
            if context.get("runAsNonRoot") is False or context.get("runAsUser") == 0:
                yield name, "may run as root"
            capabilities = context.get("capabilities") if isinstance(context.get("capabilities"), dict) else {}
            for capability in _listed(capabilities.get("add")):
                yield name, f"adds capability {capability}"
            ports = container.get("ports") if isinstance(container.get("ports"), list) else []
            for port in ports:
                if isinstance(port, dict) and port.get("hostPort"):
                    yield name, f"hostPort {port['hostPort']}"


def _kubernetes_grants(inputs: dict[str, Any], scope: str) -> Iterator[Grant]:
    kind = str(inputs.get("kind", ""))
    yield from _rbac_grants(kind, inputs, scope)
    if kind == "NetworkPolicy":
        yield from _netpol_grants(inputs, scope)
    spec = _pod_spec(kind, inputs)
    if spec is not None:
        for container, setting in _pod_settings(spec):
            yield Grant(POD, scope, "pod spec", (("container", container), ("setting", setting)),
                        json.dumps([container, setting]))


def _label(resource: dict[str, Any]) -> str:
    inputs = resource.get("inputs") if isinstance(resource.get("inputs"), dict) else {}
    metadata = inputs.get("metadata") if isinstance(inputs.get("metadata"), dict) else {}
    if resource["type"].startswith("kubernetes:") and "kind" in inputs:
        where = "/".join(str(metadata[k]) for k in ("namespace", "name") if metadata.get(k))
        return f"{inputs['kind']} {where}"
    return f"{resource['type'].rsplit(':', 1)[-1]} {resource['name']}"


def _scope(resource: dict[str, Any]) -> str:
    inputs = resource["inputs"]
    for key in TARGET_INPUTS:
        value = inputs.get(key)
        if isinstance(value, str) and value and value != MASKED:
            return f"{resource['type'].split(':', 2)[1].split('/', 1)[0]}:{key}:{value}"
    return resource["urn"]


def grants(resource: dict[str, Any]) -> list[Grant]:
    """Every grant a resource of a report makes (at most GRANTS_PER_RESOURCE)."""
    inputs = resource.get("inputs")
    if not isinstance(inputs, dict):
        return []
    scope = _scope(resource)
    found = _kubernetes_grants(inputs, scope) if resource["type"].startswith("kubernetes:") else \
        _aws_grants(resource["type"], inputs, scope) if resource["type"].startswith("aws:") else iter(())
    out = []
    for grant in found:
        out.append(grant)
        if len(out) >= GRANTS_PER_RESOURCE:
            break
    return out


# --- what covers what ------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _glob(pattern: str, fold: bool) -> re.Pattern[str]:
    """An IAM or RBAC pattern: `*` any run of characters, `?` one."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if fold else 0))


def _within_patterns(values: list[str], patterns: list[str], fold: bool = False) -> bool:
    """Every value (itself maybe a pattern) is matched by one of the patterns."""
    return all(any(_glob(p, fold).fullmatch(v) for p in patterns) for v in values)


def _iam_covers(wide: dict[str, Any], narrow: dict[str, Any]) -> bool:
    if wide["effect"] != narrow["effect"]:
        return False
    for negated in ("notPrincipal", "notAction", "notResource"):
        if wide[negated] != narrow[negated]:
            return False  # a NotX statement is compared only with one just like it
    if narrow["principal"] != wide["principal"]:
        if wide["principal"] is None or narrow["principal"] is None:
            return False
        if "*" not in wide["principal"] and "AWS:*" not in wide["principal"] \
                and not set(narrow["principal"]) <= set(wide["principal"]):
            return False
    if not _within_patterns(narrow["action"], wide["action"], fold=True):
        return False
    if not _within_patterns(narrow["resource"], wide["resource"]):
        return False
    for op, keys in wide["condition"].items():  # every condition of the wide one binds the narrow one too
        # A negated operator (StringNotEquals, ArnNotLike, NotIpAddress...) matches more the
        # fewer values it lists: there the narrow one must list at least the wide one's.
        negated = "not" in op.rsplit(":", 1)[-1].lower()
        for key, values in keys.items():
            theirs = narrow["condition"].get(op, {}).get(key)
            if theirs is None or not (set(values) <= set(theirs) if negated else set(theirs) <= set(values)):
                return False
    return True


def _network(peer: str) -> Any:
    try:
        return ipaddress.ip_network(peer, strict=False)
    except ValueError:
        return None


def _sg_covers(wide: dict[str, Any], narrow: dict[str, Any]) -> bool:
    if wide["direction"] != narrow["direction"]:
        return False
    if wide["protocol"] != "-1":
        if wide["protocol"] != narrow["protocol"] or None in (wide["from"], wide["to"], narrow["from"], narrow["to"]):
            return False
        if not wide["from"] <= narrow["from"] <= narrow["to"] <= wide["to"]:
            return False
    if wide["peer"] == narrow["peer"]:
        return True
    a, b = _network(wide["peer"]), _network(narrow["peer"])
    return a is not None and b is not None and a.version == b.version and b.subnet_of(a)


def _all_or(values: list[str], wide: list[str]) -> bool:
    return "*" in wide or set(values) <= set(wide)


def _rbac_covers(wide: dict[str, Any], narrow: dict[str, Any]) -> bool:
    if not all(_all_or(narrow[key], wide[key]) for key in ("apiGroups", "resources", "verbs")):
        return False
    if wide["resourceNames"] and not (narrow["resourceNames"] and set(narrow["resourceNames"])
                                      <= set(wide["resourceNames"])):
        return False
    return _within_patterns(narrow["nonResourceURLs"], wide["nonResourceURLs"])


def _netpol_covers(wide: dict[str, Any], narrow: dict[str, Any]) -> bool:
    return wide["direction"] == narrow["direction"] and wide["pods"] == narrow["pods"] \
        and wide["peer"] in ("any", narrow["peer"]) and wide["port"] in ("any", narrow["port"])


_COVERS = {IAM: _iam_covers, SG_RULE: _sg_covers, RBAC_RULE: _rbac_covers, NETPOL_RULE: _netpol_covers}


def covers(wide: Grant, narrow: Grant) -> bool:
    """Whether `wide` allows (or, for two Denies, denies) everything `narrow` does."""
    if wide.kind != narrow.kind:
        return False
    if wide.key == narrow.key:
        return True
    judge = _COVERS.get(wide.kind)
    return judge is not None and wide.data is not None and narrow.data is not None and judge(wide.data, narrow.data)


# --- the diff ------------------------------------------------------------------------------


def _by_scope(read: dict[str, tuple[str, list[Grant]]]) -> dict[str, list[Grant]]:
    found: dict[str, list[Grant]] = {}
    for _label, grants_of in read.values():
        for grant in grants_of:
            found.setdefault(grant.scope, []).append(grant)
    return found


def security_diff(base: dict[str, Any], head: dict[str, Any]) -> SecurityDiff:
    """The grants added and removed from the base's report to the head's, each judged
    (within GRANTS_PER_REPORT and COMPARISONS; past them, counted as widening)."""
    unjudged = 0

    def read(report: dict[str, Any]) -> dict[str, tuple[str, list[Grant]]]:
        nonlocal unjudged
        found, count = {}, 0
        for resource in report["resources"]:
            if count >= GRANTS_PER_REPORT:
                unjudged += 1  # a resource not read at all
                continue
            found[resource["urn"]] = (_label(resource), grants(resource))
            count += len(found[resource["urn"]][1])
        return found

    before, after = read(base), read(head)
    scopes_before, scopes_after = _by_scope(before), _by_scope(after)
    left = COMPARISONS

    def covered(candidates: Any, grant: Grant) -> bool | None:
        """Whether a candidate covers `grant`; None when the comparisons ran out."""
        nonlocal left
        for candidate in candidates:
            if left <= 0:
                return None
            left -= 1
            if covers(candidate, grant):
                return True
        return False

    changes: list[GrantChange] = []
    for urn in dict.fromkeys([*before, *after]):
        label, old = before.get(urn, ("", []))
        label_after, new = after.get(urn, ("", []))
        old_keys, new_keys = {g.key for g in old}, {g.key for g in new}
        for grant in new:
            if grant.key in old_keys:
                continue
            # A new Deny narrows; a new Allow widens unless the base had one covering it.
            judged = False if grant.deny else covered(scopes_before.get(grant.scope, ()), grant)
            unjudged += judged is None
            changes.append(GrantChange("+", label_after, urn, grant, not grant.deny and judged is not True))
        for grant in old:
            if grant.key in new_keys:
                continue
            # A Deny removed or narrowed widens, unless a Deny of the head covers it.
            judged = covered((g for g in scopes_after.get(grant.scope, ()) if g.deny), grant) if grant.deny else False
            unjudged += judged is None
            changes.append(GrantChange("-", label or label_after, urn, grant, grant.deny and judged is not True))
    return SecurityDiff(changes, unjudged, path_diff(base, head))


# --- renderings ------------------------------------------------------------------------------


def security_text(diff: SecurityDiff, limit: int = 40) -> str:
    lines = [diff.summary()]
    for change in diff.changes[:limit]:
        mark = " WIDENS" if change.broadens else ""
        cells = "; ".join(f"{k} {v}" for k, v in change.grant.columns)
        lines.append(f"  {change.sign} {change.resource} [{change.grant.kind}, {change.grant.where}]{mark}: {cells}")
    if len(diff.changes) > limit:
        lines.append(f"  … {len(diff.changes) - limit} more in the JSON diff")
    if diff.paths.resolved or diff.paths.note:
        lines.append(diff.paths.summary())
        for flip in (diff.paths.opened + diff.paths.closed)[:limit]:
            lines.append(f"  {'opens' if flip.opened else 'closes'}: {flip.line()} ({flip.before} -> {flip.after})")
        if len(diff.paths.flips) > limit:
            lines.append(f"  … {len(diff.paths.flips) - limit} more in the JSON diff")
    return "\n".join(lines)


def _bounded_table(table: list[str], rows: Iterator[str], left: int) -> tuple[list[str], int, int]:
    """`table`'s heading and as many of `rows` as fit in `left` characters: (the lines, with
    a blank line after; how many rows; the characters left)."""
    shown: list[str] = []
    for row in rows:
        cost = len(row) + 1 + (0 if shown else sum(len(line) + 1 for line in table))
        if cost > left:
            break
        shown.append(row)
        left -= cost
    return ([*table, *shown, ""] if shown else []), len(shown), left


def security_markdown(diff: SecurityDiff, budget: int = MARKDOWN_BUDGET) -> list[str]:
    """The section that heads a stack's diff: the verdict, the request paths opened and
    closed, then one table per kind of grant, the widening ones first, within about `budget`
    characters (the JSON diff has every one)."""
    icon = "⚠️" if diff.broadening else "🔒"
    out = [f"**{icon} {md_text(diff.summary())}**", ""]
    left, shown = budget - len(out[0]), 0
    # The requests opened come first: they are what the grants below add up to.
    flips = diff.paths.opened + diff.paths.closed
    if diff.paths.resolved or diff.paths.note:
        out += [f"*{md_text(diff.paths.summary())}*", ""]
        left -= len(out[-2])
    if flips:
        rows = (f"| {'opens' if flip.opened else 'closes'} | {md_code(principal[:CELL])} | {md_code(request[:CELL])} "
                f"| {flip.before} | {flip.after} |"
                for flip in flips for principal, _, request in [flip.line().partition(" → ")])
        lines, count, left = _bounded_table(["| | principal | request | before | after |", "|---|---|---|---|---|"],
                                            rows, left)
        out += lines
        if len(flips) > count:
            out += [f"… {len(flips) - count} more request paths in the JSON diff (`--diff-json`)", ""]
    ordered = sorted(diff.changes, key=lambda c: not c.broadens)
    for kind in KINDS:
        entries = [c for c in ordered if c.grant.kind == kind]
        if not entries:
            continue
        headings = [h for h, _ in entries[0].grant.columns]
        table = [f"*{kind}s*", "", "| | resource | " + " | ".join(headings) + " | widens |",
                 "|---|---|" + "---|" * len(headings) + "---|"]
        rows = (f"| {c.sign} | {md_code(c.resource[:CELL])} | "
                + " | ".join(md_code(value[:CELL]) for _, value in c.grant.columns)
                + f" | {'yes' if c.broadens else ''} |" for c in entries)
        lines, count, left = _bounded_table(table, rows, left)
        out += lines
        shown += count
    if len(diff.changes) > shown:
        out += [f"… {len(diff.changes) - shown} more grant changes in the JSON diff (`--diff-json`)", ""]
    return out


def security_json(diff: SecurityDiff) -> dict[str, Any]:
    paths = diff.paths
    return {"broadening": diff.broadening, "summary": diff.summary(), "unjudged": diff.unjudged,
            "changes": [{"sign": c.sign, "resource": c.resource, "urn": c.urn, "kind": c.grant.kind,
                         "where": c.grant.where, "scope": c.grant.scope, "grant": dict(c.grant.columns),
                         "widens": c.broadens} for c in diff.changes],
            "paths": {"summary": paths.summary(), "resolved": paths.resolved, "compared": paths.compared,
                      "unjudged": paths.unjudged, "note": paths.note, "seconds": round(paths.seconds, 3),
                      "flips": [{"change": "opens" if f.opened else "closes", "path": f.path.name,
                                 "principal": f.path.principal, "action": f.path.action,
                                 "resource": f.path.resource, "before": f.before, "after": f.after}
                                for f in paths.flips]}}
