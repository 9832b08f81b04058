"""The request log's edges that `make mutate` (bench/mutate.py) found untested: a request
without token ids, one sequence given flat, outputs as the policy marks them, per-sequence
slices of every kept field, the batcher's timing, the object key, and the SSE-KMS write."""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone

import numpy as np
import pyarrow.parquet as pq
import pytest

from workloads.monitor.request_log import (
    FEATURES,
    META,
    Batcher,
    FieldPolicy,
    RequestLogError,
    object_key,
    parquet_bytes,
    rows_of,
    s3_putter,
    token_features,
)

NOW = datetime(2026, 11, 24, 20, 0, 5, tzinfo=timezone.utc)


@pytest.mark.parametrize("inputs, named", [({}, "none"), ({"attention_mask": np.ones((1, 2))}, "attention_mask"),
                                           ({"b": np.ones(1), "a": np.ones(1)}, "a, b")])
def test_a_request_without_token_ids_is_refused_naming_what_it_has(inputs, named):
    policy = FieldPolicy({"a": False, "b": False, "attention_mask": False})
    with pytest.raises(RequestLogError, match=rf"^the request has no input_ids \(inputs: {named}\)$"):
        rows_of(inputs, policy, model="gpt", version="1", tenant="t", now=NOW)


def test_one_flat_sequence_is_one_row():
    [row] = rows_of({"input_ids": np.array([3, 3, 4])}, FieldPolicy({"input_ids": False}), model="gpt", version="1",
                    tenant="t", now=NOW)
    assert row["input_ids"] == [3, 3, 4] and row["tokens"] == 3 and row["distinct_ratio"] == pytest.approx(2 / 3)
    assert list(row)[:len(META)] == list(META) and all(f in row for f in FEATURES)


def test_every_kept_field_is_sliced_per_sequence():
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    policy = FieldPolicy({"input_ids": True, "attention_mask": False})
    rows = rows_of({"input_ids": ids, "attention_mask": mask}, policy, model="m", version="v", tenant="t", now=NOW)
    assert [r["attention_mask"] for r in rows] == [[1, 1, 0], [1, 0, 0]]
    assert all("input_ids" not in r for r in rows)
    assert [r["mean_token_id"] for r in rows] == [2.0, 5.0]
    three_d = rows_of({"input_ids": np.arange(12).reshape(2, 2, 3)}, FieldPolicy({"input_ids": False}), model="m",
                      version="v", tenant="t", now=NOW)
    assert [r["input_ids"] for r in three_d] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    assert [r["tokens"] for r in three_d] == [6, 6]


def test_outputs_are_kept_only_where_marked_and_allowed():
    ids = np.array([[1, 2], [3, 4]])
    outputs = {"top_k_ids": np.array([[7, 8], [9, 10]]), "logits": np.zeros((2, 3)), "secret": np.ones((2, 1))}
    policy = FieldPolicy({"input_ids": True, "top_k_ids": False, "secret": True})
    rows = rows_of({"input_ids": ids}, policy, model="m", version="v", tenant="t", now=NOW, outputs=outputs)
    assert [r.get("top_k_ids") for r in rows] == [[7, 8], [9, 10]]
    assert all("logits" not in r and "secret" not in r and "input_ids" not in r for r in rows)
    allowed = FieldPolicy(policy.personal, allow_personal=True)
    rows = rows_of({"input_ids": ids}, allowed, model="m", version="v", tenant="t", now=NOW, outputs=outputs)
    assert [r["secret"] for r in rows] == [[1.0], [1.0]] and [r["input_ids"] for r in rows] == [[1, 2], [3, 4]]


def test_rows_are_stamped_now_in_utc_when_no_time_is_given():
    before = datetime.now(timezone.utc)
    [row] = rows_of({"input_ids": np.array([[1]])}, FieldPolicy({"input_ids": True}), model="m", version="v",
                    tenant="t")
    stamp = datetime.fromisoformat(row["time"])
    assert stamp.tzinfo is not None and before <= stamp <= datetime.now(timezone.utc)
    assert (row["model"], row["version"], row["tenant"]) == ("m", "v", "t")


def test_features_are_plain_numbers():
    features = token_features(np.array([[2, 4], [4, 6]]))
    assert features == {"tokens": 4, "distinct_ratio": 0.75, "mean_token_id": 4.0,
                        "std_token_id": pytest.approx(np.std([2, 4, 4, 6]))}
    assert type(features["tokens"]) is int and all(type(features[k]) is float for k in FEATURES[1:])
    assert parquet_bytes([{"tokens": features["tokens"]}])  # Arrow takes them as they are


def test_object_keys_never_repeat_and_strip_the_prefixs_slashes():
    keys = {object_key("/request-logs/", "gpt", NOW, "pod-a") for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert re.fullmatch(r"request-logs/gpt/date=2026-11-24/200005-pod-a-[0-9a-f]{8}\.parquet", key), key


def batcher(stored, now, **kwargs):
    return Batcher(lambda key, body: stored.append((key, body)), prefix="p", model="m", writer="w",
                   clock=lambda: now[0], **kwargs)


ROW = {"time": "t", "tokens": 1}


def test_nothing_is_written_for_no_rows():
    stored, now = [], [0.0]
    b = batcher(stored, now, max_rows=1, max_seconds=0)
    b.add([])
    b.flush()
    assert stored == [] and b.written == []


def test_age_counts_from_the_first_row_held_and_restarts_after_a_write():
    stored, now = [], [100.0]
    b = batcher(stored, now, max_rows=10, max_seconds=60)
    b.add([ROW])
    now[0] = 159.0
    b.add([ROW])
    assert stored == []
    now[0] = 160.0  # exactly a minute after the first row
    b.add([ROW])
    assert len(stored) == 1 and pq.read_table(io.BytesIO(stored[0][1])).num_rows == 3
    assert b.written == [stored[0][0]]
    now[0] = 200.0
    b.add([ROW])  # a new batch: its minute starts now, not at the first batch's start
    now[0] = 259.0
    b.add([ROW])
    assert len(stored) == 1
    now[0] = 260.0
    b.add([ROW])
    assert len(stored) == 2 and pq.read_table(io.BytesIO(stored[1][1])).num_rows == 3


def test_size_counts_every_row_held():
    stored, now = [], [0.0]
    b = batcher(stored, now, max_rows=4, max_seconds=1e9)
    b.add([ROW, ROW, ROW])
    assert stored == []
    b.add([ROW, ROW])
    assert len(stored) == 1 and pq.read_table(io.BytesIO(stored[0][1])).num_rows == 5
    b.add([ROW])
    b.flush()
    assert len(stored) == 2 and pq.read_table(io.BytesIO(stored[1][1])).num_rows == 1


def test_the_defaults_are_a_thousand_rows_or_a_minute():
    b = Batcher(lambda k, v: None, prefix="p", model="m", writer="w")
    assert (b.max_rows, b.max_seconds) == (1000, 60.0)


class Client:
    def __init__(self):
        self.calls = []

    def put_object(self, **kwargs):
        self.calls.append(kwargs)


def test_each_object_is_written_with_sse_kms_under_the_datasets_key():
    client = Client()
    s3_putter("datasets", "arn:aws:kms:me-central-1:1:key/k", client)("p/x.parquet", b"body")
    assert client.calls == [{"Bucket": "datasets", "Key": "p/x.parquet", "Body": b"body",
                             "ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "arn:aws:kms:me-central-1:1:key/k"}]
    s3_putter("datasets", None, client)("k", b"")
    assert client.calls[1] == {"Bucket": "datasets", "Key": "k", "Body": b"", "ServerSideEncryption": "aws:kms"}


def test_a_written_object_is_keyed_by_its_model_writer_and_the_utc_time(monkeypatch):
    """The drift job reads a day's folder by UTC date: a pod in another time zone must not
    file its rows under its local day."""
    import time
    from datetime import timedelta

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+05:30, no daylight saving
    time.tzset()
    try:
        stored, now = [], [0.0]
        b = Batcher(lambda key, body: stored.append(key), prefix="request-logs", model="gpt", writer="pod-a",
                    max_rows=1, clock=lambda: now[0])
        before = datetime.now(timezone.utc)
        b.add([ROW])
        after = datetime.now(timezone.utc)
    finally:
        monkeypatch.undo()
        time.tzset()
    [key] = stored
    match = re.fullmatch(r"request-logs/gpt/date=(\d{4}-\d\d-\d\d)/(\d{6})-pod-a-[0-9a-f]{8}\.parquet", key)
    assert match, key
    written = datetime.strptime(match[1] + match[2], "%Y-%m-%d%H%M%S").replace(tzinfo=timezone.utc)
    assert before - timedelta(seconds=1) <= written <= after


def test_without_a_client_the_putter_makes_an_s3_one(monkeypatch):
    import boto3

    made = []
    monkeypatch.setattr(boto3, "client", lambda service, **kwargs: made.append(service) or Client())
    s3_putter("datasets", None)("k", b"")
    assert made == ["s3"]


def test_a_write_to_a_silent_s3_is_estimated_to_give_up_within_a_minute(monkeypatch):
    """The rows' lock is held while a write waits on S3, and the requests' threads wait on the
    lock. An estimate for an S3 that takes the connection (one address) and never answers, from
    the settings botocore applied to the client the putter makes: each attempt's connect, its
    wait for `100 Continue` (1 s, botocore's) and its read, and the backoff between attempts at
    its longest (a throttled retry: 2 ** i s, and up to 5 s more that x-amz-retry-after can ask
    for). Not a bound: the logger's stop has that (tests/services/test_request_logger.py)."""
    import boto3

    made = []
    real = boto3.client
    monkeypatch.setattr(boto3, "client", lambda *args, **kwargs: made.append(
        real(*args, region_name="me-central-1", aws_access_key_id="k", aws_secret_access_key="s", **kwargs))
        or made[-1])
    s3_putter("datasets", None)
    [client] = made
    config = client.meta.config
    attempts = config.retries["total_max_attempts"]
    each = config.connect_timeout + 1 + config.read_timeout
    backoff = sum(min(2 ** i, 20) + 5 for i in range(attempts - 1))
    assert config.retries["mode"] == "standard" and attempts >= 2  # S3's 503 SlowDown is retried
    assert attempts * each + backoff <= 60, (attempts, each, backoff)


def test_objects_are_zstd_compressed_parquet():
    body = parquet_bytes([{"tokens": n, "mean_token_id": float(n)} for n in range(100)])
    meta = pq.ParquetFile(io.BytesIO(body)).metadata
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}


def test_a_prefix_keeps_its_own_characters():
    assert object_key("/Xray-logs/", "gpt", NOW, "pod-a").startswith("Xray-logs/gpt/date=2026-11-24/")
