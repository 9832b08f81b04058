"""Real services for the tracking tests: PostgreSQL (Debian's, TLS only, password auth),
a moto server (S3 and Secrets Manager), and the MLflow server started by the tracking
image's own entrypoint (`python -m workloads.tracking.server`), which reads its database
and user passwords from Secrets Manager as it does in the pod.

The server runs from `.venv-tracking` (Makefile `setup`): MLflow's server pins packages the
project's own environment cannot hold. A missing piece fails the test with one line
naming what to install; nothing skips."""

from __future__ import annotations

import glob
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.services.oci import free_port

REPO = Path(__file__).resolve().parents[2]
TRACKING_VENV = REPO / ".venv-tracking"
REGION = "me-central-1"
BUCKETS = ("models", "checkpoints")
TENANTS = ("research", "analytics")
INSTALL_PG = "install PostgreSQL and openssl (Debian/Ubuntu: sudo apt-get install postgresql openssl)"


def pg_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return versions[-1] if versions else None


def require_tracking() -> None:
    missing = [n for n in ("initdb", "pg_ctl") if pg_binary(n) is None]
    if shutil.which("openssl") is None:
        missing.append("openssl")
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: {INSTALL_PG}", pytrace=False)
    if not (TRACKING_VENV / "bin" / "mlflow").exists() or not (TRACKING_VENV / "bin" / "moto_server").exists():
        pytest.fail(f"{TRACKING_VENV} lacks the MLflow server or moto: run `make setup`", pytrace=False)


def _as_postgres(cmd: list[str]) -> list[str]:
    """initdb refuses to run as root: as root, run PostgreSQL as Debian's `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class Postgres:
    port: int
    data: Path
    ca: Path  # the server's self-signed certificate: clients verify against it
    user: str
    password: str

    def stop(self) -> None:
        subprocess.run(_as_postgres([pg_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=30)
        shutil.rmtree(self.data.parent, ignore_errors=True)


def start_postgres() -> Postgres:
    # Its own directory under /tmp: as root the server runs as `postgres`, which cannot
    # enter pytest's root-only temporary folders.
    folder = Path(tempfile.mkdtemp(prefix="mlplat-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data, password = folder / "data", secrets.token_urlsafe(16)
    pwfile = folder / "pw"
    pwfile.write_text(password + "\n")
    key, cert = folder / "server.key", folder / "server.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    key.chmod(0o600)
    for path in (pwfile, key, cert):
        if os.geteuid() == 0:
            shutil.chown(path, "postgres", "postgres")
    run = subprocess.run(_as_postgres([pg_binary("initdb"), "-D", str(data), "-U", "mlflow", "-A", "scram-sha-256",
                                       f"--pwfile={pwfile}"]), capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"initdb failed: {run.stderr[-500:]}")
    # TLS only, as rds.force_ssl=1 makes RDS: no plain host connection is accepted.
    (data / "pg_hba.conf").write_text("hostssl all all 127.0.0.1/32 scram-sha-256\n")
    port = free_port()
    options = (f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file={cert} "
               f"-c ssl_key_file={key}")
    run = subprocess.run(_as_postgres([pg_binary("pg_ctl"), "-D", str(data), "-l", str(folder / "pg.log"), "-o",
                                       options, "-w", "start"]), capture_output=True, text=True, timeout=60)
    if run.returncode:
        raise RuntimeError(f"pg_ctl start failed: {run.stderr[-300:]} {(folder / 'pg.log').read_text()[-500:]}")
    return Postgres(port, data, cert, "mlflow", password)


def wait_http(url: str, process: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer on {url}")


@dataclass
class TrackingStack:
    uri: str
    s3: str  # the moto endpoint
    admin_password: str
    passwords: dict[str, str]  # tenant -> password
    postgres: Postgres
    processes: list[subprocess.Popen] = field(default_factory=list)
    log: Path | None = None
    # tenant -> its pipeline engine's database secret, which the server fills (moto)
    pipeline_secrets: dict[str, str] = field(default_factory=dict)

    def env(self, tenant: str) -> dict[str, str]:
        """What a tenant's pod has: the server, its user, and (for the checkpoints bucket)
        S3 credentials, here the moto server's."""
        return {"MLFLOW_TRACKING_URI": self.uri, "MLFLOW_TRACKING_USERNAME": tenant,
                "MLFLOW_TRACKING_PASSWORD": self.passwords[tenant], **aws_env(self.s3)}

    def stop(self) -> None:
        stop_processes(self.processes)
        self.postgres.stop()


def stop_processes(processes: list[subprocess.Popen]) -> None:
    """Terminate, newest first; kill what does not stop in 20 s."""
    for process in reversed(processes):
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def aws_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}


def start_moto(processes: list[subprocess.Popen], env: dict[str, str] | None = None) -> str:
    """A moto server (S3, Secrets Manager, IAM, KMS, STS) on a free port; its endpoint.
    `env`: moto's own settings (MOTO_IAM_LOAD_MANAGED_POLICIES, ...)."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = subprocess.Popen([str(TRACKING_VENV / "bin" / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
    processes.append(moto)
    wait_http(endpoint, moto, "moto_server", 30)
    return endpoint


def start_tracking_stack(folder: Path) -> TrackingStack:
    require_tracking()
    postgres = start_postgres()
    processes: list[subprocess.Popen] = []
    try:
        s3 = start_moto(processes)
        import boto3

        session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
        s3_client = session.client("s3", endpoint_url=s3)
        for bucket in BUCKETS:
            s3_client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
        manager = session.client("secretsmanager", endpoint_url=s3)

        def secret(name: str, value: dict | None = None) -> str:
            # As the cloud layer makes them: the database's with a value (RDS writes it),
            # the server's and the tenants' empty, for the server to fill.
            given = {"SecretString": json.dumps(value)} if value else {}
            return manager.create_secret(Name=name, **given)["ARN"]

        made = {"admin": secret("admin"), **{t: secret(f"tenant-{t}") for t in TENANTS}}
        pipelines = {t: secret(f"pipelines-{t}") for t in TENANTS}

        port = free_port()
        env = {
            **os.environ, **aws_env(s3),
            "PATH": f"{TRACKING_VENV / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
            "MLPLAT_DB_HOST": "127.0.0.1", "MLPLAT_DB_PORT": str(postgres.port), "MLPLAT_DB_NAME": "postgres",
            "MLPLAT_DB_CA_BUNDLE": str(postgres.ca),
            "MLPLAT_DB_SECRET_ARN": secret("db", {"username": postgres.user, "password": postgres.password}),
            "MLPLAT_ADMIN_SECRET_ARN": made["admin"],
            "MLPLAT_TENANT_SECRET_ARNS": json.dumps({t: made[t] for t in TENANTS}),
            "MLPLAT_PIPELINE_SECRET_ARNS": json.dumps(pipelines),
            "MLPLAT_ARTIFACTS": "s3://models/mlflow", "MLPLAT_PORT": str(port), "MLPLAT_WORKERS": "1",
            "MLPLAT_TRACKING_CONFIG_DIR": str(folder / "config"),
        }
        log = folder / "mlflow.log"
        server = subprocess.Popen([str(TRACKING_VENV / "bin" / "python"), "-m", "workloads.tracking.server"],
                                  env=env, cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
        processes.append(server)
        uri = f"http://127.0.0.1:{port}"
        # Ready once the entrypoint has filled the secrets and made the tenants' users;
        # the passwords are read back as a tenant's pod would.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise RuntimeError(f"tracking server exited {server.returncode}: {log.read_text()[-1500:]}")
            try:
                values = {who: json.loads(manager.get_secret_value(SecretId=arn)["SecretString"])["password"]
                          for who, arn in made.items()}
                # Every tenant's user: the entrypoint makes them one by one, in its own order.
                if all(requests.get(f"{uri}/api/2.0/mlflow/users/get", params={"username": tenant},
                                    auth=("admin", values["admin"]), timeout=2).ok for tenant in TENANTS):
                    return TrackingStack(uri, s3, values.pop("admin"), values, postgres, processes, log, pipelines)
            except manager.exceptions.ResourceNotFoundException:
                pass
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"tracking server not ready: {log.read_text()[-1500:]}")
    except BaseException:
        for process in processes:
            process.kill()
        postgres.stop()
        raise
