"""The tracking server as it runs on a customer's cluster (docs/onprem.md), against the real
thing: its entrypoint reads the database DSN and the users from files (the customer's
Kubernetes Secrets, mounted), talks to a real PostgreSQL over verified TLS, and keeps a
tenant's artifacts in an S3-compatible store at the endpoint the pod names (a moto server
standing in for Ceph RGW or MinIO); nothing asks Secrets Manager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


# --- the trainer's checkpoint upload on a customer's cluster ------------------------------
# What the onprem trainer's pod gets (infra/training.py customer_tracking), against an
# S3-compatible store over TLS with a certificate of the customer's own CA (a moto server
# standing in for Ceph RGW): workloads/tracking/store.py's boto3 client goes to
# AWS_ENDPOINT_URL_S3, trusts AWS_CA_BUNDLE and signs with the mounted credentials file.

UPLOAD = ("import json, os, sys; from pathlib import Path; from workloads.tracking.store import upload; "
          "print(json.dumps(upload(Path(sys.argv[1]), os.environ['MLPLAT_CHECKPOINT_UPLOAD'], run_id='run-1', "
          "dataset='sha256:' + '0' * 64, config={'step': 5})))")


def _customer_ca_and_store_certificate(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signed for 127.0.0.1."""
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    cert, key, csr, ext = folder / "store.crt", folder / "store.key", folder / "store.csr", folder / "store.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,"
                   "keyEncipherment\nextendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\n")
    for command in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=customer-ca", "-keyout",
         str(ca_key), "-out", str(ca), "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
         "keyUsage=critical,keyCertSign,cRLSign"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr)],
        ["x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2",
         "-out", str(cert), "-extfile", str(ext)],
    ):
        subprocess.run(["openssl", *command], check=True, capture_output=True, timeout=60)
    return ca, cert, key


def test_the_trainers_checkpoint_upload_goes_to_the_customers_store_over_its_ca(tmp_path):
    from infra.descriptor import environment_settings
    from tests.conftest import customer_descriptor
    from infra.training import cluster_plan
    from infra.training_plan import resolve_training

    require_tracking()
    descriptor = customer_descriptor("onprem")
    config = environment_settings("onprem")
    built = {"training": "0.1.0@sha256:" + "0" * 64, "checks": "0.1.0@sha256:" + "1" * 64}
    plan = cluster_plan(config, descriptor, resolve_training(config), built)
    pod_env = dict(plan.tracking_env)
    ca, cert, key = _customer_ca_and_store_certificate(tmp_path)
    port = free_port()
    processes: list[subprocess.Popen] = []
    try:
        processes.append(subprocess.Popen(
            [str(TRACKING_VENV / "bin" / "moto_server"), "-H", "127.0.0.1", "-p", str(port), "-c", str(cert), "-k",
             str(key)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        store = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(store, verify=str(ca), timeout=1)
                break
            except requests.RequestException:
                if time.monotonic() > deadline or processes[0].poll() is not None:
                    raise
                time.sleep(0.2)
        bucket = pod_env["MLPLAT_CHECKPOINT_UPLOAD"].removeprefix("s3://").split("/", 1)[0]
        s3 = boto3.client("s3", endpoint_url=store, region_name=pod_env["AWS_REGION"], verify=str(ca),
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": pod_env["AWS_REGION"]})
        checkpoint = tmp_path / "step_00000005"
        checkpoint.mkdir()
        (checkpoint / "model.pt").write_bytes(b"weights" * 100)
        (checkpoint / "config.json").write_text('{"step": 5}')
        (tmp_path / "credentials").write_text("[default]\naws_access_key_id = testing\n"
                                              "aws_secret_access_key = testing\n")
        # The pod's variables as rendered, with its mounted files' paths and the store's
        # address here; nothing else of AWS (no keys in the environment, no ~/.aws).
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(tmp_path),
               **{k: v for k, v in pod_env.items() if k.startswith(("AWS_", "MLPLAT_CHECKPOINT"))},
               "AWS_ENDPOINT_URL_S3": store, "AWS_CA_BUNDLE": str(ca),
               "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"), "AWS_EC2_METADATA_DISABLED": "true"}
        assert set(env) - {"PATH", "PYTHONPATH", "HOME", "AWS_EC2_METADATA_DISABLED"} == {
            "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE",
            "MLPLAT_CHECKPOINT_UPLOAD"}
        done = subprocess.run([sys.executable, "-c", UPLOAD, str(checkpoint)], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-1500:]
        manifest, _digest = json.loads(done.stdout)
        assert manifest == f"{pod_env['MLPLAT_CHECKPOINT_UPLOAD']}/run-1/step_00000005/manifest.json"
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
        # Under the tenant's own prefix, which its scoped keys may write (docs/onprem.md).
        tenant = pod_env["MLPLAT_CHECKPOINT_UPLOAD"].removeprefix(f"s3://{bucket}/runs/")
        assert tenant and "/" not in tenant
        assert keys == {f"runs/{tenant}/run-1/step_00000005/{name}"
                        for name in ("model.pt", "config.json", "manifest.json")}
        # Without the customer's CA, the store's certificate is not trusted: nothing is sent.
        untrusted = {k: v for k, v in env.items() if k != "AWS_CA_BUNDLE"}
        refused = subprocess.run([sys.executable, "-c", UPLOAD, str(checkpoint)], env=untrusted, cwd=REPO,
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "SSLError" in refused.stderr, refused.stderr[-1500:]
    finally:
        stop_processes(processes)
