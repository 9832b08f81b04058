"""`mlplat pin`: read, where the registries answer, the digest each image tag and chart
version of the plan names upstream, and write the missing ones into infra/versions.py.

- An image: the manifest (the multi-arch index where there is one) `source:tag` names,
  read with skopeo, as `mlplat mirror` reads it before it copies.
- A chart from an https repository: the archive's sha256 (Helm checks it against the
  repository's index as it pulls); from an OCI registry: its manifest's digest.
- A pin that exists and that the tag still names is left alone. One the tag no longer
  names (the tag moved upstream) is refused, one line each, unless `--update NAME` says
  to take the new digest: a moved tag is a change to review, never applied quietly.
- A registry that does not answer leaves its entries as they were, and says so.

The file is edited where each `Image(...)` or `Chart(...)` call is (read with `ast`), so
comments and layout stay. The policy configs' `k8s-images-pinned.awaitingPin` entries of
the images pinned go with them. `--dry-run` writes nothing.
"""

from __future__ import annotations

import ast
import json
import runpy
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infra.skopeo import RegistryError, Skopeo, host_of
from workloads import inputs

AWAITING_RULE, AWAITING_KEY = "k8s-images-pinned", "awaitingPin"
PLAN_LIMIT = 1 << 20  # infra/versions.py is about 30 kB


class PinError(Exception):
    """Bad input: one line, exit 2."""


@dataclass(frozen=True)
class Entry:
    kind: str  # image | chart
    name: str
    reference: str  # what is read upstream: host/path:tag, or an https chart repository
    version: str
    digest: str  # the pin in the file ("" where none)
    value_span: tuple[int, int] | None  # the digest literal's bytes in the file, where there is one
    insert_at: int  # where a new digest goes: after the version argument
    indent: int  # the first argument's column, for the continuation line

    @property
    def key(self) -> str:
        """`image kueue` and `chart kueue` are two entries."""
        return f"{self.kind} {self.name}"


@dataclass
class Outcome:
    # By Entry.key:
    pinned: dict[str, str] = field(default_factory=dict)  # new digest (no pin before)
    updated: dict[str, tuple[str, str]] = field(default_factory=dict)  # (old, new), with --update
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)  # (pinned, upstream): refused
    unchanged: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # why

    @property
    def changes(self) -> dict[str, str]:
        return {**self.pinned, **{key: new for key, (_old, new) in self.updated.items()}}


def read_plan(path: Path, region: str) -> list[Entry]:
    """Every mirrored image and chart of the plan file, with where its digest is written."""
    try:
        # Bounded first: a FIFO or a device named as the plan is refused, never read forever.
        data = inputs.read_bytes(path, "plan file", PLAN_LIMIT)
        scope = runpy.run_path(str(path))
    except inputs.InputError as err:
        raise PinError(str(err)) from None
    except (OSError, SyntaxError) as err:
        raise PinError(f"{path}: cannot be read as the plan ({err}); name infra/versions.py or a copy of it") from None
    images, charts = scope.get("IMAGES"), scope.get("CHARTS")
    if not isinstance(images, dict) or not isinstance(charts, dict):
        raise PinError(f"{path}: holds no IMAGES and CHARTS; name infra/versions.py or a copy of it")
    calls = _calls(data)
    entries = []
    for kind, plan in (("image", images), ("chart", charts)):
        for name, item in plan.items():
            if getattr(item, "built_here", False):
                continue
            call = calls.get((kind, name))
            if call is None:
                raise PinError(f"{path}: {kind} {name} is not declared by a literal {kind.title()}({name!r}, ...) "
                               "call; the pin cannot be written")
            if kind == "image":
                reference, version = item.upstream(region), item.tag
            else:
                reference = (f"{item.repository.removeprefix('oci://')}/{item.name}:{item.version}"
                             if item.repository.startswith("oci://") else item.repository)
                version = item.version
            entries.append(Entry(kind, name, reference, version, item.digest, *call))
    return entries


def _calls(data: bytes) -> dict[tuple[str, str], tuple[tuple[int, int] | None, int, int]]:
    """(kind, name) -> (the digest literal's span, where to insert one, the indent)."""
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def at(line: int, column: int) -> int:  # ast columns are UTF-8 byte offsets
        return starts[line - 1] + column

    found = {}
    for node in ast.walk(ast.parse(data)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Image", "Chart")
                and node.args and isinstance(node.args[0], ast.Constant) and len(node.args) >= 3):
            continue
        kind = node.func.id.lower()
        digest = node.args[3] if len(node.args) >= 4 else next(
            (k.value for k in node.keywords if k.arg == "digest"), None)
        span = (at(digest.lineno, digest.col_offset), at(digest.end_lineno, digest.end_col_offset)) if digest else None
        version = node.args[2]
        found[(kind, node.args[0].value)] = (span, at(version.end_lineno, version.end_col_offset),
                                             node.args[0].col_offset)
    return found


def resolve(entries: Sequence[Entry], skopeo: Skopeo, update: Iterable[str] = (),
            progress: Callable[[str], None] = lambda _line: None) -> Outcome:
    """What each tag names upstream, against its pin."""
    update = set(update)
    outcome = Outcome()
    for entry in entries:
        progress(f"{entry.key}: reading {entry.reference}")
        try:
            upstream = _upstream(entry, skopeo)
        except RegistryError as err:
            outcome.unreachable[entry.key] = str(err)[:200]
            continue
        if upstream is None:
            outcome.unreachable[entry.key] = f"{entry.reference} names no manifest"
        elif not entry.digest:
            outcome.pinned[entry.key] = upstream
        elif upstream == entry.digest:
            outcome.unchanged.append(entry.key)
        elif entry.name in update:
            outcome.updated[entry.key] = (entry.digest, upstream)
        else:
            outcome.moved[entry.key] = (entry.digest, upstream)
    return outcome


def _upstream(entry: Entry, skopeo: Skopeo) -> str | None:
    if entry.kind == "image" or not entry.reference.startswith(("http://", "https://")):
        manifest = skopeo.inspect(entry.reference)
        return manifest.digest if manifest else None
    from helm_python import chart as helm_chart

    from infra.chart_cache import ChartCacheError, pull

    with tempfile.TemporaryDirectory(prefix="mlplat-pin-") as folder:
        try:
            [result] = pull([(entry.name, entry.reference, entry.version)], Path(folder))
        except ChartCacheError as err:
            raise RegistryError(entry.reference.split("/")[2], str(err)) from None
        return helm_chart.digest(result.path)


def write_plan(path: Path, entries: Sequence[Entry], digests: dict[str, str]) -> None:
    """Each digest into its call: the literal replaced, or a new argument after the version."""
    data = path.read_bytes()
    edits = []
    for entry in entries:
        if entry.key not in digests:
            continue
        literal = json.dumps(digests[entry.key]).encode()
        if entry.value_span is not None:
            edits.append((*entry.value_span, literal))
        else:
            edits.append((entry.insert_at, entry.insert_at, b",\n" + b" " * entry.indent + literal))
    for start, end, text in sorted(edits, reverse=True):
        data = data[:start] + text + data[end:]
    ast.parse(data)  # never write a file Python cannot read
    path.write_bytes(data)


def drop_awaiting(config_dir: Path, pinned_images: Iterable[str]) -> list[Path]:
    """Remove `mirror/<image>` from every policy config's awaiting list; the files changed."""
    gone = {f"mirror/{name}" for name in pinned_images}
    changed = []
    for path in sorted(config_dir.glob("*.json")):
        config = json.loads(path.read_text())
        rule = config.get(AWAITING_RULE)
        waiting = rule.get(AWAITING_KEY) if isinstance(rule, dict) else None
        if not isinstance(waiting, list):
            continue
        kept = [e for e in waiting if not (isinstance(e, dict) and e.get("repository") in gone)]
        if len(kept) != len(waiting):
            rule[AWAITING_KEY] = kept
            path.write_text(json.dumps(config, indent=2) + "\n")
            changed.append(path)
    return changed


def report(outcome: Outcome, entries: Sequence[Entry], dry_run: bool) -> list[str]:
    """The lines `mlplat pin` prints: what it pins (or would), what moved, what it could not read."""
    by_key = {e.key: e for e in entries}
    verb = "would pin" if dry_run else "pinned"
    lines = [f"{verb} {k} {by_key[k].version}: {d}" for k, d in outcome.pinned.items()]
    lines += [f"{'would update' if dry_run else 'updated'} {k} {by_key[k].version}: {old} -> {new}"
              for k, (old, new) in outcome.updated.items()]
    lines += [f"moved: {k} {by_key[k].version} now names {new}, pinned {old}; review the release, then run "
              f"`mlplat pin --update {by_key[k].name}`" for k, (old, new) in outcome.moved.items()]
    lines += [f"not read: {k} ({why})" for k, why in outcome.unreachable.items()]
    lines.append(f"{len(outcome.pinned)} new, {len(outcome.updated)} updated, {len(outcome.unchanged)} unchanged, "
                 f"{len(outcome.moved)} moved, {len(outcome.unreachable)} not read")
    return lines


def hosts(entries: Sequence[Entry]) -> set[str]:
    """The registries the entries are read from (for their logins)."""
    return {host_of(e.reference) for e in entries if not e.reference.startswith(("http://", "https://"))}


def select(entries: Sequence[Entry], only: Sequence[str], update: Sequence[str]) -> list[Entry]:
    """The entries named by --only (all when none), after checking every name given."""
    names = {e.name for e in entries}
    for flag, given in (("--only", only), ("--update", update)):
        unknown = sorted(set(given) - names)
        if unknown:
            raise PinError(f"{flag} {unknown[0]}: not a mirrored image or chart of the plan; names: "
                           f"{', '.join(sorted(names))}")
    return [e for e in entries if not only or e.name in only]
