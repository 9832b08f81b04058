"""What a change does, from two offline previews: the base's JSON report against the head's.

`mlplat preview --stack <s> --against <base.json>` prints it, and writes it as Markdown
for a pull request's comment and as JSON. It is a pure function of the two reports
(`diff_reports`), so it runs on recorded reports in tests and benchmarks:
- resources added, removed and changed, by URN, with the input paths that changed (the
  reports mask secrets, so a changed secret value shows nowhere; a value that became a
  secret shows as `[secret]`);
- policy verdicts that flipped (a rule that passed now fails, or the other way), violations
  new and resolved, the evidence counts that moved, and each added resource's evidence;
- Kubernetes objects whose manifests changed, by kind, namespace and name, those rendered
  from Helm charts included (every chart object is its own resource in the report).

Resources are matched by URN, as the engine matches them: a renamed or re-parented
resource is one removed and one added (unless an alias moves it, which the report does not
show).

The base report is a file CI (or a user) hands over: it is read bounded (workloads/inputs.py)
and its shape checked for every field the diff reads before the preview runs, and every
name, level, URN and value that reaches the Markdown is escaped (infra/preview/markdown.py).
"""

from __future__ import annotations

import functools
import gc
import json
import os
import pickle
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, ConfigDict, FailFast, Field, ValidationError
from pydantic.alias_generators import to_camel

from infra.preview.markdown import md_code, md_text
from infra.preview.report import CHART_TYPE, HELM_RELEASE, REPORT_VERSION
from infra.preview.security import SecurityDiff, security_diff, security_json, security_markdown, security_text
from workloads import inputs

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
_SIGN = {ADDED: "+", REMOVED: "-", CHANGED: "~"}
# What one resource record holds besides its inputs that a change can move.
_OPTIONS = ("protect", "retainOnDelete", "region", "provider", "parent")
# Limits of the Markdown and of the terminal text; the JSON diff has every change. A PR
# comment holds at most 65,536 characters: eight stacks' sections (both layers of four
# environments) fit in one.
MARKDOWN_BUDGET = 7_000  # characters per stack
MARKDOWN_PATHS = 8  # per resource
FLIP_VIOLATIONS = 10  # per flipped rule
TEXT_PATHS = 40  # per resource, in the terminal
# Input paths in one diff, all resources together: every leaf of every resource of prod-cluster
# (the largest report) is 90,000. A resource past what is left is one change, its whole
# inputs before and after (a hostile base report of millions of leaves stays small).
MAX_PATHS = 200_000
# The largest base report read. prod-cluster's is the largest report: 6.9 MB in November 2026
# (its CRDs' schemas are most of it; prod's is 0.35 MB), so 12 MiB leaves it room to grow by
# three quarters. A file this size of the costliest JSON to read (a list of four million
# `{}`) takes about 6 s and 650 MB to refuse on two cores; 16 MiB came near the gigabyte.
BASE_REPORT_LIMIT = 12 << 20


class BaseReportError(ValueError):
    """The base report cannot be compared: one line for the user, exit code 2."""


class _Absent:
    """A path that one side does not have."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


def _without_gc(function):
    """Run with the cyclic garbage collector paused: a diff allocates tens of thousands of
    small objects and no cycles, and each collection would walk both reports' millions of
    objects again (half the time of a large diff)."""

    @functools.wraps(function)
    def paused(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused


@_without_gc
def read_base_report(path: Path, stack: str) -> dict[str, Any]:
    """The base's JSON report for `stack`, or a BaseReportError saying what is wrong with
    the file and how to get a good one."""
    how = (f"pass the JSON report of the base's preview (`mlplat preview --stack {stack} --json PATH`, or "
           f"`--env ENV --out DIR`, run on the base commit)")
    if path.is_dir():
        path = path / f"{stack}.json"
        if not path.exists():
            raise BaseReportError(f"base report folder {path.parent} holds no {path.name}; {how}")
    try:
        raw = inputs.read_bytes(path, "base report", BASE_REPORT_LIMIT)
    except inputs.InputError as err:  # missing, a FIFO or device, too big, unreadable
        raise BaseReportError(f"base report {err}; {how}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BaseReportError(f"base report {path} is not JSON (not UTF-8 text); {how}") from None
    try:
        data = inputs.load_json(text, f"base report {path}")
    except inputs.InputError as err:
        # load_json keeps the decoder's error as the context of its own: its line and
        # column say where a hand-edited report went wrong.
        syntax = err.__context__
        if isinstance(syntax, json.JSONDecodeError):
            raise BaseReportError(f"base report {path} is not JSON (line {syntax.lineno}, column {syntax.colno}: "
                                  f"{syntax.msg}); {how}") from None
        raise BaseReportError(f"{err}; {how}") from None  # nested too deep, a huge number, NaN
    return check_base_report(data, stack, str(path))


@_without_gc
def as_read(report: dict[str, Any]) -> dict[str, Any]:
    """An in-memory report as a reader of its JSON file gets it (lists, not tuples; string
    keys), so it compares with a base read from a file."""
    return json.loads(json.dumps(report, separators=(",", ":")))


def check_base_report(data: Any, stack: str, where: str = "(in memory)") -> dict[str, Any]:
    """`data` if it is a report this diff reads, of `stack`; else a BaseReportError."""
    again = f"preview the base commit again with this mlplat (`mlplat preview --stack {stack} --json PATH`)"
    if not isinstance(data, dict) or not isinstance(data.get("resources"), list) or "stack" not in data:
        raise BaseReportError(f"base report {where} is not an mlplat preview report (no `stack` and `resources`); "
                              f"{again}")
    version = data.get("reportVersion")
    if type(version) is not int or version != REPORT_VERSION:  # true and 1.0 are no version 1
        said = "has no reportVersion (an mlplat before report versions wrote it)" if version is None else \
            f"is report version {inputs.excerpt(version)}"
        raise BaseReportError(f"base report {where} {said}, and this mlplat reads version {REPORT_VERSION}; "
                              f"{again}")
    damage = shape_problem(data)
    if damage:
        raise BaseReportError(f"base report {where} is a damaged report: {damage}; {again}")
    if data["stack"] != stack:
        raise BaseReportError(f"base report {where} is the preview of stack {inputs.excerpt(data['stack'])}, not "
                              f"{stack!r}; pass the base's report of {stack} (`--out DIR` writes DIR/{stack}.json)")
    return data


# --- the base report's shape ----------------------------------------------------------------
# Every field the diff reads (diff_reports and the renderings), with the type it reads it
# as; the diff indexes nothing else. A field the diff reads with a default may be absent;
# the rest the report writer (infra/preview/report.py to_json) always writes. Strict: "1"
# is no count, 1 no boolean. Fields the diff does not read (charts, advisories, timings)
# are ignored, so a report that adds fields keeps its version.


class _Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", alias_generator=to_camel)


# A list stops at its first bad item: the error names one place, and a report of a
# million bad items is not a million errors.
_Strings = Annotated[list[str], FailFast()]


class _Evidence(_Shape):
    passed: _Strings = []
    failed: _Strings = []


class _Resource(_Shape):
    urn: str
    type: str
    name: str
    inputs: dict[str, Any]
    # Compared as the resource's options: absent is a value of its own.
    parent: str | None = None
    region: str | None = None
    provider: str | None = None
    protect: bool = False
    retain_on_delete: bool = False
    evidence: _Evidence | None = None


class _Metadata(_Shape):
    name: str | None = None
    namespace: str | None = None


class _KubernetesObject(_Shape):
    """A Kubernetes object's inputs, as far as its label (`Kind namespace/name`) reads them."""
    api_version: str
    kind: str
    metadata: _Metadata | None = None


class _Violation(_Shape):
    policy: str
    level: str
    message: str
    urn: str | None = None


class _PolicyRow(_Shape):
    policy: str
    level: str
    checked: int = Field(ge=0)
    passed: int = Field(ge=0)
    failed: int = Field(ge=0)


class _Summary(_Shape):
    passed: bool


class _Report(_Shape):
    stack: str
    region: str
    resources: Annotated[list[_Resource], FailFast()]
    violations: Annotated[list[_Violation], FailFast()]
    policies: Annotated[list[_PolicyRow], FailFast()]
    engine_errors: _Strings
    summary: _Summary
    # The stack's outputs, which the request paths resolve against (infra/checks/iam/stack.py
    # reads any part of the wrong type as empty); absent from reports made before they were kept.
    outputs: dict[str, Any] | None = None


def shape_problem(data: dict[str, Any]) -> str | None:
    """The first place where `data` is not the report the diff reads, as `path: problem`;
    None where it is."""
    try:
        _Report.model_validate(data)
    except ValidationError as err:
        return _first_problem(err)
    # Which resources are Kubernetes objects depends on their type and inputs, now vouched for.
    for index, resource in enumerate(data["resources"]):
        if _is_object(resource):
            try:
                _KubernetesObject.model_validate(resource["inputs"])
            except ValidationError as err:
                return _first_problem(err, ("resources", index, "inputs"))
    return None


def _first_problem(err: ValidationError, prefix: tuple[Any, ...] = ()) -> str:
    error = err.errors(include_url=False)[0]
    return f"{_json_path(prefix + tuple(error['loc']))}: {_problem(error)}"


def _json_path(loc: tuple[Any, ...]) -> str:
    """('resources', 3, 'urn') -> 'resources[3].urn'."""
    path = ""
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else _key(path, str(part))
    return path or "(the report)"


_EXPECTED = {"string_type": "a string", "int_type": "an integer", "bool_type": "true or false",
             "list_type": "a list", "dict_type": "an object", "model_type": "an object"}


def _problem(error: dict[str, Any]) -> str:
    kind = error["type"]
    if kind == "missing":
        return "missing"
    if kind in _EXPECTED:
        return f"is {_json_kind(error['input'])}, not {_EXPECTED[kind]}"
    if kind == "greater_than_equal":
        return f"is {error['input']}, below 0"
    return inputs.excerpt(error["msg"])


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (a value itself may be long or hostile)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    for kind, name in ((str, "a string"), (int, "an integer"), (float, "a number"), (list, "a list"),
                       (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


# --- input paths ---------------------------------------------------------------------------


class PathChange(NamedTuple):  # a tuple: a big diff makes tens of thousands
    path: str
    before: Any
    after: Any


def _key(path: str, key: str) -> str:
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _named(items: list[Any]) -> dict[str, Any] | None:
    """A list of objects with unique string `name`s, by name (containers, env, ports)."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    by_name = {i["name"]: i for i in items}
    return by_name if len(by_name) == len(items) else None


def changed_paths(before: Any, after: Any, path: str = "", limit: int = MAX_PATHS) -> list[PathChange]:
    """Every leaf path whose value differs, ABSENT on the side that lacks it. Lists of named
    objects are matched by name where the two sides share a name (so an inserted item is one
    change, not a shift of every index); other lists by index. Past `limit` changes the
    whole value is one change, before and after: nobody reads more, and a base report's list
    of a million numbers against the head's short one is not a million changes."""
    out = _Paths(limit)
    try:
        _walk(before, after, path, out)
    except _TooManyPaths:
        return [PathChange(path or "(whole value)", before, after)]
    return list(out)


class _TooManyPaths(Exception):
    """More than the limit of a value's leaves changed."""


class _Paths(list):
    """The changes found so far, at most `limit` of them."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def room(self) -> int:
        return self.limit - len(self)

    def add(self, change: PathChange) -> None:
        self.append(change)
        if len(self) > self.limit:
            raise _TooManyPaths


def _identical(before: Any, after: Any) -> bool:
    """The same JSON. Python's == calls 1, 1.0 and True equal: Pulumi's wire has one number
    type (1 and 1.0 are the same value), but true is not 1. Containers that are == and
    serialize alike are identical; others are walked (a key order differs, or a true became
    1 somewhere inside)."""
    if before != after:
        return False
    if isinstance(before, (dict, list)):
        # pickle tells true from 1 as JSON does and is several times faster to write; equal
        # pickles are the same JSON. Unequal ones may still be (pickle also records which
        # values are one shared object), so JSON decides those.
        return pickle.dumps(before, protocol=5) == pickle.dumps(after, protocol=5) or _dump(before) == _dump(after)
    return isinstance(before, bool) == isinstance(after, bool)


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _walk(before: Any, after: Any, path: str, out: _Paths) -> None:
    if _identical(before, after):
        return
    if isinstance(before, dict) and isinstance(after, dict):
        _walk_keyed(before, after, lambda key: _key(path, str(key)), out)
        return
    if isinstance(before, list) and isinstance(after, list):
        if abs(len(before) - len(after)) > out.room():  # as many items are added or removed
            raise _TooManyPaths
        old, new = _named(before), _named(after)
        if old is not None and new is not None and old.keys() & new.keys():
            _walk_keyed(old, new, lambda name: f"{path}[name={name}]", out)
        else:
            _walk_keyed(dict(enumerate(before)), dict(enumerate(after)), lambda i: f"{path}[{i}]", out)
        return
    if before == after and isinstance(before, bool) == isinstance(after, bool):
        return  # containers alike but for key order, or 1 against 1.0
    out.add(PathChange(path or "(whole value)", before, after))


def _walk_keyed(before: dict[Any, Any], after: dict[Any, Any], at: Callable[[Any], str],
                out: _Paths) -> None:
    """Both sides' entries by key (a mapping's keys, a named list's names, a list's indices),
    the base's order first: removed, added, or walked into."""
    if len(before.keys() - after.keys()) + len(after.keys() - before.keys()) > out.room():
        raise _TooManyPaths  # counted before a path is made for each
    for key in [*before, *(k for k in after if k not in before)]:
        if key not in after:
            out.add(PathChange(at(key), before[key], ABSENT))
        elif key not in before:
            out.add(PathChange(at(key), ABSENT, after[key]))
        else:
            _walk(before[key], after[key], at(key), out)


# --- the diff --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceChange:
    action: str  # added | removed | changed
    urn: str
    type: str
    name: str
    paths: tuple[PathChange, ...] = ()  # inputs that changed (changed resources)
    options: tuple[PathChange, ...] = ()  # protect, retainOnDelete, region, provider, parent
    evidence: dict[str, list[str]] = field(default_factory=dict)  # head's (added) or base's (removed)
    evidence_before: dict[str, list[str]] | None = None  # changed resources whose evidence moved
    # Kubernetes objects: `Kind namespace/name`, and the Helm release that renders it.
    object: str | None = None
    release: str | None = None


@dataclass(frozen=True)
class PolicyChange:
    policy: str
    level: str
    before: dict[str, Any] | None  # the base's evidence row; None: the rule is new
    after: dict[str, Any] | None  # None: the rule is gone

    @property
    def status_before(self) -> str:
        return _status(self.before)

    @property
    def status_after(self) -> str:
        return _status(self.after)

    @property
    def flipped(self) -> bool:
        return self.status_before != self.status_after


def _status(row: dict[str, Any] | None) -> str:
    if row is None:
        return "absent"
    if row.get("level") == "disabled":
        return "disabled"
    if row["failed"]:
        return "failed"
    return "passed" if row["checked"] else "not applicable"


@dataclass
class ReportDiff:
    stack: str
    region: str
    base_region: str
    passed_before: bool
    passed_after: bool
    resources: list[ResourceChange]  # everything but Kubernetes objects
    objects: list[ResourceChange]  # Kubernetes objects, the charts' included
    policies: list[PolicyChange]  # rules whose verdict, level or evidence counts moved
    violations_new: list[dict[str, Any]]
    violations_resolved: list[dict[str, Any]]
    engine_errors_new: list[str]
    engine_errors_resolved: list[str]
    security: SecurityDiff = field(default_factory=lambda: SecurityDiff([]))  # infra/preview/security.py

    @property
    def flips(self) -> list[PolicyChange]:
        return [p for p in self.policies if p.flipped or p.before is None or p.after is None
                or p.before.get("level") != p.after.get("level")]

    @property
    def changed(self) -> bool:
        return bool(self.resources or self.objects or self.policies or self.violations_new
                    or self.violations_resolved or self.engine_errors_new or self.engine_errors_resolved
                    or self.region != self.base_region or self.passed_before != self.passed_after)

    def counts(self) -> Counter:
        return Counter(c.action for c in [*self.resources, *self.objects])

    def summary(self) -> str:
        """The one line that goes first."""
        verdict = _verdict(self.passed_after)
        if self.passed_before != self.passed_after:
            verdict = f"{_verdict(self.passed_before)} -> {verdict}"
        if not self.changed:
            return f"{self.stack}: no changes; verdict {verdict}"
        counts = self.counts()
        objects = len(self.objects)
        parts = [f"{counts[ADDED]} to add, {counts[CHANGED]} to change, {counts[REMOVED]} to remove"
                 + (f" ({objects} of them Kubernetes objects)" if objects else "")]
        flips = self.flips
        if flips:
            parts.append(f"{len(flips)} policy verdict{'s' if len(flips) != 1 else ''} flipped")
        if self.violations_new or self.violations_resolved:
            parts.append(f"violations {len(self.violations_new)} new, {len(self.violations_resolved)} resolved")
        if self.engine_errors_new or self.engine_errors_resolved:
            parts.append(f"engine errors {len(self.engine_errors_new)} new, "
                         f"{len(self.engine_errors_resolved)} resolved")
        if self.region != self.base_region:
            parts.append(f"region {self.base_region} -> {self.region}")
        return f"{self.stack}: " + "; ".join(parts) + f"; verdict {verdict}"


def _verdict(passed: bool) -> str:
    return "passed" if passed else "BLOCKED"


def _is_object(resource: dict[str, Any]) -> bool:
    inputs = resource.get("inputs") or {}
    return (resource["type"].startswith("kubernetes:") and resource["type"] not in (CHART_TYPE, HELM_RELEASE)
            and not resource["type"].startswith("pulumi:") and "kind" in inputs and "apiVersion" in inputs)


def _object_label(inputs: dict[str, Any]) -> str:
    meta = inputs.get("metadata") or {}
    name = meta.get("name") or "(unnamed)"
    namespace = meta.get("namespace")
    return f"{inputs.get('kind')} {namespace}/{name}" if namespace else f"{inputs.get('kind')} {name}"


def _violation_key(v: dict[str, Any]) -> tuple[str, str, str]:
    return (v["policy"], v.get("urn") or "", v["message"])


@_without_gc
def diff_reports(base: dict[str, Any], head: dict[str, Any]) -> ReportDiff:
    """What changes from the base's preview to the head's (both JSON reports, as written
    by `mlplat preview --json` and read back)."""
    before = {r["urn"]: r for r in base["resources"]}
    after = {r["urn"]: r for r in head["resources"]}
    releases = {r["urn"]: r["name"] for side in (before, after) for r in side.values() if r["type"] == CHART_TYPE}

    resources: list[ResourceChange] = []
    objects: list[ResourceChange] = []

    def add(change: ResourceChange, record: dict[str, Any]) -> None:
        if _is_object(record):
            change = replace(change, object=_object_label(record["inputs"]),
                             release=releases.get(record.get("parent") or ""))
            objects.append(change)
        else:
            resources.append(change)

    paths_left = MAX_PATHS
    for urn, old in before.items():
        new = after.get(urn)
        if new is None:
            add(ResourceChange(REMOVED, urn, old["type"], old["name"], evidence=old.get("evidence") or {}), old)
        elif not _identical(old, new):
            paths = tuple(changed_paths(old.get("inputs"), new.get("inputs"), limit=paths_left))
            paths_left = max(paths_left - len(paths), 0)
            options = tuple(PathChange(o, old.get(o, ABSENT), new.get(o, ABSENT)) for o in _OPTIONS
                            if old.get(o, ABSENT) != new.get(o, ABSENT))
            moved = old.get("evidence") != new.get("evidence")
            if paths or options or moved or old["type"] != new["type"]:
                add(ResourceChange(CHANGED, urn, new["type"], new["name"], paths=paths, options=options,
                                   evidence=new.get("evidence") or {},
                                   evidence_before=(old.get("evidence") or {}) if moved else None), new)
    for urn, new in after.items():
        if urn not in before:
            add(ResourceChange(ADDED, urn, new["type"], new["name"], evidence=new.get("evidence") or {}), new)

    # Registration order varies between runs of one program: list by URN (resources), by
    # release and object (Kubernetes objects), so two runs print the same diff.
    resources.sort(key=lambda c: c.urn)
    objects.sort(key=lambda c: (c.release or "", c.object or "", c.urn))

    rows_before = {row["policy"]: row for row in base.get("policies") or []}
    rows_after = {row["policy"]: row for row in head.get("policies") or []}
    counted = ("level", "checked", "passed", "failed")
    policies = []
    for name in [*rows_before, *(n for n in rows_after if n not in rows_before)]:
        old_row, new_row = rows_before.get(name), rows_after.get(name)
        if old_row is None or new_row is None or any(old_row.get(k) != new_row.get(k) for k in counted):
            policies.append(PolicyChange(name, (new_row or old_row or {}).get("level", "?"), old_row, new_row))
    # Flips first, then the rest as the pack lists them.
    policies.sort(key=lambda p: not (p.flipped or p.before is None or p.after is None))

    old_violations = {_violation_key(v): v for v in base.get("violations") or []}
    new_violations = {_violation_key(v): v for v in head.get("violations") or []}
    old_errors, new_errors = base.get("engineErrors") or [], head.get("engineErrors") or []
    old_error_set, new_error_set = set(old_errors), set(new_errors)
    return ReportDiff(
        stack=head["stack"],
        region=head.get("region", "?"),
        base_region=base.get("region", "?"),
        passed_before=bool((base.get("summary") or {}).get("passed")),
        passed_after=bool((head.get("summary") or {}).get("passed")),
        resources=resources,
        objects=objects,
        policies=policies,
        violations_new=[v for k, v in new_violations.items() if k not in old_violations],
        violations_resolved=[v for k, v in old_violations.items() if k not in new_violations],
        engine_errors_new=[e for e in new_errors if e not in old_error_set],
        engine_errors_resolved=[e for e in old_errors if e not in new_error_set],
        security=security_diff(base, head),
    )


# --- rendering -------------------------------------------------------------------------------


def _value(value: Any, limit: int = 80) -> str:
    if value is ABSENT:
        return "(absent)"
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pair(change: PathChange, limit: int = 80) -> tuple[str, str]:
    """Before and after, short; two long strings are cut where they start to differ."""
    before, after = _value(change.before, 10**9), _value(change.after, 10**9)
    if max(len(before), len(after)) > limit and isinstance(change.before, str) and isinstance(change.after, str):
        common = len(os.path.commonprefix([before, after]))
        if common > 24:
            before, after = "…" + before[common - 16:], "…" + after[common - 16:]
    cut = lambda text: text if len(text) <= limit else text[: limit - 1] + "…"  # noqa: E731
    return cut(before), cut(after)


def _evidence_line(evidence: dict[str, list[str]]) -> str:
    passed, failed = evidence.get("passed") or [], evidence.get("failed") or []
    if not passed and not failed:
        return "judged by no rule"
    judged = len(passed) + len(failed)
    line = f"judged by {judged} rule{'s' if judged != 1 else ''}: {len(passed)} passed"
    if failed:
        line += f", {len(failed)} FAILED ({', '.join(failed)})"
    return line


def _evidence_moved(change: ResourceChange) -> str:
    old, new = change.evidence_before or {}, change.evidence
    old_failed, new_failed = set(old.get("failed") or []), set(new.get("failed") or [])
    old_all = old_failed | set(old.get("passed") or [])
    new_all = new_failed | set(new.get("passed") or [])
    parts = [f"now fails {', '.join(sorted(new_failed - old_failed))}" if new_failed - old_failed else "",
             f"now passes {', '.join(sorted(old_failed - new_failed))}" if old_failed - new_failed else "",
             f"newly judged by {', '.join(sorted(new_all - old_all))}" if new_all - old_all else "",
             f"no longer judged by {', '.join(sorted(old_all - new_all))}" if old_all - new_all else ""]
    return "; ".join(p for p in parts if p)


def _message(violation: dict[str, Any]) -> str:
    """A violation's message on one line (the pack's are the rule's description, then what
    is wrong with this resource)."""
    return " ".join(line.strip() for line in str(violation["message"]).splitlines() if line.strip())


def _policy_line(p: PolicyChange) -> str:
    def counts(row: dict[str, Any] | None) -> str:
        return "-" if row is None else f"{row['checked']}/{row['passed']}/{row['failed']}"

    move = f"{p.status_before} -> {p.status_after.upper() if p.status_after == 'failed' else p.status_after}"
    if p.before and p.after and p.before.get("level") != p.after.get("level"):
        move += f", level {p.before.get('level')} -> {p.after.get('level')}"
    return f"{p.policy} ({p.level}): {move}; checked/passed/failed {counts(p.before)} -> {counts(p.after)}"


@_without_gc
def diff_text(diff: ReportDiff) -> str:
    """The diff for a terminal: the summary line first."""
    lines = [diff.summary()]
    if not diff.changed:
        return lines[0]
    lines += ["", security_text(diff.security)]
    flips = diff.flips
    if flips:
        lines += ["", "Policy verdicts that flipped:"]
        new, resolved = _by_policy(diff.violations_new), _by_policy(diff.violations_resolved)
        for p in flips:
            lines.append(f"  {_policy_line(p)}")
            for v in new.get(p.policy, []):
                lines.append(f"    + {_message(v)}" + (f"\n      {v['urn']}" if v.get("urn") else ""))
            for v in resolved.get(p.policy, []):
                lines.append(f"    - resolved: {_message(v)}")
    flipped = {p.policy for p in flips}
    others = [v for v in diff.violations_new if v["policy"] not in flipped]
    resolved = [v for v in diff.violations_resolved if v["policy"] not in flipped]
    if others or resolved:
        lines += ["", "Violations:"]
        lines += [f"  + {v['policy']} ({v['level']}): {_message(v)}" for v in others]
        lines += [f"  - resolved {v['policy']} ({v['level']}): {_message(v)}" for v in resolved]
    if diff.engine_errors_new or diff.engine_errors_resolved:
        lines += ["", "Engine errors:"]
        lines += [f"  + {e}" for e in diff.engine_errors_new] + [f"  - resolved: {e}" for e in
                                                                 diff.engine_errors_resolved]
    for title, changes in (("Resources", diff.resources), ("Kubernetes objects", diff.objects)):
        if not changes:
            continue
        lines += ["", f"{title}:"]
        for c in changes:
            head = f"{c.object}" + (f" (release {c.release})" if c.release else "") if c.object else \
                f"{c.type} {c.name}"
            lines.append(f"  {_SIGN[c.action]} {head}")
            lines.append(f"      {c.urn}")
            shown = _shown(c)
            for p, option in shown[:TEXT_PATHS]:
                lines.append(f"      {p.path}{option}: {' -> '.join(_pair(p))}")
            if len(shown) > TEXT_PATHS:
                lines.append(f"      ... {len(shown) - TEXT_PATHS} more paths (--diff-json lists every one)")
            if c.action == ADDED:
                lines.append(f"      {_evidence_line(c.evidence)}")
            elif c.evidence_before is not None and _evidence_moved(c):
                lines.append(f"      evidence: {_evidence_moved(c)}")
    counted = [p for p in diff.policies if p.policy not in flipped]
    if counted:
        lines += ["", "Policy evidence (checked/passed/failed):"]
        lines += [f"  {_policy_line(p)}" for p in counted]
    return "\n".join(lines)


def _shown(change: ResourceChange) -> list[tuple[PathChange, str]]:
    """The input paths, then the resource options (marked), that changed."""
    return [(p, "") for p in change.paths] + [(p, " (option)") for p in change.options]


def _code(text: Any) -> str:
    """Inline code that no value can break out of (a value may come from a fork's PR)."""
    return f"<code>{md_text(text)}</code>"


@_without_gc
def diff_markdown(diff: ReportDiff, budget: int = MARKDOWN_BUDGET) -> str:
    """The pull request comment's section for one stack: the summary, the verdict flips,
    then the details folded, within about `budget` characters (the JSON diff has the rest).
    Every name and value in it is escaped (md_text, md_code): the base report and the head's
    program may both come from a pull request."""
    icon = "✅" if diff.passed_after else "❌"
    summary = md_text(diff.summary().replace(" -> ", " → "))
    out = [f"### {icon} {md_code(diff.stack)} ({md_text(diff.region)})", "", f"**{summary}**", ""]
    if not diff.changed:
        return "\n".join(out)
    # What the change opens goes first, for the security reviewer (its rows are bounded);
    # the budget then goes to the flips, then to the evidence table, then to the folded
    # sections in order (a base report may hold any number of rules and violations).
    out += security_markdown(diff.security)
    left = budget - len("\n".join(out))
    flips = diff.flips
    if flips:
        new, resolved = _by_policy(diff.violations_new), _by_policy(diff.violations_resolved)
        body, left = _within((_flip_entry(p, new.get(p.policy, []), resolved.get(p.policy, [])) for p in flips),
                             len(flips), left)
        out += ["**Policy verdicts that flipped**", "", *body, ""]
    flipped = {p.policy for p in flips}
    counted = [p for p in diff.policies if p.policy not in flipped]
    evidence: list[str] = []
    if counted:
        rows, left = _within(([_evidence_row(p)] for p in counted), len(counted), left)
        evidence = _folded(f"Policy evidence: {len(counted)} rules' counts moved",
                           ["| rule | level | checked | passed | failed |", "|---|---|---:|---:|---:|", *rows])
    others = [v for v in diff.violations_new if v["policy"] not in flipped]
    resolved_others = [v for v in diff.violations_resolved if v["policy"] not in flipped]
    if others or resolved_others:
        entries = [*(("new", v) for v in others), *(("resolved", v) for v in resolved_others)]
        body, left = _within(([f"- {said} {md_code(v['policy'])} ({md_text(v['level'])}): {md_text(_message(v))}"]
                              for said, v in entries), len(entries), left)
        out += _folded(f"Violations: {len(others)} new, {len(resolved_others)} resolved", body)
    if diff.engine_errors_new or diff.engine_errors_resolved:
        entries = [*(("new", e) for e in diff.engine_errors_new),
                   *(("resolved", e) for e in diff.engine_errors_resolved)]
        body, left = _within(([f"- {said}: {_code(e)}"] for said, e in entries), len(entries), left)
        out += _folded(f"Engine errors: {len(diff.engine_errors_new)} new, {len(diff.engine_errors_resolved)} resolved",
                       body)
    for title, changes in (("Resources", diff.resources), ("Kubernetes objects", diff.objects)):
        if changes:
            counts = Counter(c.action for c in changes)
            body, left = _within((_markdown_entry(c) for c in changes), len(changes), left)
            out += _folded(f"{title}: {counts[ADDED]} added, {counts[CHANGED]} changed, {counts[REMOVED]} removed",
                           body)
    return "\n".join(out + evidence)


_ELSEWHERE = "the JSON diff lists every change: `--diff-json`, or `<stack>.diff.json` in CI's preview-report artifact"


def _within(entries: Iterable[list[str]], count: int, left: int) -> tuple[list[str], int]:
    """The lines of as many of the `count` entries as fit in `left` characters, in order,
    and what is left; a line says how many more there are. Entries past the first that does
    not fit are never made."""
    lines: list[str] = []
    shown = 0
    for entry in entries:
        size = sum(len(line) + 1 for line in entry)
        if size > left:
            break
        lines += entry
        left -= size
        shown += 1
    if shown < count:
        lines.append(f"- … {count - shown} more not shown here ({_ELSEWHERE})")
        left = 0
    return lines, left


def _by_policy(violations: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for v in violations:
        grouped.setdefault(v["policy"], []).append(v)
    return grouped


def _flip_entry(p: PolicyChange, new: list[dict[str, Any]], resolved: list[dict[str, Any]]) -> list[str]:
    """A flipped rule and its violations that came or went, FLIP_VIOLATIONS at most."""
    mark = "❌" if p.status_after == "failed" else "✅" if p.status_after == "passed" else "➖"
    lines = [f"  - new: {md_text(_message(v))}" + (f" ({_code(v['urn'])})" if v.get("urn") else "")
             for v in new[:FLIP_VIOLATIONS]]
    lines += [f"  - resolved: {md_text(_message(v))}" for v in resolved[:FLIP_VIOLATIONS - len(lines)]]
    more = len(new) + len(resolved) - len(lines)
    if more > 0:
        lines.append(f"  - … {more} more ({_ELSEWHERE})")
    return [f"- {mark} {_code(_policy_line(p).replace(' -> ', ' → '))}", *lines]


def _evidence_row(p: PolicyChange) -> str:
    b, a = p.before or {}, p.after or {}
    counts = (f"{b.get(k, '-')} → {a.get(k, '-')}" if b.get(k) != a.get(k) else f"{a.get(k, '-')}"
              for k in ("checked", "passed", "failed"))
    return f"| {md_code(p.policy)} | {md_text(p.level)} | " + " | ".join(counts) + " |"


def _markdown_entry(c: ResourceChange) -> list[str]:
    if c.object:
        lines = [f"- **{_SIGN[c.action]}** {_code(c.object)}" + (f" in release {md_code(c.release)}" if c.release
                                                                  else "") + f" <sub>{_code(c.urn)}</sub>"]
    else:
        lines = [f"- **{_SIGN[c.action]}** {md_code(c.name)} <sub>{_code(c.type)} {_code(c.urn)}</sub>"]
    shown = _shown(c)
    for p, option in shown[:MARKDOWN_PATHS]:
        before, after = _pair(p)
        lines.append(f"  - {_code(p.path)}{option}: {_code(before)} → {_code(after)}")
    if len(shown) > MARKDOWN_PATHS:
        lines.append(f"  - … {len(shown) - MARKDOWN_PATHS} more paths")
    if c.action == ADDED:
        lines.append(f"  - {md_text(_evidence_line(c.evidence))}")
    elif c.evidence_before is not None and _evidence_moved(c):
        lines.append(f"  - evidence: {md_text(_evidence_moved(c))}")
    return lines


def _folded(summary: str, body: list[str]) -> list[str]:
    return [f"<details><summary>{md_text(summary)}</summary>", "", *body, "", "</details>", ""]


@_without_gc
def diff_json(diff: ReportDiff) -> dict[str, Any]:
    """The diff for tools; values as in the reports (secrets masked)."""

    def paths(items: tuple[PathChange, ...]) -> list[dict[str, Any]]:
        return [{"path": p.path, **({"before": p.before} if p.before is not ABSENT else {}),
                 **({"after": p.after} if p.after is not ABSENT else {})} for p in items]

    def change(c: ResourceChange) -> dict[str, Any]:
        row: dict[str, Any] = {"action": c.action, "urn": c.urn, "type": c.type, "name": c.name}
        if c.object:
            row.update(object=c.object, release=c.release)
        if c.paths:
            row["paths"] = paths(c.paths)
        if c.options:
            row["options"] = paths(c.options)
        row["evidence"] = c.evidence
        if c.evidence_before is not None:
            row["evidenceBefore"] = c.evidence_before
        return row

    flipped = {p.policy for p in diff.flips}  # once: a base report may hold any number of rules
    return {
        "reportVersion": REPORT_VERSION,
        "stack": diff.stack,
        "summary": diff.summary(),
        "changed": diff.changed,
        "passed": {"before": diff.passed_before, "after": diff.passed_after},
        "resources": [change(c) for c in diff.resources],
        "kubernetesObjects": [change(c) for c in diff.objects],
        "policies": [{"policy": p.policy, "level": p.level, "before": p.before, "after": p.after,
                      "flipped": p.policy in flipped} for p in diff.policies],
        "violations": {"new": diff.violations_new, "resolved": diff.violations_resolved},
        "engineErrors": {"new": diff.engine_errors_new, "resolved": diff.engine_errors_resolved},
        "security": security_json(diff.security),
    }
