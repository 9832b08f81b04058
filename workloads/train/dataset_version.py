"""Dataset versions: immutable, content-addressed manifests of a shard directory.

A manifest (`dataset.json` beside the shards) names every shard with its SHA-256, size and
token count, the tokenizer's hash, the sources the shards were made from and the sample
count at each sequence length a run asks for. Its id is the SHA-256 of its canonical JSON
(id left out), so two directories with the same bytes and provenance have the same id, and
any change to a shard, the tokenizer or the sources makes a new version.

The trainer records the id in every checkpoint and refuses to resume on other data; it
checks the shards against the manifest before it resumes, and names the first shard that
differs. S3 object versions cannot stand in for this: they expire, and they say nothing
about which objects made one training set.

Not DVC: a DVC file needs a Git repository and a DVC remote where the pods run, and says
nothing about tokenizers or samples; this file is read by a pod from the shard directory
alone, and logged to MLflow as the run's input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workloads import inputs
from workloads.hashing import content_id, file_sha256
from workloads.train.data import HEADER_BYTES, list_shards, read_shard

MANIFEST = "dataset.json"
FORMAT = "mlplat.dataset/v1"
# About 160 bytes a shard: 100,000 shards, far more than any dataset has.
MANIFEST_LIMIT = 16 << 20


class DatasetMismatch(Exception):
    """The shards, or the manifest itself, are not what the manifest says: one line."""


def _shard_sha256(path: Path) -> str:
    try:
        return file_sha256(path)
    except ValueError as err:  # a FIFO or a device named like a shard: refused, never opened
        raise DatasetMismatch(f"{err} (a FIFO or a device named like a shard); move it out of the data directory") from None


class Shard(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[^/\\]+\.bin$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=HEADER_BYTES)
    tokens: int = Field(ge=0)


class DatasetVersion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = FORMAT
    shards: tuple[Shard, ...] = Field(min_length=1)
    tokenizer: str  # "sha256:<hex>" of the tokenizer file, or a name with its own version
    sources: tuple[str, ...] = ()  # where the shards were made from (s3://..., hf://...)
    id: str = ""  # sha256:<hex> of the rest; filled by `sealed`

    def content_id(self) -> str:
        return content_id(self.model_dump(mode="json", exclude={"id"}))

    def sealed(self) -> DatasetVersion:
        return self.model_copy(update={"id": self.content_id()})

    def samples(self, seq_len: int) -> int:
        """Samples of `seq_len + 1` tokens, as the loader cuts them (workloads/train/data.py)."""
        return sum(max(0, (s.tokens - 1) // seq_len) for s in self.shards)


def tokenizer_id(tokenizer: str | Path) -> str:
    """A tokenizer file's `sha256:<hex>`, or the given name where no such file exists."""
    path = Path(tokenizer)
    return f"sha256:{file_sha256(path)}" if path.is_file() else str(tokenizer)


def build(directory: str | Path, tokenizer: str | Path, sources: Iterable[str] = ()) -> DatasetVersion:
    """The manifest of every shard in `directory`, sealed with its id."""
    shards = []
    for path in list_shards(directory):
        shards.append(Shard(name=path.name, sha256=_shard_sha256(path), bytes=path.stat().st_size,
                            tokens=len(read_shard(path))))
    return DatasetVersion(shards=tuple(shards), tokenizer=tokenizer_id(tokenizer), sources=tuple(sources)).sealed()


def write(version: DatasetVersion, directory: str | Path) -> Path:
    """Write `dataset.json` into `directory`. A manifest is immutable: one that is there
    with another id is never replaced (make a new directory for a new version)."""
    path = Path(directory) / MANIFEST
    if path.exists():
        there = read(path)
        if there.id != version.id:
            raise DatasetMismatch(f"{path}: holds dataset {there.id}, not {version.id}; a dataset version is "
                                  "immutable: write the new shards to a new directory")
        return path
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(version.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    partial.replace(path)
    return path


def read(path: str | Path) -> DatasetVersion:
    """A manifest whose id is the hash of what it says (a hand-edited one is refused). It
    is read bounded (workloads/inputs.py): a regular file of at most MANIFEST_LIMIT bytes of
    JSON, nested and numbered within the reader's bounds."""
    path = Path(path)
    try:
        body = inputs.read_bytes(path, "dataset manifest", MANIFEST_LIMIT)
        inputs.load_json(body, str(path))  # the bounds; the model then reads the same bytes
        version = DatasetVersion.model_validate_json(body)
    except inputs.InputError as err:
        reason = str(err).removeprefix(f"{path}: ").removeprefix(f"{path}:").strip()
        raise DatasetMismatch(f"{path}: not a readable dataset manifest ({reason})") from None
    except (ValueError, ValidationError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DatasetMismatch(f"{path}: not a readable dataset manifest ({first})") from None
    if version.id != version.content_id():
        raise DatasetMismatch(f"{path}: its id {version.id} is not the hash of its content "
                              f"({version.content_id()}); the manifest was edited")
    return version


def verify(version: DatasetVersion, directory: str | Path) -> None:
    """The shards in `directory` are exactly the manifest's, byte for byte; otherwise one
    line naming the first shard that differs."""
    directory = Path(directory)
    present = {p.name for p in directory.glob("*.bin")}
    listed = {s.name for s in version.shards}
    if extra := sorted(present - listed):
        raise DatasetMismatch(f"{directory / extra[0]}: not in dataset {version.id} ({len(extra)} shard(s) not in "
                              "its manifest); a new shard makes a new dataset version")
    for shard in version.shards:
        path = directory / shard.name
        if not path.is_file():
            raise DatasetMismatch(f"{path}: missing; dataset {version.id} lists it")
        size = path.stat().st_size
        if size != shard.bytes or _shard_sha256(path) != shard.sha256:
            raise DatasetMismatch(f"{path}: does not match dataset {version.id} (sha256 or size differs from its "
                                  "manifest); restore the shard or make a new dataset version")


def load_or_build(directory: str | Path) -> DatasetVersion:
    """The directory's version: its manifest, checked against the shards, or (where there
    is none) one built from the shards as they are, unwritten (the directory may be
    read-only to the trainer)."""
    path = Path(directory) / MANIFEST
    if os.path.lexists(path):  # a link that leads nowhere is refused by read, not ignored
        version = read(path)
        verify(version, directory)
        return version
    return build(directory, tokenizer="unrecorded")
