"""The scheduled drift check of a served model: the requests it was sent lately against the
data it was trained on, found through the lineage.

1. The served Triton version -> the registered model version exported as it (the export
   tags it, workloads/tracking/registry.py record_export) -> its training run -> the
   dataset version the run read (its id and where its shards are).
2. The current sample: the request logs of the last `days` days
   (`request-logs/<model>/date=<day>/`, written by the request logger).
3. The reference sample: windows of the training shards, one per logged request and of
   that request's length, so both samples have the same lengths and the same features
   (workloads/monitor/request_log.py token_features).
4. Evidently's tests per feature (workloads/monitor/drift.py), pushed to the Prometheus
   Pushgateway, where the `ModelInputDrift` alert reads them.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
from botocore.exceptions import BotoCoreError, ClientError

from workloads.inputs import InputError, shown

_S3_ERRORS = (BotoCoreError, ClientError)  # what boto3 raises for an unreachable or refusing S3

# What is compared: the features that do not depend on the length the sample was cut to
# (the reference windows are cut to the requests' lengths).
COMPARED = ("distinct_ratio", "mean_token_id", "std_token_id")


class DriftJobError(Exception):
    """What the job cannot do, in one line (exit 2)."""


@dataclass(frozen=True)
class Reference:
    registered_model: str
    registered_version: str
    run_id: str
    dataset_id: str
    dataset_uri: str


def served_reference(tracking_uri: str, registered_model: str, triton_model: str, triton_version: int) -> Reference:
    """The dataset behind the registered model version exported as `triton_model` version
    `triton_version`."""
    from mlflow.exceptions import MlflowException

    from workloads.tracking.client import DATASET_TAG, DATASET_URI_TAG, tracking_client
    from workloads.tracking.registry import TRITON_MODEL_TAG, TRITON_VERSION_TAG, RegistryError, get_run

    client = tracking_client(tracking_uri)
    try:
        versions = client.search_model_versions(f"name='{registered_model}'")
    except MlflowException as err:
        raise DriftJobError(f"--registered-model {registered_model}: {str(err).splitlines()[0]}") from None
    exported = [v for v in versions if v.tags.get(TRITON_MODEL_TAG) == triton_model
                and v.tags.get(TRITON_VERSION_TAG) == str(triton_version)]
    if not exported:
        raise DriftJobError(f"--version {triton_version}: no version of registered model {registered_model!r} "
                            f"was exported as {triton_model} version {triton_version}; export it from the registry "
                            "(python -m workloads.serve export --checkpoint models:/...) so its lineage is recorded")
    mv = max(exported, key=lambda v: int(v.version))
    try:
        run = get_run(client, mv.run_id)
    except RegistryError as err:
        raise DriftJobError(str(err)) from None
    tags = run.data.tags
    if not tags.get(DATASET_URI_TAG):
        raise DriftJobError(f"run {mv.run_id} of {registered_model} version {mv.version} recorded no dataset; "
                            "train with a dataset version so drift has a reference")
    return Reference(registered_model, mv.version, mv.run_id, tags.get(DATASET_TAG, ""), tags[DATASET_URI_TAG])


def _s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


# What the job reads of a request log (workloads/monitor/request_log.py rows_of): its time,
# the version a client named, the sequence length and the compared features. Nothing else
# (the kept inputs and outputs are lists, and may be large) is read.
NEEDED = ("time", "tokens", *COMPARED)
LOGGED = (*NEEDED, "version")
LOG_OBJECT_BYTES = 64 << 20  # the logger writes at most --max-rows (1,000) rows an object: kilobytes


def log_rows(source: Any, name: str) -> Any:
    """The rows of one request log object the job uses; DriftJobError, naming the object,
    where it is not a request log."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(source)
        names = parquet.schema_arrow.names
        missing = [c for c in NEEDED if c not in names]
        if missing:
            raise DriftJobError(f"request log {shown(name)}: lacks {', '.join(missing)}; only request logs written by "
                                "`log-requests` belong under --logs")
        return parquet.read(columns=[c for c in LOGGED if c in names], use_pandas_metadata=False).to_pandas()
    except DriftJobError:
        raise
    except Exception as err:  # noqa: BLE001 - pyarrow's ArrowInvalid and friends: not a Parquet file
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DriftJobError(f"request log {shown(name)}: not a readable Parquet file ({first[:120]}); remove it from "
                            "--logs") from None


def _local_log(path: Path) -> Any:
    """A request log in a folder, opened only if it is a regular file of a log's size (a
    FIFO or device named *.parquet must not hang the job)."""
    from workloads.monitor.drift import open_regular

    try:
        handle = open_regular(str(path), "logs", LOG_OBJECT_BYTES)
    except InputError as err:
        raise DriftJobError(str(err)) from None
    with handle:
        return log_rows(handle, str(path))


def logged_requests(logs: str, days: int, now: datetime, client: Any = None) -> Any:
    """The requests logged in the `days` x 24 hours before `now`, one DataFrame (local
    folder or s3://): the day folders they can be in, then their rows by time."""
    import pandas as pd

    since = now - timedelta(days=days)
    wanted = {f"date={(now - timedelta(days=n)).date():%Y-%m-%d}" for n in range(days + 1)}
    frames = []
    if logs.startswith("s3://"):
        import boto3

        s3 = client or boto3.client("s3")
        bucket, prefix = _s3(logs.rstrip("/") + "/")
        for day in sorted(wanted):
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}{day}/"):
                for entry in page.get("Contents", []):
                    name = f"s3://{bucket}/{entry['Key']}"
                    if entry.get("Size", 0) > LOG_OBJECT_BYTES:
                        raise DriftJobError(f"request log {shown(name)}: is {entry['Size']:,} bytes; a request log is at "
                                            f"most {LOG_OBJECT_BYTES:,}; remove it from --logs")
                    body = s3.get_object(Bucket=bucket, Key=entry["Key"])["Body"].read(LOG_OBJECT_BYTES + 1)
                    frames.append(log_rows(io.BytesIO(body), name))
    else:
        for day in sorted(wanted):
            frames += [_local_log(p) for p in sorted((Path(logs) / day).glob("*.parquet"))]
    recent = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(recent):
        recent = recent[pd.to_datetime(recent["time"], utc=True, errors="coerce") >= pd.Timestamp(since)] \
            .reset_index(drop=True)
    if not len(recent):
        raise DriftJobError(f"--logs {logs}: no request logs in the last {days} day(s); is request logging on and "
                            "the model taking requests?")
    return recent


def reference_tokens(dataset_uri: str, max_bytes: int = 256 << 20, client: Any = None) -> np.ndarray:
    """The training tokens, from the dataset version's shards (a local or mounted folder, or
    s3://), up to `max_bytes` of them: enough to cut thousands of windows from."""
    from workloads.train import data
    from workloads.train import dataset_version as dv

    if dataset_uri.startswith("s3://"):
        import tempfile

        import boto3

        s3 = client or boto3.client("s3")
        bucket, prefix = _s3(dataset_uri.rstrip("/") + "/")
        with tempfile.TemporaryDirectory() as folder:
            manifest = Path(folder) / "dataset.json"
            s3.download_file(bucket, f"{prefix}dataset.json", str(manifest))
            version = dv.read(manifest)
            taken, arrays = 0, []
            for shard in version.shards:
                if taken >= max_bytes:
                    break
                local = Path(folder) / shard.name
                s3.download_file(bucket, f"{prefix}{shard.name}", str(local))
                arrays.append(np.array(data.read_shard(local)))
                taken += shard.bytes
            return np.concatenate(arrays)  # a manifest names at least one shard
    folder = Path(dataset_uri)
    if not folder.is_dir():
        raise DriftJobError(f"the training dataset {dataset_uri} is not reachable from this job")
    arrays, taken = [], 0
    for shard in data.list_shards(folder):
        if taken >= max_bytes:
            break
        tokens = data.read_shard(shard)
        arrays.append(np.array(tokens))
        taken += tokens.nbytes
    if not arrays:
        raise DriftJobError(f"the training dataset {dataset_uri} holds no shards")
    return np.concatenate(arrays)


def reference_sample(tokens: np.ndarray, lengths: np.ndarray, seed: int = 0) -> Any:
    """One training window per logged request, of its length, features as the logger
    computes them."""
    import pandas as pd

    from workloads.monitor.request_log import token_features

    rng = np.random.default_rng(seed)
    lengths = np.clip(lengths.astype(int), 1, max(1, len(tokens) - 1))
    starts = rng.integers(0, len(tokens) - lengths)
    return pd.DataFrame([token_features(tokens[s:s + n]) for s, n in zip(starts, lengths)])


def push(gateway: str, model: str, version: int, results: list[Any], rows: dict[str, int],
         pusher: Callable[..., None] | None = None, not_judged: Sequence[Any] = ()) -> None:
    """The scores, verdicts and sample sizes, under job `model-drift` and the model. A
    column not judged has no score; where it counts as drift (values in one sample, none
    in the other) it is pushed as drifted, so the alert fires."""
    from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

    registry = CollectorRegistry()
    labels = {"model": model, "version": str(version)}
    score = Gauge("mlplat_model_input_drift_score", "Evidently's drift score per feature",
                  [*labels, "column", "test"], registry=registry)
    drifted = Gauge("mlplat_model_input_drifted", "1 where Evidently's test finds the feature drifted",
                    [*labels, "column"], registry=registry)
    sizes = Gauge("mlplat_model_input_drift_rows", "rows compared", [*labels, "sample"], registry=registry)
    checked = Gauge("mlplat_model_drift_check_timestamp_seconds", "when the check last ran", list(labels),
                    registry=registry)
    for r in results:
        score.labels(**labels, column=r.column, test=r.test).set(r.score)
        drifted.labels(**labels, column=r.column).set(1.0 if r.drifted else 0.0)
    for n in not_judged:
        if n.counts_as_drift:
            drifted.labels(**labels, column=n.column).set(1.0)
    for sample, count in rows.items():
        sizes.labels(**labels, sample=sample).set(count)
    checked.labels(**labels).set(time.time())
    # pushadd replaces only the series pushed now: a run too small to judge keeps the last
    # verdict (and its alert) while it updates the sample size and the timestamp.
    (pusher or pushadd_to_gateway)(gateway, job="model-drift", registry=registry, grouping_key={"model": model})


def on_s3(dataset_uri: str, lustre: tuple[str, str] | None) -> str:
    """Where a dataset read from the Lustre file system lives in S3: the file system's
    datasets directory is a data repository of the datasets bucket (components/lustre.py),
    so `<mount>/datasets/<key>` is `s3://<bucket>/<key>`."""
    if lustre is None:
        return dataset_uri
    local, remote = lustre
    local = local.rstrip("/") + "/"
    if dataset_uri.rstrip("/") + "/" == local or dataset_uri.startswith(local):
        return remote.rstrip("/") + "/" + dataset_uri[len(local):].lstrip("/")
    return dataset_uri


def run(*, tracking_uri: str, registered_model: str, model: str, version: int, logs: str, days: int,
        gateway: str | None, min_rows: int, now: datetime | None = None,
        lustre: tuple[str, str] | None = None) -> dict[str, Any]:
    from workloads.monitor.drift import judge

    reference = served_reference(tracking_uri, registered_model, model, version)
    try:
        current = logged_requests(logs, days, now or datetime.now(timezone.utc))
    except _S3_ERRORS as err:
        raise DriftJobError(f"--logs {logs}: cannot be read: {err}") from None
    if "version" in current.columns:  # the served version's requests only, where clients named it
        named = current["version"].astype(str)
        current = current[(named == "") | (named == str(version))]
    report: dict[str, Any] = {"model": model, "version": version,
                              "reference": {"registered_model": reference.registered_model,
                                            "registered_version": reference.registered_version,
                                            "run": reference.run_id, "dataset": reference.dataset_id,
                                            "uri": reference.dataset_uri},
                              "rows": {"current": int(len(current))}}
    if len(current) < min_rows:
        report.update(drift=None, judged=False)
        if gateway:
            push(gateway, model, version, [], {"current": len(current)})
        return report
    source = on_s3(reference.dataset_uri, lustre)
    try:
        tokens = reference_tokens(source)
    except _S3_ERRORS as err:
        raise DriftJobError(f"the training dataset {source} cannot be read: {err}") from None
    baseline = reference_sample(tokens, current["tokens"].to_numpy())
    verdict = judge(baseline[list(COMPARED)], current[list(COMPARED)].reset_index(drop=True))
    report["rows"]["reference"] = int(len(baseline))
    # `not_judged`: the features Evidently could not judge, with why (workloads/monitor/drift.py).
    report.update(judged=True, **verdict.as_dict())
    if gateway:
        push(gateway, model, version, verdict.columns, report["rows"], not_judged=verdict.not_judged)
    record_verdict(tracking_uri, reference, bool(report.get("drift")), version)
    return report


def record_verdict(tracking_uri: str, reference: Reference, drifted: bool, triton_version: int) -> None:
    """The verdict on the registered model too (VERDICT_TAG), where the tenant's retraining
    trigger reads it (workloads/pipeline/triggers.py): through the tenant's own tracking user,
    not the Prometheus every tenant's alerts share."""
    import json

    from workloads.tracking.client import VERDICT_TAG, tracking_client

    value = json.dumps({"drifted": drifted, "registered_version": int(reference.registered_version),
                        "triton_version": triton_version, "at": time.time()}, sort_keys=True)
    tracking_client(tracking_uri).set_registered_model_tag(reference.registered_model, VERDICT_TAG, value)
