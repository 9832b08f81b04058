"""What a logged request becomes, and where it goes: the served model's input fields, each
marked personal or not; rows of what may be kept; Parquet files in the region's datasets
bucket, under the key the bucket's retention rule expires.

A request's `input_ids` are a person's text as token ids: personal by default, and dropped
unless the stack allows them. What is always kept is what drift detection needs and no one
can read text from: the request's length, how many distinct tokens it uses, the mean and
spread of its ids. The same features are computed from the training data's windows for
the reference (`token_features`), so the two samples have the same columns.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

# The derived, non-personal features of one request of token ids.
FEATURES = ("tokens", "distinct_ratio", "mean_token_id", "std_token_id")
# Always kept: when, which model and version, which tenant (the gateway's claim header).
META = ("time", "model", "version", "tenant")


class RequestLogError(ValueError):
    """A field policy that cannot be applied, or a request that does not fit it."""


@dataclass(frozen=True)
class FieldPolicy:
    """Each input field the model takes, personal or not; personal fields are dropped unless
    `allow_personal` (the stack's explicit opt-in, which the policy pack sees)."""

    personal: Mapping[str, bool]
    allow_personal: bool = False

    def kept(self, name: str) -> bool:
        if name not in self.personal:
            raise RequestLogError(f"input {name!r} is not marked personal or not in requestLogging.fields; mark it "
                                  "so it can be logged or dropped")
        return self.allow_personal or not self.personal[name]


def token_features(ids: np.ndarray) -> dict[str, float]:
    """The non-personal features of one sequence of token ids."""
    ids = np.asarray(ids).reshape(-1)
    if ids.size == 0:
        return {"tokens": 0, "distinct_ratio": 0.0, "mean_token_id": 0.0, "std_token_id": 0.0}
    return {"tokens": int(ids.size), "distinct_ratio": float(np.unique(ids).size / ids.size),
            "mean_token_id": float(ids.mean()), "std_token_id": float(ids.std())}


def rows_of(inputs: Mapping[str, np.ndarray], policy: FieldPolicy, *, model: str, version: str, tenant: str,
            now: datetime | None = None, outputs: Mapping[str, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """One row per sequence of a (possibly batched) request: its features, each input field
    the policy keeps, and each output it marks and keeps (an output nobody marked is left
    out: a client chooses which outputs it asks for), as lists."""
    if "input_ids" not in inputs:
        raise RequestLogError(f"the request has no input_ids (inputs: {', '.join(sorted(inputs)) or 'none'})")
    for name in inputs:
        policy.kept(name)  # every field must be marked
    ids = np.asarray(inputs["input_ids"])
    batch = ids.reshape(1, -1) if ids.ndim == 1 else ids.reshape(ids.shape[0], -1)
    stamp = (now or datetime.now(timezone.utc)).isoformat()
    rows = []
    for index, sequence in enumerate(batch):
        row: dict[str, Any] = {"time": stamp, "model": model, "version": version, "tenant": tenant,
                               **token_features(sequence)}
        kept_outputs = {n: v for n, v in (outputs or {}).items() if n in policy.personal and policy.kept(n)}
        for name, value in {**inputs, **kept_outputs}.items():
            if name in kept_outputs or policy.kept(name):
                array = np.asarray(value)
                row[name] = (array.reshape(array.shape[0], -1)[index] if array.ndim > 1 else array).tolist()
        rows.append(row)
    return rows


def parquet_bytes(rows: Sequence[Mapping[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(rows)), sink, compression="zstd")
    return sink.getvalue()


def object_key(prefix: str, model: str, when: datetime, writer: str) -> str:
    """`<prefix>/<model>/date=YYYY-MM-DD/<time>-<writer>-<random>.parquet`: one day per
    folder (what the drift job reads), never two writers on one key."""
    return (f"{prefix.strip('/')}/{model}/date={when:%Y-%m-%d}/{when:%H%M%S}-{writer}-"
            f"{uuid.uuid4().hex[:8]}.parquet")


@dataclass
class Batcher:
    """Rows gathered in memory and written as one Parquet object every `max_rows` rows or
    `max_seconds` seconds, whichever comes first. `put(key, body)` stores an object."""

    put: Callable[[str, bytes], None]
    prefix: str
    model: str
    writer: str
    max_rows: int = 1000
    max_seconds: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _since: float | None = None
    written: list[str] = field(default_factory=list)

    @property
    def held(self) -> int:
        """Rows not written yet."""
        return len(self._rows)

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        if self._since is None:
            self._since = self.clock()
        self._rows.extend(rows)
        if len(self._rows) >= self.max_rows or self.clock() - self._since >= self.max_seconds:
            self.flush()

    def flush(self) -> None:
        """Write what is held; on a failed write the rows stay held for the next flush."""
        if not self._rows:
            return
        key = object_key(self.prefix, self.model, datetime.now(timezone.utc), self.writer)
        self.put(key, parquet_bytes(self._rows))
        self._rows, self._since = [], None
        self.written.append(key)


def s3_putter(bucket: str, kms_key: str | None, client: Any = None) -> Callable[[str, bytes], None]:
    """Stores each object with SSE-KMS under the datasets key (the bucket policy refuses a
    write without it)."""
    import boto3
    from botocore.config import Config

    # A write holds the rows' lock, and the requests' threads wait on it. Against an S3 that takes
    # the connection and never answers, a write gives up in under a minute, its three attempts and
    # their backoff included (botocore's defaults: 60 s per connect and per read, five attempts).
    # That is an estimate, not a bound: botocore bounds each socket operation, and the connect
    # time is per address tried. The logger's stop has a bound of its own (--stop-within).
    s3 = client or boto3.client("s3", config=Config(connect_timeout=3, read_timeout=10,
                                                    retries={"mode": "standard", "total_max_attempts": 3}))

    def put(key: str, body: bytes) -> None:
        extra = {"ServerSideEncryption": "aws:kms", **({"SSEKMSKeyId": kms_key} if kms_key else {})}
        s3.put_object(Bucket=bucket, Key=key, Body=body, **extra)

    return put
