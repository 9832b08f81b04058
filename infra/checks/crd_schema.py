"""Custom resources judged against their CRD, as the API server judges them.

The CRD's `openAPIV3Schema` for the object's version is a structural schema; the API
server validates against it, evaluates its CEL rules (`x-kubernetes-validations`), and
with strict field validation refuses fields the schema does not know. `validate` does the
same: the schema through `jsonschema` (Kubernetes' extensions mapped onto JSON Schema),
the rules through `cel-python`, with `self` bound to the value at the rule's node.

Transition rules (those that read `oldSelf`) only run on updates; an object being created
has no old self, so they are not evaluated here. A rule that calls a function of the
Kubernetes CEL libraries that cel-python lacks is counted as not evaluated, never passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft4Validator

from infra.checks.apiserver import Problem, object_label
from infra.render import load_documents, render_cache_dir

# The root of every custom resource: what the API server handles itself.
_ROOT_FIELDS = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}


@cache
def load_crd_files(folder: Path) -> tuple[dict[str, Any], ...]:
    """Every CustomResourceDefinition in the YAML files under `folder` (read once)."""
    crds = []
    for path in sorted(folder.rglob("*.y*ml")):
        try:
            docs = load_documents(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        crds += [d for d in docs if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]
    return tuple(crds)


def json_schema(node: Any, strict: bool = True) -> Any:
    """A structural schema node as JSON Schema (draft 4, as OpenAPI v3.0 is)."""
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key in ("enum", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                "maxLength", "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "required"):
        if key in node:
            out[key] = node[key]
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    for key in ("anyOf", "allOf", "oneOf"):
        if key in node:
            out.setdefault("allOf", []).append({key: [json_schema(n, strict=False) for n in node[key]]})
    if "not" in node:
        out["not"] = json_schema(node["not"], strict=False)
    if "items" in node:
        out["items"] = json_schema(node["items"], strict)
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        out["properties"] = {k: json_schema(v, strict) for k, v in properties.items()}
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = json_schema(node["additionalProperties"], strict)
    elif node.get("x-kubernetes-embedded-resource"):
        out.setdefault("properties", {}).update(_ROOT_FIELDS)
    elif strict and node.get("type") == "object" and not node.get("x-kubernetes-preserve-unknown-fields") \
            and "additionalProperties" not in node:
        out["additionalProperties"] = False  # strict field validation: unknown fields are refused
    return out


@dataclass
class CrdIndex:
    """(group, version, kind) -> that version's schema, from CRD objects."""

    schemas: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    _validators: dict[tuple[str, str, str], Draft4Validator] = field(default_factory=dict)

    @classmethod
    def of(cls, crds: Iterable[Mapping[str, Any]]) -> CrdIndex:
        index = cls()
        for crd in crds:
            spec = crd.get("spec") or {}
            for version in spec.get("versions") or []:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if version.get("served", True) and isinstance(schema, Mapping):
                    index.schemas[(spec["group"], version["name"], spec["names"]["kind"])] = dict(schema)
        return index

    def schema_for(self, obj: Mapping[str, Any]) -> tuple[tuple[str, str, str], dict[str, Any] | None]:
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        key = (group, version, str(obj.get("kind")))
        return key, self.schemas.get(key)

    def validator(self, key: tuple[str, str, str]) -> Draft4Validator:
        if key not in self._validators:
            self._validators[key] = _validator(json.dumps(self.schemas[key], sort_keys=True))
        return self._validators[key]


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Draft4Validator:
    """One validator per distinct schema in a process: stacks share most CRDs, and mapping
    a large schema onto JSON Schema costs more than comparing its text."""
    root = json_schema(json.loads(schema_text))
    root.setdefault("properties", {}).update(_ROOT_FIELDS)
    root["properties"].setdefault("status", {"type": "object"})
    return Draft4Validator(root)


@dataclass
class Outcome:
    problems: list[Problem] = field(default_factory=list)
    rules_evaluated: int = 0
    rules_skipped: list[str] = field(default_factory=list)  # "kind path: rule (why)"


# The API groups a 1.34 API server serves itself (`kubectl api-versions` less CRDs).
BUILT_IN_GROUPS = frozenset({
    "", "apps", "batch", "autoscaling", "policy", "admissionregistration.k8s.io", "apiextensions.k8s.io",
    "apiregistration.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "certificates.k8s.io",
    "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io", "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io", "networking.k8s.io", "node.k8s.io", "rbac.authorization.k8s.io", "resource.k8s.io",
    "scheduling.k8s.io", "storage.k8s.io", "storagemigration.k8s.io",
})


def is_custom(obj: Mapping[str, Any]) -> bool:
    """A custom resource: a kind of a group the API server does not serve itself."""
    return str(obj.get("apiVersion", "")).rpartition("/")[0] not in BUILT_IN_GROUPS


def validate(obj: Mapping[str, Any], index: CrdIndex, outcome: Outcome | None = None) -> Outcome:
    outcome = outcome or Outcome()
    label = object_label(obj)
    key, schema = index.schema_for(obj)
    if schema is None:
        outcome.problems.append(Problem(label, "apiVersion", "CRD lookup",
                                        f"no CRD serves {key[0]}/{key[1]} {key[2]}: the API server refuses the kind"))
        return outcome
    for error in sorted(index.validator(key).iter_errors(obj), key=lambda e: list(e.absolute_path)):
        where = _path(error.absolute_path)
        outcome.problems.append(Problem(label, where or "(root)", "CRD openAPIV3Schema", _message(error)))
    for where, rule, value in _rules(schema, obj, ""):
        _evaluate(label, where, rule, value, outcome)
    return outcome


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _message(error: Any) -> str:
    if error.validator == "additionalProperties" and error.validator_value is False:
        return f"field not declared in schema: {error.message.split('(')[-1].rstrip(')')}"
    return error.message if len(error.message) < 300 else error.message[:300] + "..."


def _rules(schema: Any, value: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any], Any]]:
    """(path, rule, value at that node) for every CEL rule whose node is present."""
    if not isinstance(schema, Mapping) or value is None:
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path or "(root)", rule, value
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            child_schema = properties.get(key) if key in properties else extra
            yield from _rules(child_schema, child, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, child in enumerate(value):
            yield from _rules(schema["items"], child, f"{path}[{i}]")


_ENV: Any = None
_PROGRAMS: dict[str, Any] = {}


def _load_parser() -> None:
    """cel-python's parser (one per process, shared by every Environment), its grammar
    tables cached on disk: building them costs a second per process, loading them a few
    milliseconds. Built with cel-python's own settings."""
    import re

    import celpy
    import lark
    from celpy.celparser import CELParser

    if CELParser.CEL_PARSER is None:
        grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
        cache_file = render_cache_dir().parent / f"cel-lark-{lark.__version__}.cache"
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        CELParser.CEL_PARSER = lark.Lark(
            grammar, parser="lalr", start="expr", debug=True, g_regex_flags=re.M,
            lexer_callbacks={"IDENT": CELParser.ambiguous_literals}, propagate_positions=True,
            maybe_placeholders=False, priority="invert", tree_class=lark.Tree, cache=str(cache_file),
        )


def cel_program(text: str) -> Any:
    """A compiled CEL expression (cached per process); raises celpy.CELParseError."""
    import celpy

    global _ENV
    program = _PROGRAMS.get(text)
    if program is None:
        if _ENV is None:
            _load_parser()
            _ENV = celpy.Environment()
        program = _PROGRAMS[text] = _ENV.program(_ENV.compile(text))
    return program


def _evaluate(label: str, where: str, rule: Mapping[str, Any], value: Any, outcome: Outcome) -> None:
    import celpy

    text = str(rule.get("rule", ""))
    if "oldSelf" in text:
        return  # a transition rule: only on update
    try:
        program = cel_program(text)
        result = program.evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELParseError as err:
        outcome.rules_skipped.append(f"{label} {where}: {text} (cel-python cannot parse it: {err})")
        return
    except celpy.CELEvalError as err:
        reason = str(err.args[0]) if err.args else str(err)
        if reason.startswith("undeclared reference"):
            outcome.rules_skipped.append(f"{label} {where}: {text} (a Kubernetes CEL function cel-python lacks)")
            return
        outcome.rules_evaluated += 1
        outcome.problems.append(Problem(label, where, "x-kubernetes-validations", f"rule {text!r} failed: {reason}"))
        return
    outcome.rules_evaluated += 1
    if isinstance(result, celpy.CELEvalError):
        outcome.problems.append(Problem(label, where, "x-kubernetes-validations", f"rule {text!r} failed: {result}"))
    elif not bool(result):
        message = rule.get("message") or f"failed rule: {text}"
        field_path = str(rule.get("fieldPath") or "")
        outcome.problems.append(Problem(label, f"{where}{field_path}", "x-kubernetes-validations", str(message)))
