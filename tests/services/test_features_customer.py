"""The feature store as it runs on a customer's cluster (docs/onprem.md), against real
servers: Feast through `python -m workloads.features` with the feature_store.yaml the
cluster layer renders in this mode (components/features_spec.py), a real redis-server over
TLS whose tenant user has a password (read from a file, as the customer's Secret is
mounted), and a moto server standing in for the S3-compatible store, reached only through
the pod's AWS_ENDPOINT_URL_S3 with the keys in a shared-credentials file. Nothing signs an
ElastiCache token or asks for AWS credentials in the environment."""

from __future__ import annotations

import io
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pandas as pd
import pytest
import requests
import yaml

from components.features_spec import PASSWORD_STORE_TYPE, CustomerFeatureStores, ProjectPlan, feature_store_yaml
from tests.services.features import PYTHON, REPO, require_features, start_redis
from tests.services.oci import free_port
from tests.services.tracking import require_tracking, start_moto, stop_processes, wait_http

# Feast's metrics server binds :8000, a port its start_server cannot be told; the research
# server of test_features.py binds it too. One worker runs both files, one after the other.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tracking")]

REGION = "ae-auh-dc1"
BUCKET = "datasets"
USER = "mlplat-onprem-features-research"
PASSWORD = "research-redis-password"
AS_OF = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)
SOURCE_KEY = "features/research/customers/stats.parquet"


@pytest.fixture(scope="module")
def customer_features(tmp_path_factory):
    require_features()
    require_tracking()  # its venv has moto_server
    folder = tmp_path_factory.mktemp("customer-features")
    processes: list[subprocess.Popen] = []
    redis = None
    try:
        store = start_moto(processes)
        s3 = boto3.client("s3", endpoint_url=store, region_name=REGION, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        redis = start_redis(folder / "redis", {USER: "research"}, {USER: PASSWORD})
        # The customer's Secrets as the kubelet mounts them: one file per key.
        (folder / "password").write_text(PASSWORD + "\n")
        (folder / "credentials").write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
        plan = ProjectPlan(tenant="research", project="research", image="unused", datasets_bucket=BUCKET,
                           redis_host="127.0.0.1", replication_group_id="", user=USER, region=REGION, vpc_cidr="",
                           instance_types=("r760-cpu",), replicas=1, materialize_every_minutes=60,
                           customer=CustomerFeatureStores(
                               redis_port=redis.port, password_secret="feature-store-redis", password_key="password",
                               redis_cidrs=("127.0.0.1/32",), endpoint=store, credentials_secret="object-store",
                               store_cidrs=("127.0.0.1/32",), ca_bundle=redis.ca.read_text()))
        data = feature_store_yaml(plan)
        online = data["online_store"]
        assert online["type"] == PASSWORD_STORE_TYPE
        # The rendered file, with the mounted paths of this machine: the CA and the password.
        online["connection_string"] = online["connection_string"].replace("/etc/mlplat/feature-store-ca/ca.crt",
                                                                          str(redis.ca))
        online["password_file"] = str(folder / "password")
        config = folder / "feature_store.yaml"
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({
            "MLPLAT_TENANT": "research", "MLPLAT_FEATURE_PROJECT": "research", "MLPLAT_DATASETS_BUCKET": BUCKET,
            "PYTHONPATH": str(REPO), "HOME": str(folder),
            # What features_spec._customer_pod sets (the CA bundle aside: moto speaks plain http here).
            "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_S3": store,
            "FEAST_S3_ENDPOINT_URL": store, "AWS_SHARED_CREDENTIALS_FILE": str(folder / "credentials"),
        })
        yield folder, config, env, redis, s3, processes
    finally:
        stop_processes(processes)
        if redis is not None:
            redis.stop()


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PYTHON), "-m", "workloads.features", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=180)


def test_materialized_features_are_served_from_the_customers_redis_and_store(customer_features):
    folder, config, env, redis, s3, processes = customer_features
    frame = pd.DataFrame({"customer_id": [1, 2], "spend": [20.25, 8.5], "visits": [2, 5],
                          "event_timestamp": pd.to_datetime(["2026-11-20T11:00:00Z"] * 2, utc=True)})
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    s3.put_object(Bucket=BUCKET, Key=SOURCE_KEY, Body=buffer.getvalue())
    source = {**env, "FEATURES_SOURCE": f"s3://{BUCKET}/{SOURCE_KEY}"}
    done = _run(source, "apply", "--config", str(config), "--repo", str(REPO / "tests" / "fixtures" / "features" /
                                                                         "repo"))
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run(env, "materialize", "--config", str(config), "--start", "2026-11-19T00:00:00+00:00",
                "--end", AS_OF.isoformat())
    assert done.returncode == 0, done.stderr[-3000:]
    # The registry is in the customer's store, under the tenant's prefix.
    assert s3.head_object(Bucket=BUCKET, Key="features/research/registry.pb")["ContentLength"] > 0
    # The tenant's user signs in with its password alone, and its ACL keeps it to its project's keys.
    assert redis.cli(USER, "GET", "not-the-project").startswith("NOPERM")
    redis.passwords[USER] = "wrong"
    assert "WRONGPASS" in redis.cli(USER, "PING")
    redis.passwords[USER] = PASSWORD

    port = free_port()
    log = folder / "serve.log"
    server = subprocess.Popen([str(PYTHON), "-m", "workloads.features", "serve", "--config", str(config),
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    processes.append(server)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", server, f"feature server ({log})", 120)
    reply = requests.post(f"{url}/get-online-features", timeout=10, json={
        "features": ["customer_stats:spend", "customer_stats:visits"], "entities": {"customer_id": [1, 2]}})
    assert reply.ok, reply.text
    body = reply.json()
    columns = dict(zip(body["metadata"]["feature_names"], (r["values"] for r in body["results"])))
    assert (columns["spend"], columns["visits"]) == ([20.25, 8.5], [2, 5])

