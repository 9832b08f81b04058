"""The scheduled drift check end to end, on real servers: the MLflow registry and run
(PostgreSQL, moto) give the served version's training dataset, the request logs are
Parquet in a real S3 API, and the scores reach a real Prometheus Pushgateway
(`python -m workloads.monitor drift-job`, as the CronJob runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import boto3
import numpy as np
import pytest
import requests

from tests.services.oci import free_port
from tests.services.tracking import REGION, REPO, wait_http
from workloads.monitor.request_log import FieldPolicy, parquet_bytes, rows_of
from workloads.train import dataset_version as dv
from workloads.train.data import generate_synthetic_shards, read_shard

REGISTERED, BUCKET = "research-drift-gpt", "mlplat-test-drift-datasets"
TRITON_VERSION = 3


@pytest.fixture(scope="module")
def pushgateway():
    binary = "prometheus-pushgateway"
    from shutil import which

    if which(binary) is None:
        pytest.fail("prometheus-pushgateway not found: install it (Debian/Ubuntu: sudo apt-get install "
                    "prometheus-pushgateway), as `make services` does", pytrace=False)
    port = free_port()
    process = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/-/ready", process, "pushgateway", 30)
    yield url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def served(tracking, tmp_path_factory):
    """A registered model version exported as Triton gpt version 3, trained on a dataset
    version of synthetic shards."""
    from mlflow.tracking import MlflowClient

    from workloads.tracking.client import DATASET_TAG, DATASET_URI_TAG
    from workloads.tracking.registry import TRITON_MODEL_TAG, TRITON_VERSION_TAG

    shards = tmp_path_factory.mktemp("drift") / "shards"
    generate_synthetic_shards(shards, num_shards=2, tokens_per_shard=20000, vocab_size=256, seed=1)
    version = dv.build(shards, "gpt2-bpe")
    dv.write(version, shards)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in tracking.env("research").items():
            mp.setenv(key, value)
        client = MlflowClient(tracking_uri=tracking.uri, registry_uri=tracking.uri)
        experiment = client.create_experiment("research/drift")
        run = client.create_run(experiment, tags={DATASET_TAG: version.id, DATASET_URI_TAG: str(shards)})
        client.set_terminated(run.info.run_id)
        client.create_registered_model(REGISTERED)
        mv = client.create_model_version(REGISTERED, source="s3://checkpoints/drift/step-10", run_id=run.info.run_id)
        client.set_model_version_tag(REGISTERED, mv.version, TRITON_MODEL_TAG, "gpt")
        client.set_model_version_tag(REGISTERED, mv.version, TRITON_VERSION_TAG, str(TRITON_VERSION))
    s3 = boto3.client("s3", **{k: v for k, v in {"endpoint_url": tracking.s3, "region_name": REGION,
                                                  "aws_access_key_id": "testing",
                                                  "aws_secret_access_key": "testing"}.items()})
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    tokens = np.concatenate([np.array(read_shard(p)) for p in sorted(shards.glob("*.bin"))])
    return {"run": run.info.run_id, "version": mv.version, "shards": shards, "tokens": tokens, "s3": s3}


def log_requests(served, prefix: str, sequences: list[np.ndarray]) -> str:
    """Request logs as the logger writes them, spread over the last day: half logged an
    hour ago, half 20 hours ago (yesterday's folder, unless it is past 20:00 UTC), and a
    few two days ago, which a one-day check must leave out."""
    now = datetime.now(timezone.utc)
    policy = FieldPolicy({"input_ids": True})
    for index, when in enumerate((now - timedelta(hours=1), now - timedelta(hours=20), now - timedelta(days=2))):
        share = sequences[index::2] if index < 2 else sequences[:5]
        rows = [row for ids in share for row in rows_of({"input_ids": ids.reshape(1, -1)}, policy, model="gpt",
                                                         version="", tenant="applied", now=when)]
        key = f"{prefix}/gpt/date={when:%Y-%m-%d}/{index:06d}-test.parquet"
        served["s3"].put_object(Bucket=BUCKET, Key=key, Body=parquet_bytes(rows))
    return f"s3://{BUCKET}/{prefix}/gpt/"


def drift_job(tracking, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **tracking.env("research")}
    return subprocess.run([sys.executable, "-m", "workloads.monitor", "drift-job", "--registered-model", REGISTERED,
                           "--model", "gpt", "--version", str(TRITON_VERSION), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def windows(tokens: np.ndarray, count: int, seed: int, shift: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 64, count)
    return [np.clip(tokens[s:s + n] + shift, 0, 255) for s, n in
            zip(rng.integers(0, len(tokens) - 64, count), lengths)]


def pushed(gateway: str) -> dict[str, float]:
    """The drift series the gateway holds for the model, `name{column}` -> value."""
    found = {}
    for line in requests.get(f"{gateway}/metrics", timeout=10).text.splitlines():
        if line.startswith("mlplat_model_input_drifted{") and 'model="gpt"' in line:
            column = line.split('column="', 1)[1].split('"', 1)[0]
            found[column] = float(line.rsplit(" ", 1)[1])
    return found


def test_requests_like_the_training_data_show_no_drift(tracking, served, pushgateway):
    logs = log_requests(served, "same", windows(served["tokens"], 800, seed=5))
    done = drift_job(tracking, "--logs", logs, "--pushgateway", pushgateway)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["reference"]["registered_version"] == served["version"]
    assert report["reference"]["run"] == served["run"] and report["reference"]["uri"] == str(served["shards"])
    assert report["judged"] and report["drift"] is False
    assert report["rows"] == {"current": 800, "reference": 800}
    assert pushed(pushgateway) == {"distinct_ratio": 0.0, "mean_token_id": 0.0, "std_token_id": 0.0}


def test_shifted_requests_are_found_drifted_and_pushed(tracking, served, pushgateway):
    logs = log_requests(served, "shifted", windows(served["tokens"], 800, seed=6, shift=40))
    done = drift_job(tracking, "--logs", logs, "--pushgateway", pushgateway)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["drift"] is True and "mean_token_id" in {d["column"] for d in report["drifted"]}
    assert pushed(pushgateway)["mean_token_id"] == 1.0
    # And on the registered model, where the tenant's retraining trigger reads it.
    from mlflow.tracking import MlflowClient

    from workloads.tracking.client import VERDICT_TAG

    with pytest.MonkeyPatch.context() as mp:
        for key, value in tracking.env("research").items():
            mp.setenv(key, value)
        model = MlflowClient(tracking_uri=tracking.uri, registry_uri=tracking.uri).get_registered_model(REGISTERED)
    verdict = json.loads(model.tags[VERDICT_TAG])
    assert verdict["drifted"] is True and verdict["registered_version"] == int(served["version"])
    assert verdict["triton_version"] == TRITON_VERSION


def test_a_version_with_no_lineage_or_no_logs_is_bad_input(tracking, served):
    missing = drift_job(tracking, "--logs", f"s3://{BUCKET}/none/gpt/", "--version", "9")
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"error: --version 9: no version of registered model {REGISTERED!r} was "
                                     "exported as gpt version 9")
    quiet = drift_job(tracking, "--logs", f"s3://{BUCKET}/none/gpt/")
    assert quiet.returncode == 2
    assert quiet.stderr == (f"error: --logs s3://{BUCKET}/none/gpt/: no request logs in the last 1 day(s); is "
                            "request logging on and the model taking requests?\n")


def test_a_dataset_trained_from_lustre_is_read_from_the_bucket_lustre_mirrors(tracking, served, pushgateway):
    """prod trains from /fsx/datasets/<key>; the check reads s3://<datasets bucket>/<key>."""
    from mlflow.tracking import MlflowClient

    from workloads.tracking.client import DATASET_TAG, DATASET_URI_TAG
    from workloads.tracking.registry import TRITON_MODEL_TAG, TRITON_VERSION_TAG

    for shard in sorted(served["shards"].iterdir()):
        served["s3"].upload_file(str(shard), BUCKET, f"datasets/drift/{shard.name}")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in tracking.env("research").items():
            mp.setenv(key, value)
        client = MlflowClient(tracking_uri=tracking.uri, registry_uri=tracking.uri)
        experiment = client.get_experiment_by_name("research/drift").experiment_id
        run = client.create_run(experiment, tags={DATASET_TAG: "sha256:lustre",
                                                  DATASET_URI_TAG: "/fsx/datasets/datasets/drift"})
        client.set_terminated(run.info.run_id)
        mv = client.create_model_version(REGISTERED, source="s3://checkpoints/drift/step-20", run_id=run.info.run_id)
        client.set_model_version_tag(REGISTERED, mv.version, TRITON_MODEL_TAG, "gpt")
        client.set_model_version_tag(REGISTERED, mv.version, TRITON_VERSION_TAG, "4")
    logs = log_requests(served, "lustre", windows(served["tokens"], 400, seed=7))
    done = drift_job(tracking, "--logs", logs, "--version", "4", "--lustre-datasets", f"/fsx/datasets/=s3://{BUCKET}/")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["reference"]["uri"] == "/fsx/datasets/datasets/drift"
    assert report["judged"] and report["drift"] is False and report["rows"]["reference"] == 400
    # Without the mirror, the Lustre path is not reachable from the job: one line, exit 2.
    unreachable = drift_job(tracking, "--logs", logs, "--version", "4")
    assert unreachable.returncode == 2
    assert unreachable.stderr == ("error: the training dataset /fsx/datasets/datasets/drift is not reachable from "
                                  "this job\n")


def relabel_keep(rule: dict, labels: dict[str, str]) -> bool:
    """Prometheus' `keep` action: the source labels' values joined by the separator must
    match the regex whole (RE2; this regex needs nothing Python's re lacks)."""
    import re

    joined = rule.get("separator", ";").join(labels.get(name, "") for name in rule["sourceLabels"])
    return re.fullmatch(rule["regex"], joined) is not None


def test_the_scrape_keeps_the_checks_series_and_drops_what_anyone_else_pushes(tracking, served, pushgateway):
    """What a tenant able to reach the Pushgateway could push (a Triton metric the
    autoscaler and the canary rule read, another model's drift) is in the gateway, and the
    ServiceMonitor's relabelling drops it from what Prometheus stores; the check's own
    series stay."""
    from prometheus_client import CollectorRegistry, Gauge, push_to_gateway
    from prometheus_client.parser import text_string_to_metric_families

    from components.drift_spec import DriftPlan, pushgateway_objects

    logs = log_requests(served, "scraped", windows(served["tokens"], 400, seed=11))
    done = drift_job(tracking, "--logs", logs, "--pushgateway", pushgateway)
    assert done.returncode == 0, done.stderr[-2000:]
    forged = CollectorRegistry()
    Gauge("nv_inference_queue_duration_us", "forged", ["model"], registry=forged).labels(model="gpt").set(1e9)
    Gauge("mlplat_model_input_drifted", "forged", ["model", "column"], registry=forged).labels(
        model="other", column="x").set(1)
    push_to_gateway(pushgateway, job="triton", registry=forged)

    plan = DriftPlan(model="gpt", version=TRITON_VERSION, registered_model=REGISTERED, tenant="serving",
                     namespace="inference", aws_cidrs=("10.0.0.0/16",),
                     image="img", logs=logs, region=REGION)
    [monitor] = [o for o in pushgateway_objects("img", plan) if o["kind"] == "ServiceMonitor"]
    [rule] = monitor["spec"]["endpoints"][0]["metricRelabelings"]
    exposed = [(s.name, s.labels) for family in text_string_to_metric_families(
        requests.get(f"{pushgateway}/metrics", timeout=10).text) for s in family.samples]
    assert ("nv_inference_queue_duration_us", {"job": "triton", "instance": "", "model": "gpt"}) in exposed
    kept = [(name, labels) for name, labels in exposed if relabel_keep(rule, {**labels, "__name__": name})]
    assert {name for name, _ in kept} == {"mlplat_model_input_drift_score", "mlplat_model_input_drifted",
                                          "mlplat_model_input_drift_rows", "mlplat_model_drift_check_timestamp_seconds"}
    assert {labels["model"] for _, labels in kept} == {"gpt"}
    assert all(labels.get("job") == "model-drift" for _, labels in kept)
