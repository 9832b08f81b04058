"""The Triton model repository: `<model>/config.pbtxt` and `<model>/<version>/model.onnx`,
kept in a local directory or in the models bucket (`s3://bucket/prefix`).

Version numbers only ever grow and are never reused: publishing writes the highest number
ever issued plus one. Triton's version policy serves the newest N, so a client can pin the
previous version at once.

Serving pods copy the repository when they start (components/inference_spec.py), possibly
while a version is being published or rolled back, so every change leaves a consistent
repository at each step:

- a version's files go up first and its `PUBLISHED` marker last; a pod's copy drops any
  version folder without the marker, so it never serves a half-uploaded version, and only
  marked versions count as published;
- retiring a version (rollback, or pruning) deletes its marker first, then moves the folder
  to `retired-<N>`: Triton ignores folders that are not numbers, pods do not copy them, the
  objects stay restorable, and N is never issued again;
- every version of a model shares its `config.pbtxt` (Triton has one config per model), so
  a new version whose inputs or outputs differ from the published config is refused; each
  version also keeps a copy of the config it was published with, which a rollback puts
  back;
- after publishing, versions older than the newest `keep + 1` are retired (one spare beyond
  what Triton serves, so a rollback still leaves `keep` versions served), and so are the
  unmarked leftovers of failed exports; this bounds the pods' copies.

One export or rollback of a model at a time: two at once could both take the same number.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from workloads import inputs
from workloads.serve.triton_config import CONFIG_FILENAME

PUBLISHED_MARKER = "PUBLISHED"
SOURCE_LINE = "source "  # the marker's line naming the registered version published
RETIRED_PREFIX = "retired-"
# The config a version was published with, kept in its folder (Triton reads only the
# model's own config.pbtxt and ignores this file).
VERSION_CONFIG = "published-config.pbtxt"
CONFIG_LIMIT = 1 << 20  # a config.pbtxt is a few kilobytes; a bigger file is not one


class StoreError(Exception):
    """The repository could not be read or written; one line for the user."""


class ModelStore(Protocol):
    def keys(self, model: str) -> list[str]:
        """Every file under `<model>/`, relative to it ("3/model.onnx", "config.pbtxt")."""
        ...

    def read_text(self, relative: str) -> str: ...

    def copy_file(self, relative: str, new_relative: str) -> None: ...

    def put_tree(self, local: Path, relative: str) -> None: ...

    def put_file(self, local: Path, relative: str) -> None: ...

    def remove_file(self, relative: str) -> None: ...

    def move_tree(self, relative: str, new_relative: str) -> None: ...

    def describe(self) -> str: ...


def _number(name: str) -> int | None:
    # Triton ignores folders that are not numbers or start with 0; so do we.
    return int(name) if name.isdigit() and not name.startswith("0") else None


@dataclass
class LocalStore:
    """A model repository on a local or mounted file system."""

    root: Path

    def _fail(self, err: OSError) -> StoreError:
        where = err.filename or self.root
        return StoreError(f"{where}: {err.strerror or err}")

    def keys(self, model: str) -> list[str]:
        directory = self.root / model
        try:
            if not directory.is_dir():
                return []
            return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
        except OSError as err:
            raise self._fail(err) from None

    def read_text(self, relative: str) -> str:
        try:
            return inputs.read_text(self.root / relative, "model config", CONFIG_LIMIT)
        except inputs.InputError as err:
            raise StoreError(str(err)) from None

    def put_tree(self, local: Path, relative: str) -> None:
        target = self.root / relative
        if target.exists():
            raise StoreError(f"{target} already exists; versions are never overwritten")
        try:
            shutil.copytree(local, target)
        except OSError as err:
            raise self._fail(err) from None

    def put_file(self, local: Path, relative: str) -> None:
        target = self.root / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, target)
        except OSError as err:
            raise self._fail(err) from None

    def copy_file(self, relative: str, new_relative: str) -> None:
        self.put_file(self.root / relative, new_relative)

    def remove_file(self, relative: str) -> None:
        try:
            (self.root / relative).unlink(missing_ok=True)
        except OSError as err:
            raise self._fail(err) from None

    def move_tree(self, relative: str, new_relative: str) -> None:
        try:
            (self.root / relative).rename(self.root / new_relative)
        except OSError as err:
            raise self._fail(err) from None

    def describe(self) -> str:
        return str(self.root)


Runner = Callable[[Sequence[str]], str]


def aws_cli(argv: Sequence[str]) -> str:
    """Run one AWS CLI command and return its stdout; its error becomes one line."""
    if shutil.which(argv[0]) is None:
        raise StoreError("the AWS CLI (`aws`) is not installed; install it or publish to a local directory")
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise StoreError(f"{' '.join(argv[:3])} failed: {detail[-1] if detail else f'exit {done.returncode}'}")
    return done.stdout


@dataclass
class S3Store:
    """A model repository in the models bucket, written with the AWS CLI.

    Objects are encrypted by the bucket's default (the models CMK): no `--sse` flag is
    passed, because `--sse aws:kms` without a key id would pick the AWS-managed key instead.
    """

    uri: str  # s3://bucket[/prefix]
    region: str | None = None  # pins the CLI to the bucket's region when given
    run: Runner = field(default=aws_cli)

    def __post_init__(self) -> None:
        if not self.uri.startswith("s3://") or len(self.uri) <= len("s3://"):
            raise StoreError(f"{self.uri!r} is not an s3://bucket[/prefix] URI")
        self.uri = self.uri.rstrip("/")
        self.bucket, _, prefix = self.uri[len("s3://"):].partition("/")
        self.key_prefix = f"{prefix}/" if prefix else ""

    def _region(self) -> tuple[str, ...]:
        return ("--region", self.region) if self.region else ()

    def _s3(self, *args: str) -> str:
        # --only-show-errors exists for the transfer commands (cp, mv, rm, sync), not for ls.
        return self.run(["aws", "s3", *args, *self._region(), "--only-show-errors"])

    def keys(self, model: str) -> list[str]:
        # The API call rather than `aws s3 ls`, which fails on a prefix that does not exist
        # yet (a model's first version); the CLI follows the pages itself.
        base = f"{self.key_prefix}{model}/"
        out = self.run(["aws", "s3api", "list-objects-v2", "--bucket", self.bucket, "--prefix", base,
                        "--output", "json", *self._region()])
        try:
            listing = json.loads(out) if out.strip() else {}
        except json.JSONDecodeError:
            raise StoreError(f"{self.uri}/{model}/: the AWS CLI's listing is not JSON") from None
        return sorted(c["Key"][len(base):] for c in listing.get("Contents") or [])

    def read_text(self, relative: str) -> str:
        return self.run(["aws", "s3", "cp", f"{self.uri}/{relative}", "-", *self._region()])

    def put_tree(self, local: Path, relative: str) -> None:
        self._s3("cp", "--recursive", str(local), f"{self.uri}/{relative}/")

    def put_file(self, local: Path, relative: str) -> None:
        self._s3("cp", str(local), f"{self.uri}/{relative}")

    def copy_file(self, relative: str, new_relative: str) -> None:
        self._s3("cp", f"{self.uri}/{relative}", f"{self.uri}/{new_relative}")

    def remove_file(self, relative: str) -> None:
        self._s3("rm", f"{self.uri}/{relative}")

    def move_tree(self, relative: str, new_relative: str) -> None:
        self._s3("mv", "--recursive", f"{self.uri}/{relative}/", f"{self.uri}/{new_relative}/")

    def describe(self) -> str:
        return self.uri


def open_store(target: str, region: str | None = None, run: Runner = aws_cli) -> ModelStore:
    if target.startswith("s3://"):
        return S3Store(target, region=region, run=run)
    if "://" in target:
        raise StoreError(f"{target!r}: only s3:// URIs and local directories are supported")
    path = Path(target)
    if path.exists() and not path.is_dir():
        raise StoreError(f"{target}: is a file; give a directory or an s3:// URI")
    return LocalStore(path)


@dataclass(frozen=True)
class Layout:
    """What one model's folder holds, from one listing of it."""

    keys: frozenset[str]  # every file, relative to the model's folder
    published: list[int]  # version folders with their marker, oldest first
    unfinished: list[int]  # version folders without it: an upload in progress, or a failed one
    retired: list[int]

    @property
    def has_config(self) -> bool:
        return CONFIG_FILENAME in self.keys

    @property
    def issued(self) -> int:
        return max([*self.published, *self.unfinished, *self.retired], default=0)


def layout(store: ModelStore, model: str) -> Layout:
    keys = frozenset(store.keys(model))
    folders = {key.split("/", 1)[0] for key in keys if "/" in key}
    numbered = {n for n in map(_number, folders) if n is not None}
    marked = {n for n in numbered if f"{n}/{PUBLISHED_MARKER}" in keys}
    retired = {n for f in folders if f.startswith(RETIRED_PREFIX)
               and (n := _number(f[len(RETIRED_PREFIX):])) is not None}
    return Layout(keys, sorted(marked), sorted(numbered - marked), sorted(retired))


def versions(store: ModelStore, model: str) -> list[int]:
    """The model's completely published versions, oldest first (what pods serve)."""
    return layout(store, model).published


def next_version(store: ModelStore, model: str) -> int:
    """One above every number ever issued: published, unfinished and retired."""
    return layout(store, model).issued + 1


def published_config(store: ModelStore, model: str, now: Layout | None = None) -> str | None:
    """The model's config.pbtxt, if it has one; `now` saves listing the folder again."""
    if not (now or layout(store, model)).has_config:
        return None
    return store.read_text(f"{model}/{CONFIG_FILENAME}")


def stage_version(staging: Path, model: str, version: int, config_text: str, files: Sequence[Path],
                  source: str = "") -> Path:
    """Lay out one version under `staging` as Triton expects it; returns the model folder.
    `source` (a registered version and its precision, `models:/<name>/<n> fp32`) goes into
    the marker, so an export that dies after publishing and before recording finds its
    version again (published_from)."""
    model_dir = staging / model
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=False)
    for file in files:
        shutil.copyfile(file, version_dir / file.name)
    (version_dir / VERSION_CONFIG).write_text(config_text)
    (model_dir / CONFIG_FILENAME).write_text(config_text)
    (model_dir / PUBLISHED_MARKER).write_text(f"{model} {version}\n" + (f"{SOURCE_LINE}{source}\n" if source else ""))
    return model_dir


def published_from(store: ModelStore, model: str, source: str, now: Layout | None = None) -> int | None:
    """The newest published version whose marker names `source`, or None: what a rerun of an
    export publishes instead of a second copy of the same registered version."""
    for version in reversed((now or layout(store, model)).published):
        marker = store.read_text(f"{model}/{version}/{PUBLISHED_MARKER}")
        if f"{SOURCE_LINE}{source}" in marker.splitlines():
            return version
    return None


def _retire(store: ModelStore, model: str, version: int) -> None:
    # The marker goes first: from then on no pod's copy serves this version, whatever
    # order the rest of the folder disappears in.
    store.remove_file(f"{model}/{version}/{PUBLISHED_MARKER}")
    store.move_tree(f"{model}/{version}", f"{model}/{RETIRED_PREFIX}{version}")


def publish(store: ModelStore, model_dir: Path, version: int, keep: int, protect: frozenset[int] = frozenset()) -> list[int]:
    """Upload the staged version's files, then the config, then the version's marker; then
    retire published versions older than the newest `keep + 1` and unfinished leftovers,
    never one in `protect` (the version a stack pins: its pods copy that version only).
    Returns the versions retired."""
    model = model_dir.name
    before = layout(store, model)
    if version <= before.issued:
        raise StoreError(f"{store.describe()}/{model}/{version} was issued before; versions are never overwritten")
    store.put_tree(model_dir / str(version), f"{model}/{version}")
    store.put_file(model_dir / CONFIG_FILENAME, f"{model}/{CONFIG_FILENAME}")
    store.put_file(model_dir / PUBLISHED_MARKER, f"{model}/{version}/{PUBLISHED_MARKER}")
    # The folder is now what it was plus this version (one export at a time): no need to list it again.
    published = [*before.published, version]
    old = sorted([*(v for v in published[:-(keep + 1)] if v not in protect), *before.unfinished])
    for number in old:
        _retire(store, model, number)
    return old


def rollback(store: ModelStore, model: str, protect: frozenset[int] = frozenset()) -> tuple[int, int]:
    """Retire the newest published version and put back the config the one before it was
    published with; returns (retired, now newest). Refuses to retire the last one, or one
    in `protect` (the version a stack pins: roll that back with a canary of another)."""
    now = layout(store, model)
    if len(now.published) < 2:
        raise StoreError(f"{store.describe()}/{model} has {len(now.published)} published version(s); rollback "
                         "needs an older one to go back to")
    newest, previous = now.published[-1], now.published[-2]
    if newest in protect:
        raise StoreError(f"{model} version {newest} is the version the stack serves (mlplat:inference.version); "
                         "roll back with `python -m workloads.serve canary --version <older>`, or abort the "
                         "rollout with `kubectl argo rollouts abort triton`")
    _retire(store, model, newest)
    if f"{previous}/{VERSION_CONFIG}" in now.keys:
        store.copy_file(f"{model}/{previous}/{VERSION_CONFIG}", f"{model}/{CONFIG_FILENAME}")
    return newest, previous
