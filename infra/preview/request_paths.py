"""The requests a change opens and closes: the project's IAM path table and every tenant's
generated paths (infra/checks/iam/paths.py), decided by the real evaluator on the base's
policies and on the head's.

A path is decided only where its input differs between the two sides (the request, the
principal's identity policies, the resource's policy): the same input gets the same answer,
so a change that touches no policy runs no evaluator at all. A role, or a tenant's data,
that exists on one side only is "absent", which allows nothing, on the other; anything else
that resolves on the base but not on the head is not decided, so that the head's own
outputs cannot switch a path off. Both sides' requests go to the evaluator together.

Where paths cannot be decided (no evaluator, a policy that is not a document, the limits
below), the diff says why and counts them as unjudged, which the broadening verdict treats
as widening. A base report from before reports carried the stack's outputs is said once and
not judged (docs/preview-diff.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from infra.checks.iam.evaluator import EvaluatorError, simulate
from infra.checks.iam.paths import ACCOUNT_REQUESTS, ALLOWED, OUTSIDE_PRINCIPALS, PATHS, TENANT_REQUESTS, Path, \
    tenant_paths
from infra.checks.iam.requests import NotInStack, simulation
from infra.checks.iam.stack import NoCloudLayer, NotReadable, StackPolicies, from_report

MAX_DECIDED = 5_000  # paths decided in one diff (both sides); past it, the rest are unjudged
# Tenant paths generated per side (roles x tenants x requests; prod's: 240). A report that
# names more (a hostile base) has them unjudged, not generated.
MAX_GENERATED = 20_000
# Bytes of evaluator input (each request carries its principal's and resource's policies).
MAX_PAYLOAD = 32 << 20
EVALUATOR_SECONDS = 60


@dataclass(frozen=True)
class PathFlip:
    path: Path
    before: str  # Allowed, ExplicitlyDenied, ImplicitlyDenied, or "absent" (not in that stack)
    after: str
    principal: str  # as shown: a role's resource name, else the principal as the request names it

    @property
    def opened(self) -> bool:
        return self.after == ALLOWED

    def line(self) -> str:
        return f"{self.principal} → {self.path.action} {self.path.resource.split(':', 1)[-1]}"


@dataclass
class PathsDiff:
    flips: list[PathFlip] = field(default_factory=list)
    compared: int = 0  # paths whose input differs between the sides, decided on both
    resolved: int = 0  # paths that resolve on either side
    note: str = ""  # why paths were not (all) decided
    unjudged: int = 0  # changed paths left undecided: widening until reviewed
    seconds: float = 0.0

    def say(self, note: str) -> None:
        self.note = f"{self.note}; {note}" if self.note else note

    @property
    def opened(self) -> list[PathFlip]:
        return [f for f in self.flips if f.opened]

    @property
    def closed(self) -> list[PathFlip]:
        return [f for f in self.flips if not f.opened]

    def summary(self) -> str:
        if self.note and not self.compared:
            return f"request paths: {self.note}"
        said = (f"request paths: {len(self.opened)} opened, {len(self.closed)} closed "
                f"({self.compared} of the stack's {self.resolved} changed and were decided)")
        return f"{said}; {self.note}" if self.note else said


def _side(report: dict[str, Any]) -> StackPolicies | None:
    try:
        return from_report(report)
    except NoCloudLayer:
        return None


def _input(path: Path, stack: StackPolicies | None) -> dict[str, Any] | None:
    if stack is None:
        return None
    try:
        return simulation(path, stack)
    except NotInStack:
        return None


def _generated(roles: dict[str, dict[str, str]], diff: PathsDiff) -> tuple[Path, ...]:
    """tenant_paths(roles), unless there would be more than MAX_GENERATED."""
    count = len(roles) * (sum(len(r) for r in roles.values()) * len(TENANT_REQUESTS)
                          + len(OUTSIDE_PRINCIPALS) * len(ACCOUNT_REQUESTS))
    if count > MAX_GENERATED:
        diff.unjudged += 1
        diff.say(f"{len(roles)} tenants' paths ({count}) past the diff's limit of {MAX_GENERATED}, not decided")
        return ()
    return tenant_paths(roles)


def _gone(path: Path, head: StackPolicies, tenants: Container[str]) -> bool:
    """The path's principal is a role the head no longer has, or the tenant whose data it
    asks for is gone (`tenants`: the head's): nothing there is allowed."""
    return (path.principal.startswith("role:") and path.principal[5:] not in head.roles) or \
        bool(path.tenant and path.tenant not in tenants)


def path_diff(base: dict[str, Any], head: dict[str, Any]) -> PathsDiff:
    """The paths that flip between two reports of one stack (as `as_read` gives them)."""
    started = time.perf_counter()
    diff = PathsDiff()
    if "outputs" not in base and "outputs" in head:
        diff.note = "the base report carries no stack outputs (made before they were kept): paths not compared"
        return diff
    try:
        before, after = _side(base), _side(head)
    except NotReadable as err:
        diff.note, diff.unjudged = f"not decided: {err}", 1
        return diff
    if before is None and after is None:
        return diff  # a cluster layer, or a program with no cloud layer's outputs: no paths
    if before is not None and after is None:
        diff.say("the head holds no cloud layer's outputs (buckets, keys) where the base did: paths not decided")
        diff.unjudged += 1
        return diff
    if before is not None and after is not None and before.unread != after.unread:
        changed_unread = sorted(before.unread ^ after.unread)
        diff.unjudged += len(changed_unread)
        diff.say(f"{len(changed_unread)} grants this diff does not resolve into paths changed (first: "
                 f"{changed_unread[0][:120]}): review them in the grants below")
    # One path per request: the table's name where a tenant's generated path asks the same.
    tenants_before = before.tenant_roles() if before is not None else {}
    tenants_after = after.tenant_roles() if after is not None else {}
    paths: dict[tuple[Any, ...], Path] = {}
    for more in (PATHS, _generated(tenants_before, diff) if before is not None else (),
                 _generated(tenants_after, diff) if after is not None else ()):
        for path in more:
            paths.setdefault((path.principal, path.action, path.resource, tuple(sorted(path.context.items())),
                              path.service_grant), path)
    requests: list[tuple[str, dict[str, Any]]] = []
    changed: list[tuple[int, Path, bool, bool]] = []
    over = 0
    lost = 0
    payload = 0
    for index, path in enumerate(paths.values()):
        old, new = _input(path, before), _input(path, after)
        if old is None and new is None:
            continue
        diff.resolved += 1
        if old == new:  # the same input: the same answer
            continue
        if old is not None and new is None and not _gone(path, after, tenants_after):
            # What the path names went missing from the head's outputs while its principal is
            # still there: the head's own outputs must not switch a path off.
            lost += 1
            continue
        size = sum(len(json.dumps(sim)) for sim in (old, new) if sim is not None)
        if len(requests) + (old is not None) + (new is not None) > MAX_DECIDED or payload + size > MAX_PAYLOAD:
            over += 1
            continue
        payload += size
        if old is not None:
            requests.append((f"base {index}", old))
        if new is not None:
            requests.append((f"head {index}", new))
        changed.append((index, path, old is not None, new is not None))
    diff.unjudged += over + lost
    if lost:
        diff.say(f"{lost} paths resolve on the base but not on the head, whose principal is still there "
                 "(a bucket, key, secret or user gone from its outputs): not decided")
    if over:
        diff.say(f"{over} changed paths past the diff's limit of {MAX_DECIDED}, not decided")
    if not requests:
        diff.seconds = time.perf_counter() - started
        return diff
    requests_by_id = dict(requests)
    try:
        answers = simulate(requests, timeout=EVALUATOR_SECONDS)
    except EvaluatorError as err:
        diff.unjudged += len(changed)
        diff.say(f"{len(changed)} changed paths not decided: {err}")
        diff.seconds = time.perf_counter() - started
        return diff
    refused = []
    for index, path, on_base, on_head in changed:
        old = answers.get(f"base {index}", {"result": "Error"}) if on_base else {"result": "absent"}
        new = answers.get(f"head {index}", {"result": "Error"}) if on_head else {"result": "absent"}
        if "Error" in (old["result"], new["result"]):
            diff.unjudged += 1
            refused.append(path.name)
            continue
        diff.compared += 1
        if (old["result"] == ALLOWED) != (new["result"] == ALLOWED):
            shown = path.principal[5:] if path.principal.startswith("role:") else \
                requests_by_id[f"head {index}" if on_head else f"base {index}"]["request"]["principal"]
            diff.flips.append(PathFlip(path, old["result"], new["result"], shown))
    if refused:
        diff.say(f"the evaluator refused {len(refused)} changed paths (first: {refused[0]}), not decided")
    diff.seconds = time.perf_counter() - started
    return diff
