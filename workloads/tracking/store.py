"""Checkpoints in the checkpoints bucket: each one copied from the shared file system with
a manifest of its files' SHA-256, and read back only when every hash matches.

Layout: `s3://<bucket>/<prefix>/<run id>/step_<8 digits>/<files>` and, written last so
its presence means the copy is whole, `.../step_<8 digits>/manifest.json`. Losing Lustre
loses no checkpoint. Credentials are the pod's (Pod Identity); `AWS_ENDPOINT_URL_S3`
points boto3 elsewhere (the tests' S3 server).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from workloads.hashing import file_sha256

MANIFEST = "manifest.json"
MANIFEST_LIMIT = 16 << 20  # a 7B model's sharded checkpoint lists a few thousand files: under 1 MB
FORMAT = "mlplat.checkpoint/v1"


class StoreError(Exception):
    """A checkpoint cannot be stored or read back as it was: one line."""


class StoredFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(pattern=r"^[^/][^\\]*$")  # relative to the checkpoint
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        # A manifest names files inside its checkpoint: `a/../../x` would be written
        # outside the folder the download goes to.
        if any(part in ("", ".", "..") for part in value.split("/")):
            raise ValueError(f"{value!r} leaves the checkpoint's folder or has an empty part")
        return value


class CheckpointManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = FORMAT
    run_id: str
    step: int = Field(ge=0)
    dataset: str  # the dataset version trained on
    files: tuple[StoredFile, ...] = Field(min_length=1)
    config: dict[str, Any]  # the checkpoint's config.json (model, precision, layout)

    @field_validator("files")
    @classmethod
    def _once(cls, files: tuple[StoredFile, ...]) -> tuple[StoredFile, ...]:
        paths = [f.path for f in files]
        if len(set(paths)) != len(paths):
            raise ValueError("a file is listed twice")
        return files


@dataclass(frozen=True)
class Location:
    bucket: str
    key: str  # no leading or trailing slash

    @classmethod
    def parse(cls, uri: str) -> Location:
        if not uri.startswith("s3://") or not uri[5:].split("/", 1)[0]:
            raise StoreError(f"{uri!r} is not s3://bucket[/prefix]")
        bucket, _, key = uri[5:].partition("/")
        return cls(bucket, key.strip("/"))

    def child(self, *parts: str) -> Location:
        return Location(self.bucket, "/".join(p for p in (self.key, *parts) if p))

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def _s3(region: str | None = None) -> Any:
    import boto3

    return boto3.client("s3", region_name=region)


def _client_error(err: Exception, what: str) -> StoreError:
    # boto3's managed upload wraps the service's answer (S3UploadFailedError): its code is
    # on the ClientError it was raised from.
    answer = err if hasattr(err, "response") else (err.__context__ or err)
    code = getattr(answer, "response", {}).get("Error", {}).get("Code", type(err).__name__)
    return StoreError(f"{what}: {code}")


def check_scope(destination: str, region: str | None = None) -> None:
    """Refuse keys that reach past `destination` (s3://<bucket>/runs/<tenant>): where they
    can list the prefix above it or the bucket's root, every tenant's runs are in reach of
    whoever holds them, and a tenant's developers do. Raises StoreError naming the prefix;
    a store that answers AccessDenied there passes."""
    from botocore.exceptions import BotoCoreError, ClientError

    where = Location.parse(destination)
    parent = where.key.rpartition("/")[0]
    for prefix in dict.fromkeys((f"{parent}/" if parent else "", "")):
        try:
            _s3(region).list_objects_v2(Bucket=where.bucket, Prefix=prefix, Delimiter="/", MaxKeys=1)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("AccessDenied", "403"):
                continue
            raise _client_error(err, f"cannot check the store's keys on s3://{where.bucket}/{prefix}") from None
        except BotoCoreError as err:
            raise _client_error(err, f"cannot check the store's keys on s3://{where.bucket}/{prefix}") from None
        raise StoreError(f"the object store keys can list s3://{where.bucket}/{prefix}, beyond "
                         f"{where.uri}/: every tenant's data is in reach of this tenant; give it keys scoped to "
                         "its own prefixes (docs/onprem.md)")


def upload(checkpoint: Path, destination: str, *, run_id: str, dataset: str, config: Mapping[str, Any],
           region: str | None = None) -> tuple[str, str]:
    """Copy the checkpoint directory under `destination/<run id>/<dir name>/`, then its
    manifest. Returns (manifest URI, the manifest's SHA-256)."""
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError

    root = Location.parse(destination).child(run_id, checkpoint.name)
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file())
    listed = [StoredFile(path=p.relative_to(checkpoint).as_posix(), sha256=file_sha256(p), bytes=p.stat().st_size)
              for p in files]
    manifest = CheckpointManifest(run_id=run_id, step=int(config.get("step", 0)), dataset=dataset,
                                  files=tuple(listed), config=dict(config))
    body = (json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()
    s3 = _s3(region)
    try:
        for path, entry in zip(files, listed, strict=True):
            s3.upload_file(str(path), root.bucket, root.child(entry.path).key,
                           ExtraArgs={"ChecksumAlgorithm": "SHA256"})
        s3.put_object(Bucket=root.bucket, Key=root.child(MANIFEST).key, Body=body, ChecksumAlgorithm="SHA256",
                      ContentType="application/json")
    except (BotoCoreError, ClientError, S3UploadFailedError) as err:
        raise _client_error(err, f"cannot upload {checkpoint} to {root.uri}") from None
    return root.child(MANIFEST).uri, hashlib.sha256(body).hexdigest()


def read_manifest(manifest_uri: str, region: str | None = None) -> tuple[CheckpointManifest, str]:
    """The manifest and its SHA-256."""
    from botocore.exceptions import BotoCoreError, ClientError

    where = Location.parse(manifest_uri)
    try:
        body = _s3(region).get_object(Bucket=where.bucket, Key=where.key)["Body"].read(MANIFEST_LIMIT + 1)
    except (BotoCoreError, ClientError) as err:
        raise _client_error(err, f"cannot read checkpoint manifest {manifest_uri}") from None
    if len(body) > MANIFEST_LIMIT:
        raise StoreError(f"{manifest_uri}: larger than {MANIFEST_LIMIT:,} bytes; not a checkpoint manifest")
    try:
        return CheckpointManifest.model_validate_json(body), hashlib.sha256(body).hexdigest()
    except ValidationError as err:
        raise StoreError(f"{manifest_uri}: not a checkpoint manifest ({err.errors()[0]['msg']})") from None


def download(manifest_uri: str, into: Path, *, expect_sha256: str | None = None,
             region: str | None = None) -> Path:
    """The checkpoint as its manifest lists it, in `into/<step dir>`, every file's hash
    checked (and the manifest's own, when the registry recorded it)."""
    from botocore.exceptions import BotoCoreError, ClientError

    manifest, digest = read_manifest(manifest_uri, region)
    if expect_sha256 and digest != expect_sha256:
        raise StoreError(f"{manifest_uri}: its SHA-256 is {digest}, but {expect_sha256} was recorded; the checkpoint "
                         "was replaced after it was registered")
    root = Location.parse(manifest_uri.rsplit("/", 1)[0])
    target = into / root.key.rsplit("/", 1)[-1]
    if target.exists():
        raise StoreError(f"{target}: already exists; download into an empty folder")
    # Into a folder beside the target, renamed to it only once every file matched: a
    # damaged or missing file leaves nothing behind that a resume could take for the
    # checkpoint. Only what the manifest lists is read; other objects under the prefix are
    # not the checkpoint's.
    into.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=into))
    try:
        s3 = _s3(region)
        for entry in manifest.files:
            path = partial / entry.path
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                s3.download_file(root.bucket, root.child(entry.path).key, str(path))
            except (BotoCoreError, ClientError) as err:
                raise _client_error(err, f"cannot read {root.child(entry.path).uri}") from None
            if file_sha256(path) != entry.sha256:
                raise StoreError(f"{root.child(entry.path).uri}: does not match its manifest (sha256 differs); the "
                                 "stored checkpoint is damaged")
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target
