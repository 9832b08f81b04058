"""Training datasets from the feature store, as dataset versions.

`build` joins an entity table (entity keys and the timestamps of the labels) with feature
views point-in-time correct: each row gets the newest feature value at or before its own
timestamp, never a later one (Feast's historical retrieval). The result is written as
Parquet under the tenant's prefix with `dataset.json` beside it: the project, the feature
references, the entity table's hash and each file's SHA-256. Its id is the SHA-256 of that
manifest, so the same features for the same entities are the same version, and the id goes
into the lineage as an MLflow run's input (workloads/tracking), as the trainer's token
datasets do."""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from workloads import inputs
from workloads.features.repo import FeatureInputError, Tenant
from workloads.hashing import content_id

MANIFEST = "dataset.json"
FORMAT = "mlplat.feature-dataset/v1"
DATA_FILE = "data.parquet"
# Entity keys and label times only: tens of millions of rows fit under this. A bigger local
# file is a mistake (or the features themselves); it is refused before it is read.
ENTITIES_LIMIT = 1 << 30


class DataFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)
    rows: int = Field(ge=0)


class FeatureDataset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = FORMAT
    project: str
    features: tuple[str, ...] = Field(min_length=1)
    entities_sha256: str  # the entity table, canonicalised: which rows at which times
    files: tuple[DataFile, ...] = Field(min_length=1)
    id: str = ""

    def content_id(self) -> str:
        return content_id(self.model_dump(mode="json", exclude={"id"}))

    def sealed(self) -> FeatureDataset:
        return self.model_copy(update={"id": self.content_id()})


def _parquet(frame: Any) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def _canonical(frame: Any, keys: Sequence[str]) -> Any:
    """Rows in one order and columns in one order, so equal content writes equal bytes."""
    return frame[sorted(frame.columns)].sort_values(list(keys), kind="stable").reset_index(drop=True)


def _every_label_row(entities: Any, found: Any, keys: Sequence[str]) -> Any:
    """Feast's file store drops an entity row whose every feature row is older than the
    view's TTL, where a point-in-time join keeps it with nulls (and the online store answers
    nulls for it): joined back onto the entity table, every label row stays."""
    import pandas as pd

    def aligned(frame: Any) -> Any:
        frame = frame.copy()
        frame["event_timestamp"] = pd.to_datetime(frame["event_timestamp"], utc=True).astype("datetime64[ns, UTC]")
        return frame

    return aligned(entities).merge(aligned(found), on=list(keys), how="left")


def read_entities(path: str) -> Any:
    """The entity table: an s3:// object, or a local file read bounded (a FIFO would block
    the Parquet reader forever, a device feed it without end)."""
    import pandas as pd

    source: Any = path
    if "://" not in path:
        if not os.path.lexists(path):
            raise FeatureInputError(f"{path}: no such entity table")
        try:
            source = io.BytesIO(inputs.read_bytes(path, "Parquet entity table", ENTITIES_LIMIT))
        except inputs.InputError as err:
            raise FeatureInputError(str(err)) from None
    try:
        frame = pd.read_parquet(source)
    except FileNotFoundError:
        raise FeatureInputError(f"{path}: no such entity table") from None
    except Exception as err:  # pyarrow's errors for a file that is not Parquet
        raise FeatureInputError(f"{path}: not a Parquet entity table ({type(err).__name__})") from None
    if "event_timestamp" not in frame.columns:
        raise FeatureInputError(f"{path}: has no event_timestamp column; each row needs the time its label was "
                                "observed, which the features are joined as of")
    return frame


def build(store: Any, tenant: Tenant, entities: Any, features: Sequence[str], name: str) -> tuple[FeatureDataset, str]:
    """Retrieve, write and describe the dataset; (manifest, its s3:// folder)."""
    import boto3

    if not features:
        raise FeatureInputError("--features: name at least one feature as <feature view>:<feature>")
    keys = [c for c in entities.columns if c != "event_timestamp"] + ["event_timestamp"]
    try:
        found = store.get_historical_features(entity_df=entities, features=list(features)).to_df()
    except Exception as err:  # Feast's errors for unknown views or features: the tenant's input
        raise FeatureInputError(f"--features: {type(err).__name__}: {str(err).splitlines()[0]}") from None
    frame = _every_label_row(entities, found, keys)
    data = _parquet(_canonical(frame, keys))
    entities_hash = hashlib.sha256(_parquet(_canonical(entities, keys))).hexdigest()
    manifest = FeatureDataset(
        project=tenant.project, features=tuple(sorted(features)), entities_sha256=entities_hash,
        files=(DataFile(name=DATA_FILE, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), rows=len(frame)),),
    ).sealed()
    folder = f"{tenant.prefix}datasets/{name}/{manifest.id.removeprefix('sha256:')[:16]}/"
    bucket, key = folder.removeprefix("s3://").split("/", 1)
    s3 = boto3.client("s3")
    s3.put_object(Bucket=bucket, Key=key + DATA_FILE, Body=data)
    # The manifest last: a folder with a manifest is complete.
    body = json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True).encode() + b"\n"
    s3.put_object(Bucket=bucket, Key=key + MANIFEST, Body=body)
    return manifest, folder


def register(manifest: FeatureDataset, folder: str, tracking_uri: str, experiment: str, name: str) -> str:
    """The dataset version as the input of an MLflow run of the tenant's; the run id."""
    from workloads.tracking.client import RunTracker

    tracker = RunTracker(tracking_uri, experiment, run_name=f"dataset-{name}")
    run_id = tracker.start(run_id=None, params={"project": manifest.project, "features": ",".join(manifest.features),
                                                "rows": manifest.files[0].rows},
                           tags={"mlplat.dataset.kind": "features"})
    tracker.log_dataset(manifest.id, folder, {"rows": manifest.files[0].rows, "features": list(manifest.features),
                                              "project": manifest.project})
    tracker.finish()
    return run_id
