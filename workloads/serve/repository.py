"""The Triton model repository: `<model>/config.pbtxt` and `<model>/<version>/model.onnx`,
kept in a local directory or in the models bucket (`s3://bucket/prefix`).

Versions only ever grow: publishing writes version max+1, and Triton's version policy
serves the newest N, so a client can pin the previous version at once. Rolling back
removes the newest version directory (the bucket is versioned, so the objects can still
be restored) and the next pod restart serves the one before it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from workloads.serve.triton_config import CONFIG_FILENAME


class StoreError(Exception):
    """The repository could not be read or written; one line for the user."""


class ModelStore(Protocol):
    def versions(self, model: str) -> list[int]: ...

    def put_tree(self, local: Path, relative: str) -> None: ...

    def put_file(self, local: Path, relative: str) -> None: ...

    def remove_tree(self, relative: str) -> None: ...

    def describe(self) -> str: ...


def _numeric(names: list[str]) -> list[int]:
    # Triton ignores non-numeric entries; so do we (e.g. a stray "tmp/" folder).
    return sorted(int(n) for n in names if n.isdigit() and int(n) > 0)


@dataclass
class LocalStore:
    """A model repository on a local or mounted file system."""

    root: Path

    def versions(self, model: str) -> list[int]:
        directory = self.root / model
        if not directory.is_dir():
            return []
        return _numeric([p.name for p in directory.iterdir() if p.is_dir()])

    def put_tree(self, local: Path, relative: str) -> None:
        target = self.root / relative
        if target.exists():
            raise StoreError(f"{target} already exists; versions are never overwritten")
        shutil.copytree(local, target)

    def put_file(self, local: Path, relative: str) -> None:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, target)

    def remove_tree(self, relative: str) -> None:
        shutil.rmtree(self.root / relative)

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

    def _aws(self, *args: str) -> str:
        region = ("--region", self.region) if self.region else ()
        return self.run(["aws", "s3", *args, *region, "--only-show-errors"])

    def versions(self, model: str) -> list[int]:
        # `aws s3 ls` lists "PRE <name>/" for each common prefix under the model.
        listing = self._aws("ls", f"{self.uri}/{model}/")
        names = [line.split()[-1].rstrip("/") for line in listing.splitlines() if line.strip().startswith("PRE ")]
        return _numeric(names)

    def put_tree(self, local: Path, relative: str) -> None:
        self._aws("cp", "--recursive", str(local), f"{self.uri}/{relative}/")

    def put_file(self, local: Path, relative: str) -> None:
        self._aws("cp", str(local), f"{self.uri}/{relative}")

    def remove_tree(self, relative: str) -> None:
        self._aws("rm", "--recursive", f"{self.uri}/{relative}/")

    def describe(self) -> str:
        return self.uri


def open_store(target: str, region: str | None = None, run: Runner = aws_cli) -> ModelStore:
    if target.startswith("s3://"):
        return S3Store(target, region=region, run=run)
    if "://" in target:
        raise StoreError(f"{target!r}: only s3:// URIs and local directories are supported")
    return LocalStore(Path(target))


def stage_version(staging: Path, model: str, version: int, config_text: str, files: Sequence[Path]) -> Path:
    """Lay out one version under `staging` as Triton expects it; returns the model folder."""
    model_dir = staging / model
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=False)
    for file in files:
        shutil.copyfile(file, version_dir / file.name)
    (model_dir / CONFIG_FILENAME).write_text(config_text)
    return model_dir


def publish(store: ModelStore, model_dir: Path, version: int) -> None:
    """Upload the staged version, then the config: a reader never sees a config that
    names a batching setup whose model files are still on their way."""
    model = model_dir.name
    if version in store.versions(model):
        raise StoreError(f"{store.describe()}/{model}/{version} already exists; versions are never overwritten")
    store.put_tree(model_dir / str(version), f"{model}/{version}")
    store.put_file(model_dir / CONFIG_FILENAME, f"{model}/{CONFIG_FILENAME}")


def next_version(store: ModelStore, model: str) -> int:
    return max(store.versions(model), default=0) + 1


def rollback(store: ModelStore, model: str) -> tuple[int, int]:
    """Remove the newest version; returns (removed, now newest). Refuses to remove the last one."""
    versions = store.versions(model)
    if len(versions) < 2:
        raise StoreError(
            f"{store.describe()}/{model} has {len(versions)} version(s); rollback needs an older one to go back to"
        )
    store.remove_tree(f"{model}/{versions[-1]}")
    return versions[-1], versions[-2]
