"""Which connections the rendered NetworkPolicies admit, decided as the API's semantics
say (networking.k8s.io/v1): a pod is isolated for ingress once any policy of its namespace
selects it with Ingress among its policyTypes; then a connection is admitted if any
selecting policy has a rule whose peers match the source and whose ports match the port.
Used by the tests that walk the rendered objects for side doors into platform pods.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    namespace: str | None  # None: not a pod (the API server, a load balancer): only ipBlock peers match it
    labels: dict[str, str] = field(default_factory=dict)
    # name -> number, for rules that name a port
    ports: dict[str, int] = field(default_factory=dict)
    ip: str | None = None


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A label selector; an empty one selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _types(spec: dict[str, Any]) -> list[str]:
    """policyTypes, or what the API server defaults it to: Ingress, and Egress where the
    policy has egress rules."""
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


class Cluster:
    def __init__(self, objects: list[dict[str, Any]]):
        self.policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
        self.namespace_labels = {o["metadata"]["name"]: dict(o["metadata"].get("labels") or {})
                                 for o in objects if o["kind"] == "Namespace"}

    def _ns_labels(self, name: str) -> dict[str, str]:
        # The API server sets this label on every namespace; nobody else can.
        return {**self.namespace_labels.get(name, {}), "kubernetes.io/metadata.name": name}

    def _peer_matches(self, peer: dict[str, Any], policy_ns: str, source: Pod) -> bool:
        if "ipBlock" in peer:
            if source.ip is None:
                return False
            block = peer["ipBlock"]
            address = ipaddress.ip_address(source.ip)
            return address in ipaddress.ip_network(block["cidr"]) and not any(
                address in ipaddress.ip_network(e) for e in block.get("except") or ())
        if source.namespace is None:
            return False
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], self._ns_labels(source.namespace)):
                return False
        elif source.namespace != policy_ns:
            return False
        return selects(peer.get("podSelector"), source.labels)

    @staticmethod
    def _port_matches(rule_ports: list[dict[str, Any]] | None, target: Pod, port: int, protocol: str) -> bool:
        if not rule_ports:
            return True
        for p in rule_ports:
            if p.get("protocol", "TCP") != protocol:
                continue
            wanted = p.get("port")
            if wanted is None:
                return True
            number = target.ports.get(wanted) if isinstance(wanted, str) else wanted
            if number is not None and number <= port <= p.get("endPort", number):
                return True
        return False

    def _decide(self, selected: Pod, peer: Pod, direction: str, target: Pod, port: int, protocol: str) -> bool:
        """Whether `selected`'s namespace's policies let the connection through in
        `direction` (Ingress: peer connects to selected; Egress: selected connects to peer).
        Ports are the target's."""
        key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
        selecting = [p for p in self.policies if p["metadata"]["namespace"] == selected.namespace
                     and selects(p["spec"].get("podSelector"), selected.labels)
                     and direction in _types(p["spec"])]
        if not selecting:
            return True  # not isolated in that direction
        return any(
            (not rule.get(peers) or any(self._peer_matches(x, selected.namespace, peer) for x in rule[peers]))
            and self._port_matches(rule.get("ports"), target, port, protocol)
            for policy in selecting for rule in policy["spec"].get(key) or ())

    def admits(self, source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
        """The target's ingress policies let the source in."""
        return self._decide(target, source, "Ingress", target, port, protocol)

    def connects(self, source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
        """Both ends agree: the source's egress (when it is a pod) and the target's ingress
        (when it is a pod)."""
        out = source.namespace is None or self._decide(source, target, "Egress", target, port, protocol)
        return out and (target.namespace is None or self.admits(source, target, port, protocol))
