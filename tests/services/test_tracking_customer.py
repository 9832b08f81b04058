"""The tracking server as it runs on a customer's cluster (docs/onprem.md), against the real
thing: its entrypoint reads the database DSN and the users from files (the customer's
Kubernetes Secrets, mounted), talks to a real PostgreSQL over verified TLS, and keeps a
tenant's artifacts in an S3-compatible store at the endpoint the pod names (a moto server
standing in for Ceph RGW or MinIO); nothing asks Secrets Manager."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import boto3
import pytest
import requests

from tests.services.oci import free_port
from tests.services.tracking import (
    REPO,
    TRACKING_VENV,
    require_tracking,
    start_moto,
    start_postgres,
    stop_processes,
)

pytestmark = pytest.mark.slow

REGION = "ae-auh-dc1"
TENANTS = {"research": "research-password", "applied": "applied-password"}


@pytest.fixture(scope="module")
def customer_server(tmp_path_factory):
    require_tracking()
    folder = tmp_path_factory.mktemp("customer-tracking")
    postgres = start_postgres()
    processes: list[subprocess.Popen] = []
    try:
        store = start_moto(processes)
        credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        boto3.client("s3", endpoint_url=store, region_name=REGION, **{k.lower(): v for k, v in credentials.items()}) \
            .create_bucket(Bucket="models", CreateBucketConfiguration={"LocationConstraint": REGION})
        # The two Secrets, as the kubelet mounts them: one file per key.
        (folder / "dsn").write_text(f"postgresql://{postgres.user}:{quote(postgres.password, safe='')}@127.0.0.1:"
                                    f"{postgres.port}/postgres?sslmode=verify-full&sslrootcert={postgres.ca}")
        (folder / "credentials").write_text("[default]\naws_access_key_id = testing\n"
                                            "aws_secret_access_key = testing\n")
        users = folder / "users"
        users.mkdir()
        for key, value in {"admin": "admin-password", "flask-secret-key": "0" * 64,
                           **{f"tenant.{t}": p for t, p in TENANTS.items()}}.items():
            (users / key).write_text(value)
        port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        env.update({
            "PATH": f"{TRACKING_VENV / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
            "MLPLAT_DB_DSN_FILE": str(folder / "dsn"), "MLPLAT_USERS_DIR": str(users),
            "MLPLAT_ARTIFACTS": "s3://models/mlflow", "MLPLAT_PORT": str(port), "MLPLAT_WORKERS": "1",
            "MLPLAT_TRACKING_CONFIG_DIR": str(folder / "config"),
            # What tracking_spec.customer_deployment sets; the object store's keys as a file.
            "MLFLOW_S3_ENDPOINT_URL": store, "AWS_ENDPOINT_URL_S3": store, "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION, "AWS_SHARED_CREDENTIALS_FILE": str(folder / "credentials"),
        })
        log = folder / "mlflow.log"
        server = subprocess.Popen([str(TRACKING_VENV / "bin" / "python"), "-m", "workloads.tracking.server"], env=env,
                                  cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
        processes.append(server)
        uri = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise RuntimeError(f"tracking server exited {server.returncode}: {log.read_text()[-1500:]}")
            try:
                if requests.get(f"{uri}/api/2.0/mlflow/users/get", params={"username": "research"},
                                auth=("admin", "admin-password"), timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError(f"tracking server not ready: {log.read_text()[-1500:]}")
        yield uri, store, credentials
    finally:
        stop_processes(processes)
        postgres.stop()


def test_tenants_log_to_the_customers_store_with_the_mounted_passwords(customer_server):
    uri, store, credentials = customer_server
    auth = ("research", TENANTS["research"])
    made = requests.post(f"{uri}/api/2.0/mlflow/experiments/create", json={"name": "research/onprem"}, auth=auth,
                         timeout=10)
    assert made.ok, made.text
    run = requests.post(f"{uri}/api/2.0/mlflow/runs/create", json={"experiment_id": made.json()["experiment_id"]},
                        auth=auth, timeout=10).json()["run"]["info"]
    # Proxied artifacts: the client sends them to the server, which writes the customer's store.
    put = requests.put(f"{uri}/api/2.0/mlflow-artifacts/artifacts/{run['experiment_id']}/{run['run_id']}/artifacts/"
                       "note.txt", data=b"on the customer's store", auth=auth, timeout=10)
    assert put.ok, put.text
    s3 = boto3.client("s3", endpoint_url=store, region_name=REGION, **{k.lower(): v for k, v in credentials.items()})
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="models", Prefix="mlflow/").get("Contents", [])]
    assert [k for k in keys if k.endswith("/note.txt")], keys
    # Another tenant's password does not open it; a wrong password opens nothing.
    assert requests.get(f"{uri}/api/2.0/mlflow/experiments/get", params={"experiment_id": run["experiment_id"]},
                        auth=("applied", TENANTS["applied"]), timeout=10).status_code == 403
    assert requests.get(f"{uri}/api/2.0/mlflow/experiments/search", params={"max_results": 1},
                        auth=("research", "wrong"), timeout=10).status_code == 401
