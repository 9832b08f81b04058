"""What a logged request becomes: personal fields dropped unless the stack allows them,
every field marked, derived features per sequence, Parquet batches by size and age."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone

import numpy as np
import pyarrow.parquet as pq
import pytest

from workloads.monitor.cli import main
from workloads.monitor.request_log import (
    Batcher,
    FieldPolicy,
    RequestLogError,
    object_key,
    rows_of,
    token_features,
)

PERSONAL = FieldPolicy({"input_ids": True})
NOW = datetime(2026, 11, 24, 20, 0, tzinfo=timezone.utc)


def test_personal_token_ids_are_dropped_and_their_features_kept():
    ids = np.array([[5, 5, 7, 9], [1, 2, 3, 4]], dtype=np.int64)
    rows = rows_of({"input_ids": ids}, PERSONAL, model="gpt", version="7", tenant="applied", now=NOW)
    assert len(rows) == 2  # one row per sequence of the batch
    assert all("input_ids" not in row for row in rows)
    assert rows[0] == {"time": NOW.isoformat(), "model": "gpt", "version": "7", "tenant": "applied", "tokens": 4,
                       "distinct_ratio": 0.75, "mean_token_id": 6.5, "std_token_id": pytest.approx(1.6583, abs=1e-4)}


def test_personal_fields_are_kept_only_where_the_stack_allows_them():
    ids = np.array([[5, 6]], dtype=np.int64)
    [row] = rows_of({"input_ids": ids}, FieldPolicy({"input_ids": True}, allow_personal=True), model="gpt",
                    version="", tenant="", now=NOW)
    assert row["input_ids"] == [5, 6]
    [plain] = rows_of({"input_ids": ids}, FieldPolicy({"input_ids": False}), model="gpt", version="", tenant="",
                      now=NOW)
    assert plain["input_ids"] == [5, 6]


def test_a_field_nobody_marked_is_refused_rather_than_logged():
    with pytest.raises(RequestLogError, match="input 'user_email' is not marked personal or not"):
        rows_of({"input_ids": np.array([[1]]), "user_email": np.array([[0]])}, PERSONAL, model="gpt", version="",
                tenant="")


def test_features_of_an_empty_request():
    assert token_features(np.array([], dtype=np.int64)) == {"tokens": 0, "distinct_ratio": 0.0,
                                                             "mean_token_id": 0.0, "std_token_id": 0.0}


def test_rows_are_written_by_size_and_by_age():
    stored: dict[str, bytes] = {}
    now = [0.0]
    batcher = Batcher(lambda key, body: stored.__setitem__(key, body), prefix="request-logs", model="gpt",
                      writer="pod-a", max_rows=3, max_seconds=60, clock=lambda: now[0])
    row = rows_of({"input_ids": np.array([[1, 2]])}, PERSONAL, model="gpt", version="", tenant="t", now=NOW)
    batcher.add(row * 2)
    assert stored == {}
    batcher.add(row)  # the third row fills the batch
    assert len(stored) == 1
    batcher.add(row)
    now[0] = 61.0
    batcher.add(row)  # the oldest row waited a minute
    assert len(stored) == 2
    tables = [pq.read_table(io.BytesIO(body)) for body in stored.values()]
    assert sorted(t.num_rows for t in tables) == [2, 3]
    assert set(tables[0].column_names) == {"time", "model", "version", "tenant", "tokens", "distinct_ratio",
                                           "mean_token_id", "std_token_id"}


def test_objects_are_kept_by_model_and_day():
    key = object_key("request-logs/", "gpt", NOW, "pod-a")
    assert key.startswith("request-logs/gpt/date=2026-11-24/200000-pod-a-") and key.endswith(".parquet")


@pytest.mark.parametrize("fields, message", [
    ([], "--field: mark each input of the model personal or plain (e.g. input_ids=personal)"),
    (["input_ids"], "--field input_ids: write NAME=personal or NAME=plain"),
    (["input_ids=secret"], "--field input_ids=secret: write NAME=personal or NAME=plain"),
])
def test_the_logger_refuses_unmarked_fields(fields, message, capsys):
    args = ["log-requests", "--model", "gpt", "--bucket", "b"] + [a for f in fields for a in ("--field", f)]
    assert main(args) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.parametrize("value, says", [
    ("0", "0 is out of range"), ("-1", "-1 is out of range"), ("nan", "is not a finite number"),
    ("inf", "is not a finite number"), ("3601", "3601 is out of range"), ("soon", "is not a finite number"),
])
def test_the_stop_budget_is_a_time_above_zero(value, says, capsys):
    args = ["log-requests", "--model", "gpt", "--bucket", "b", "--field", "input_ids=plain", "--stop-within", value]
    with pytest.raises(SystemExit) as exited:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and "--stop-within" in err[-1] and says in err[-1], err


def test_the_last_write_is_waited_for_until_the_deadline_and_no_longer():
    from workloads.monitor.cli import within

    assert within(5, lambda: True) is True and within(5, lambda: False) is False
    release = threading.Event()
    started = time.monotonic()
    assert within(0.3, lambda: release.wait(30)) is None  # still writing: given up on
    assert 0.3 <= time.monotonic() - started < 5
    started = time.monotonic()
    assert within(-1, lambda: release.wait(30)) is None  # the deadline passed already
    assert time.monotonic() - started < 1
    release.set()


def test_a_dataset_read_from_lustre_is_read_from_the_bucket_it_mirrors():
    from workloads.monitor.drift_job import on_s3

    mirror = ("/fsx/datasets/", "s3://mlplat-prod-datasets/")
    assert on_s3("/fsx/datasets/datasets/tiny/", mirror) == "s3://mlplat-prod-datasets/datasets/tiny/"
    assert on_s3("/fsx/research/scratch/", mirror) == "/fsx/research/scratch/"  # not the mirrored directory
    assert on_s3("s3://elsewhere/x/", mirror) == "s3://elsewhere/x/"
    assert on_s3("/fsx/datasets/tiny/", None) == "/fsx/datasets/tiny/"


def test_rows_are_kept_when_a_write_fails_and_written_by_the_next():
    stored: dict[str, bytes] = {}
    failing = [True]

    def put(key: str, body: bytes) -> None:
        if failing[0]:
            raise OSError("S3 is unreachable")
        stored[key] = body

    batcher = Batcher(put, prefix="request-logs", model="gpt", writer="pod-a", max_rows=100)
    batcher.add(rows_of({"input_ids": np.array([[1, 2], [3, 4]])}, PERSONAL, model="gpt", version="", tenant="t"))
    assert batcher.held == 2
    with pytest.raises(OSError):
        batcher.flush()
    assert batcher.held == 2  # what a stopping logger names as lost
    failing[0] = False
    batcher.flush()
    assert batcher.held == 0
    [body] = stored.values()
    assert pq.read_table(io.BytesIO(body)).num_rows == 2


def test_the_gateway_sets_the_header_the_logger_reads():
    from components.request_log_spec import TENANT_HEADER as SET
    from workloads.monitor.logger import TENANT_HEADER as READ

    assert SET == READ == "x-mlplat-tenant"


@contextmanager
def serving(sink):
    """The logger's REST front end on a free port, for the block."""
    from workloads.monitor.logger import http_server

    server = http_server(sink, 0)
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def stored_sink(put=None, **batching):
    """A sink for `gpt` whose writes land in the returned list (or go to `put`)."""
    from workloads.monitor.logger import Sink

    stored: list[bytes] = []
    return Sink(PERSONAL, Batcher(put or (lambda key, body: stored.append(body)), prefix="p", model="gpt", writer="w",
                                  **batching), "gpt"), stored


def raw_request(headers: bytes, body: bytes = b"") -> bytes:
    return b"POST /v2/models/gpt/infer HTTP/1.1\r\nHost: logger\r\n" + headers + b"\r\n" + body


def _post(port: int, headers: bytes, body: bytes = b"") -> bytes:
    """One raw request; the status line of the answer, waited for 5 s at most."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as caller:
        caller.sendall(raw_request(headers, body))
        return caller.makefile("rb").readline()


def test_a_caller_that_leaves_before_its_answer_leaves_no_traceback(capfd):
    """A mirror's sender does not wait for the answer; one that is gone by the time the row is
    written is no error of the logger's, and its log stays free of the standard library's
    traceback for it."""
    writing, written = threading.Event(), threading.Event()

    def put(key: str, body: bytes) -> None:
        writing.set()
        time.sleep(0.5)  # S3 is slow: the caller leaves first
        written.set()

    sink, _ = stored_sink(put, max_rows=1)
    with serving(sink) as port:
        body = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 2], "datatype": "INT64",
                                       "data": [[1, 2]]}]}).encode()
        with socket.create_connection(("127.0.0.1", port)) as caller:
            caller.sendall(raw_request(b"Content-Length: %d\r\n" % len(body), body))
            assert writing.wait(5)  # the row is taken; its write is under way
            caller.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # gone, with a reset
        assert written.wait(5)
        time.sleep(0.5)  # the handler answers the caller that left
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err, err


@pytest.fixture
def rest_logger():
    sink, stored = stored_sink(max_rows=1)
    with serving(sink) as port:
        yield port, sink, stored


@pytest.mark.parametrize("length, status", [
    (b"4194305", b"413"),  # one byte past the bound, and no body sent: answered without waiting for it
    (b"99999999999999999999", b"413"),
    (b"9" * 5000, b"413"),  # more digits than int() reads
    (b"-1", b"400"),  # read(-1) would wait for the caller to close
    (b"0x10", b"400"),
    (b"\xb2", b"400"),  # a superscript two (headers are Latin-1): a digit to str.isdigit, not to int()
])
def test_a_body_past_the_bound_or_no_byte_count_is_refused_unread(rest_logger, length, status):
    port, sink, stored = rest_logger
    assert _post(port, b"Content-Length: " + length + b"\r\n").split()[1] == status
    assert sink.refused == 1 and stored == []


@pytest.mark.parametrize("past", [1, 60 << 20], ids=["one-byte-past", "60-MiB-past"])
def test_a_caller_that_sends_a_body_past_the_bound_before_it_reads_gets_413_not_a_reset(rest_logger, past):
    """Many HTTP clients send the whole body before they read the answer. Refused unread and
    closed at once, the connection resets under them (a broken pipe, the answer lost): the
    logger reads and drops the rest first, for a bounded time."""
    from workloads.monitor.logger import MAX_BODY

    port, sink, stored = rest_logger
    size = MAX_BODY + past
    assert _post(port, b"Content-Length: %d\r\n" % size, b" " * size).split()[1] == b"413"
    assert sink.refused == 1 and stored == []


def test_what_a_refused_caller_still_sends_is_dropped_for_a_bounded_time(monkeypatch):
    """A caller that announces a body past the bound and then sends it slowly, or never, holds
    a thread for LINGER_S at most: then the connection is closed under it."""
    from workloads.monitor import logger

    monkeypatch.setattr(logger, "LINGER_S", 0.5)
    sink, stored = stored_sink(max_rows=1)
    with serving(sink) as port, socket.create_connection(("127.0.0.1", port), timeout=5) as caller:
        caller.sendall(raw_request(b"Content-Length: %d\r\n" % (logger.MAX_BODY + 1), b"{"))
        assert caller.makefile("rb").readline().split()[1] == b"413"
        started = time.monotonic()
        # It goes on sending, slowly, until the logger closes the connection under it.
        with pytest.raises(OSError):  # a reset or a broken pipe
            while time.monotonic() - started < 4:
                caller.send(b" " * 4096)
                time.sleep(0.05)
        assert time.monotonic() - started < 4
    assert sink.refused == 1 and stored == []


def test_a_body_at_the_bound_is_read_and_logged(rest_logger):
    from workloads.monitor.logger import MAX_BODY

    port, sink, stored = rest_logger
    body = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [[1, 2, 3]]}]})
    body = body.encode().ljust(MAX_BODY)  # JSON may end in spaces
    leading_zeros = b"0" * 20 + str(MAX_BODY).encode()
    assert _post(port, b"Content-Length: " + leading_zeros + b"\r\n", body).split()[1] == b"200"
    assert sink.refused == 0 and len(stored) == 1


def test_a_caller_that_never_sends_its_body_frees_its_thread(monkeypatch, capfd):
    from workloads.monitor import logger

    monkeypatch.setattr(logger, "READ_TIMEOUT_S", 0.5)
    sink, stored = stored_sink(max_rows=1)
    with serving(sink) as port:
        started = time.monotonic()
        assert _post(port, b"Content-Length: 10\r\n", b"{") == b""  # closed, unanswered
        assert time.monotonic() - started < 4
    assert sink.refused == 1 and stored == []
    assert "Traceback" not in capfd.readouterr().err


def test_rows_that_come_after_the_last_write_began_are_counted_as_lost():
    sink, stored = stored_sink()
    ids = {"input_ids": np.array([[1, 2], [3, 4]])}
    sink.take(ids, model="gpt", version="", tenant="t")
    assert sink.lost() == 2  # held, not written yet
    sink.flush(last=True)
    assert len(stored) == 1 and sink.lost() == 0
    sink.take(ids, model="gpt", version="", tenant="t")  # a request still in flight at the stop
    assert sink.late == 2 and sink.lost() == 2 and sink.batcher.held == 0
    sink.flush(last=True)
    assert len(stored) == 1  # nothing more is written after the last write
