"""The request logger as the gateway reaches it: a real process (`python -m workloads.monitor
log-requests`) taking mirrored KServe v2 requests over gRPC and REST, writing Parquet to a
real S3 API (a moto server) with SSE-KMS under the bucket's key, dropping personal fields,
and writing what it holds when it is stopped."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import boto3
import numpy as np
import pyarrow.parquet as pq
import pytest
import requests

from tests.services.oci import closed_port, free_port
from tests.services.tracking import REGION, REPO, require_tracking, start_moto, wait_http

BUCKET = "mlplat-test-datasets"


@pytest.fixture(scope="module")
def s3():
    require_tracking()
    processes: list[subprocess.Popen] = []
    endpoint = start_moto(processes)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION}
    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="test",
                          aws_secret_access_key="test")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    key = boto3.client("kms", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="test",
                       aws_secret_access_key="test").create_key()["KeyMetadata"]["Arn"]
    yield client, env, key
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


def start_logger(env: dict, key: str, *extra: str) -> tuple[subprocess.Popen, int, int]:
    grpc_port, http_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "workloads.monitor", "log-requests", "--model", "gpt", "--bucket", BUCKET,
         "--kms-key", key, "--field", "input_ids=personal", "--grpc-port", str(grpc_port), "--http-port",
         str(http_port), "--max-seconds", "30", *extra],
        cwd=REPO, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_http(f"http://127.0.0.1:{http_port}/healthz", process, "request logger", 30)
    return process, grpc_port, http_port


def send_grpc(port: int, ids: np.ndarray, *, model: str = "gpt", tenant: str = "applied") -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    request = grpcclient.InferInput("input_ids", list(ids.shape), "INT64")
    request.set_data_from_numpy(ids)
    client.infer(model, [request], model_version="7", headers={"x-mlplat-tenant": tenant})
    client.close()


def terminated(process: subprocess.Popen) -> int:
    """SIGTERM, as the kubelet stops the pod; its exit code. It must be gone well inside the
    pod's 60 s grace period: one that is not is asked for its threads' stacks (SIGUSR1) before
    it is killed, and the test fails."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=45)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)
        time.sleep(2)
        process.kill()
        process.wait()
        pytest.fail(f"the logger did not stop within 45 s of SIGTERM:\n{process.stderr.read()[-6000:]}")


def stop(process: subprocess.Popen) -> None:
    """Stopped as the kubelet stops the pod, having written what it held."""
    code = terminated(process)
    assert code == 0, process.stderr.read()


def logged(client, prefix: str) -> list[tuple[dict, object]]:
    found = []
    for entry in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []):
        head = client.head_object(Bucket=BUCKET, Key=entry["Key"])
        body = client.get_object(Bucket=BUCKET, Key=entry["Key"])["Body"].read()
        found.append((head, pq.read_table(io.BytesIO(body)).to_pylist()))
    return found


def test_mirrored_requests_land_in_the_bucket_without_personal_fields(s3):
    client, env, key = s3
    process, grpc_port, http_port = start_logger(env, key, "--prefix", "logs-a")
    try:
        send_grpc(grpc_port, np.array([[5, 5, 7, 9], [1, 2, 3, 4]], dtype=np.int64))
        send_grpc(grpc_port, np.array([[1, 2]], dtype=np.int64), model="another-model")  # not this model's
        answer = requests.post(f"http://127.0.0.1:{http_port}/v2/models/gpt/infer", timeout=10,
                               headers={"x-mlplat-tenant": "serving"},
                               json={"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64",
                                                 "data": [[8, 8, 8]]}]})
        assert answer.status_code == 200
    finally:
        stop(process)  # what it holds is written on the way out
    [(head, rows)] = logged(client, "logs-a/gpt/")
    assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"] == key
    assert sorted((r["tenant"], r["tokens"], r["version"]) for r in rows) == [
        ("applied", 4, "7"), ("applied", 4, "7"), ("serving", 3, "")]
    assert all("input_ids" not in r for r in rows)
    assert {r["model"] for r in rows} == {"gpt"}
    assert logged(client, "logs-a/another-model/") == []


def test_personal_fields_are_logged_only_when_allowed(s3):
    client, env, key = s3
    process, grpc_port, _ = start_logger(env, key, "--prefix", "logs-b", "--allow-personal")
    try:
        send_grpc(grpc_port, np.array([[11, 12, 13]], dtype=np.int64))
    finally:
        stop(process)
    [(_, [row])] = logged(client, "logs-b/gpt/")
    assert row["input_ids"] == [11, 12, 13]


def test_rows_are_written_while_it_runs(s3):
    client, env, key = s3
    process, grpc_port, _ = start_logger(env, key, "--prefix", "logs-c", "--max-rows", "2")
    try:
        send_grpc(grpc_port, np.array([[1, 2], [3, 4]], dtype=np.int64))  # a full batch of two rows
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not logged(client, "logs-c/gpt/"):
            time.sleep(0.2)
        [(_, rows)] = logged(client, "logs-c/gpt/")
        assert len(rows) == 2
    finally:
        stop(process)


class SilentS3:
    """An S3 endpoint that takes each connection and what is sent on it, and never answers."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.connected = threading.Event()
        self.held: list[socket.socket] = []  # kept open: a closed one would answer with a reset
        threading.Thread(target=self._take, daemon=True).start()

    def _take(self) -> None:
        while True:
            try:
                self.held.append(self.socket.accept()[0])
            except OSError:  # closed
                return
            self.connected.set()

    def close(self) -> None:
        self.socket.close()
        for held in self.held:
            held.close()


@pytest.mark.parametrize("under_way", ["none", "a-request's", "an-interval's"])
def test_a_stop_ends_within_its_time_when_s3_takes_the_write_and_never_answers(s3, under_way):
    """S3 takes the connection and the rows and never answers. Each write waits out its attempts
    (botocore bounds each, not their sum), and a write already under way, in a request's thread
    or the interval's, holds the rows until its own end: with no deadline on the stop, 49 s and
    95 s (15 s reads), past the pod's 60 s grace period, where the kubelet kills it with the
    rows. The logger is gone within --stop-within instead, saying what it lost."""
    _, env, key = s3
    silent = SilentS3()
    try:
        extra = {"none": [], "a-request's": ["--max-rows", "1"], "an-interval's": ["--max-seconds", "1"]}[under_way]
        process, grpc_port, http_port = start_logger({**env, "AWS_ENDPOINT_URL": silent.url}, key,
                                                     "--stop-within", "6", *extra)
        if under_way == "a-request's":  # a full batch: the request's own thread writes it, and waits on S3
            with pytest.raises(requests.exceptions.Timeout):
                requests.post(f"http://127.0.0.1:{http_port}/v2/models/gpt/infer", timeout=2, json={"inputs": [
                    {"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [[8, 8, 8]]}]})
        else:
            send_grpc(grpc_port, np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64))
        if under_way != "none":
            assert silent.connected.wait(20), "no write reached S3"
        started = time.monotonic()
        code = terminated(process)
        took = time.monotonic() - started
    finally:
        silent.close()
    err = process.stderr.read()
    assert code == 1 and took < 6 + 4, (code, took, err[-3000:])
    lost = "1 row held is" if under_way == "a-request's" else "2 rows held are"
    assert f"S3 did not answer within 6 s of the stop; {lost} lost with the pod" in err, err[-3000:]


def test_a_last_write_that_fails_says_the_rows_are_lost(s3):
    """S3 refuses the connection: the last write fails inside the time, and says that what it
    held goes with the pod (no next try comes)."""
    _, env, key = s3
    with closed_port() as port:
        process, grpc_port, _ = start_logger({**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}, key,
                                             "--stop-within", "20")
        send_grpc(grpc_port, np.array([[1, 2, 3]], dtype=np.int64))
        code = terminated(process)
    err = process.stderr.read().strip().splitlines()
    assert code == 1 and err[-1].startswith("request logs not written; 1 row held is lost with the pod: "), err[-5:]
