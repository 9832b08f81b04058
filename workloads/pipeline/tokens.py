"""A feature dataset (Parquet rows of a point-in-time join) as token shards the trainer
reads: one dataset version to train on, one held out to evaluate on.

Each row becomes one token per feature, then a separator. A value's token is fixed by the
value alone (its sign and its magnitude on a log scale, cut into `bins` steps per feature),
never by the sample's own quantiles: the same value is the same token in every run, so a
model trained on last month's data and one trained on today's are judged on the same held
out tokens. A missing value (no feature row in the TTL) has its own token.

Rows go to the held-out set by a hash of the entity key, so one entity's rows are all on one
side (no entity is both learned and judged) and the split is the same on a rerun."""

from __future__ import annotations

import hashlib
import io
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from workloads.train import dataset_version as dv
from workloads.train.data import write_shard

TOKENIZER = "mlplat-feature-bins/v1"
SHARD_TOKENS = 1 << 20  # tokens per shard file


def vocab_size(features: int, bins: int) -> int:
    # Per feature: `bins` value tokens and one for a missing value; then the separator.
    return features * (bins + 1) + 1


def value_token(value: Any, feature: int, bins: int) -> int:
    base = feature * (bins + 1)
    if value is None or isinstance(value, float) and math.isnan(value):
        return base + bins
    if not isinstance(value, (int, float)):  # a list, a string, a time: not a number to bin
        raise ValueError(f"feature {feature} holds {type(value).__name__} values; the golden path bins numbers only")
    x = float(value)
    half = bins // 2
    # Magnitude on a log2 scale, 4 steps per doubling; the sign picks the half.
    step = min(half - 1, int(math.log2(1.0 + abs(x)) * 4)) if math.isfinite(x) else half - 1
    return base + (step if x >= 0 else half + step)


def heldout(entity: tuple[Any, ...], fraction: float) -> bool:
    """Whether an entity (its join keys' values) is held out; the same for 7 and 7.0, as Parquet
    may type one key column either way in two months' files."""
    text = "\x1f".join(str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in entity)
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _read(uri: str) -> Any:
    import pyarrow.parquet as pq

    if uri.startswith("s3://"):
        import boto3

        bucket, _, key = uri.removeprefix("s3://").partition("/")
        body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
        return pq.read_table(io.BytesIO(body))
    return pq.read_table(uri)


def rows_as_tokens(table: Any, features: tuple[str, ...], keys: tuple[str, ...], bins: int,
                   fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(training tokens, held-out tokens), rows in the table's order."""
    columns = [ref.split(":", 1)[1] for ref in features]
    missing = [c for c in (*columns, *keys) if c not in table.column_names]
    if missing:
        raise ValueError(f"the feature dataset has no column {missing[0]!r}")
    data = table.to_pydict()
    separator = vocab_size(len(columns), bins) - 1
    train, held = [], []
    for i in range(table.num_rows):
        row = [value_token(data[c][i], n, bins) for n, c in enumerate(columns)] + [separator]
        (held if heldout(tuple(data[k][i] for k in keys), fraction) else train).extend(row)
    return np.asarray(train, dtype=np.int64), np.asarray(held, dtype=np.int64)


def _version(tokens: np.ndarray, folder: Path, vocab: int, sources: list[str]) -> dict[str, Any]:
    """The shards in `folder` as a dataset version; an existing one is kept when its shards
    are what this run would write, and replaced whole (written beside, then renamed)
    otherwise."""
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for n, start in enumerate(range(0, max(len(tokens), 1), SHARD_TOKENS)):
        write_shard(staging / f"shard-{n:05d}.bin", tokens[start:start + SHARD_TOKENS], vocab)
    version = dv.build(staging, TOKENIZER + f"/vocab-{vocab}", sources=sources)
    if (folder / dv.MANIFEST).is_file() and dv.read(folder / dv.MANIFEST).id == version.id:
        shutil.rmtree(staging)
    else:
        dv.write(version, staging)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return {"id": version.id, "dir": str(folder), "tokens": int(len(tokens))}


def write_versions(uri: str, dataset_id: str, features: tuple[str, ...], keys: tuple[str, ...], folder: Path, *,
                   bins: int, holdout: float) -> dict[str, Any]:
    """The feature dataset at `uri` (a folder with data.parquet) as two dataset versions
    under `folder`: train/ and heldout/; their ids, folders and the vocabulary size."""
    table = _read(uri.rstrip("/") + "/data.parquet")
    train, held = rows_as_tokens(table, features, keys, bins, holdout)
    if not len(train) or not len(held):
        side = "training" if not len(train) else "held-out"
        raise ValueError(f"the feature dataset's {table.num_rows} rows leave the {side} set empty: give more "
                         "entities, or another evaluation.holdout")
    vocab = vocab_size(len(features), bins)
    source = [f"{uri}#{dataset_id}"]
    return {"vocab_size": vocab, "train": _version(train, folder / "train", vocab, source),
            "heldout": _version(held, folder / "heldout", vocab, source)}
