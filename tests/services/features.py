"""Real services for the feature-store tests: Debian's redis-server with TLS and the
tenants' users as the cloud layer makes them (the ACL from components/features_spec.py), the
tracking stack's moto server as S3 (the datasets bucket: sources, registries, datasets), and
Feast from `.venv-features`, driven through `python -m workloads.features` as the pods run it.

ElastiCache checks a user's IAM token; a local Redis cannot, so its users take any password
(`nopass`) and the online store still signs and sends its token. What a user may touch is
the ACL's to decide, here as there; who may be which user is IAM's (tests/iam)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.features_spec import ProjectPlan, access_string, feature_store_yaml, project_name
from tests.services.oci import free_port
from tests.services.tracking import REGION, REPO, TrackingStack, aws_env, stop_processes, wait_http

FEATURES_VENV = REPO / ".venv-features"
PYTHON = FEATURES_VENV / "bin" / "python"
BUCKET = "datasets"
TENANTS = ("research", "analytics")  # the tracking stack's tenants too
INSTALL = "install redis-server and openssl (Debian/Ubuntu: sudo apt-get install redis-server openssl)"


def require_features() -> None:
    missing = [tool for tool in ("redis-server", "redis-cli", "openssl") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: {INSTALL}", pytrace=False)
    if not PYTHON.exists():
        pytest.fail(f"{FEATURES_VENV} lacks Feast: run `make setup`", pytrace=False)


@dataclass
class Redis:
    port: int
    ca: Path
    process: subprocess.Popen
    passwords: dict[str, str] = field(default_factory=dict)  # user -> password; others take any

    def cli(self, user: str, *command: str) -> str:
        """One command as `user` (any password: see above), through redis-cli over TLS;
        its reply, errors included, as text."""
        done = subprocess.run(["redis-cli", "--tls", "--cacert", str(self.ca), "-h", "127.0.0.1", "-p", str(self.port),
                               "--user", user, "--pass", self.passwords.get(user, "iam-token-stand-in"),
                               "--no-auth-warning", *command],
                              capture_output=True, text=True, timeout=20)
        return (done.stdout + done.stderr).strip()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


def start_redis(folder: Path, users: dict[str, str], passwords: dict[str, str] | None = None) -> Redis:
    """TLS only (no plain port), the default user off, and `users` (user -> project) with
    the platform's access string; a user in `passwords` (a customer's Redis) needs its own."""
    passwords = passwords or {}
    folder.mkdir(parents=True, exist_ok=True)
    key, cert = folder / "redis.key", folder / "redis.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    acl = folder / "users.acl"
    secrets = {u: f">{passwords[u]}" if u in passwords else "nopass" for u in users}
    acl.write_text("user default off\n" + "".join(f"user {u} {secrets[u]} {access_string(p)}\n"
                                                  for u, p in users.items()))
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--tls-cert-file", str(cert),
         "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
         "--aclfile", str(acl), "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=(folder / "redis.log").open("w"), stderr=subprocess.STDOUT)
    redis = Redis(port, cert, process, passwords)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited: {(folder / 'redis.log').read_text()[-800:]}")
        if redis.cli(next(iter(users)), "PING") == "PONG":
            return redis
        time.sleep(0.1)
    raise RuntimeError("redis-server did not answer")


@dataclass
class FeatureStack:
    folder: Path
    redis: Redis
    s3: str  # the moto endpoint
    tracking: TrackingStack | None = None  # MLflow, for registering datasets
    processes: list[subprocess.Popen] = field(default_factory=list)

    def user(self, tenant: str) -> str:
        return f"mlplat-test-features-{tenant}"

    def plan(self, tenant: str) -> ProjectPlan:
        return ProjectPlan(tenant=tenant, project=project_name(tenant), image="unused", datasets_bucket=BUCKET,
                           redis_host="127.0.0.1", replication_group_id="mlplat-test-features",
                           user=self.user(tenant), region=REGION, vpc_cidr="10.0.0.0/16",
                           instance_types=("m7i.large",), replicas=1, materialize_every_minutes=60)

    def config(self, tenant: str, **changes: Any) -> Path:
        """The tenant's feature_store.yaml as the cluster layer renders it, pointed at the
        local Redis (its port, and its self-signed CA); `changes` override top-level keys."""
        data = feature_store_yaml(self.plan(tenant))
        data["online_store"]["connection_string"] = (
            f"127.0.0.1:{self.redis.port},ssl=true,ssl_ca_certs={self.redis.ca}")
        data.update(changes)
        path = self.folder / f"{tenant}-{len(list(self.folder.glob(f'{tenant}-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def env(self, tenant: str) -> dict[str, str]:
        """What the tenant's feature-store pod has: who it is, S3 (moto), MLflow."""
        tracking = self.tracking.env(tenant) if self.tracking else {}
        return {**os.environ, **tracking, **aws_env(self.s3),
                "MLPLAT_TENANT": tenant, "MLPLAT_FEATURE_PROJECT": project_name(tenant),
                "MLPLAT_DATASETS_BUCKET": BUCKET, "PYTHONPATH": str(REPO), "HOME": str(self.folder)}

    def run(self, tenant: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([str(PYTHON), "-m", "workloads.features", *args], cwd=REPO, env=self.env(tenant),
                              capture_output=True, text=True, timeout=timeout)

    def python(self, tenant: str, code: str, *args: str) -> subprocess.CompletedProcess:
        """A snippet in Feast's environment as the tenant (bypassing the CLI's checks)."""
        return subprocess.run([str(PYTHON), "-c", code, *args], cwd=REPO, env=self.env(tenant),
                              capture_output=True, text=True, timeout=180)

    def put_parquet(self, key: str, rows: dict[str, list[Any]]) -> str:
        """Write `rows` (columns; `event_timestamp` as ISO strings) as Parquet to the bucket."""
        code = ("import io, json, sys, boto3, pandas as pd\n"
                "rows = json.loads(sys.argv[2])\n"
                "frame = pd.DataFrame(rows)\n"
                "frame['event_timestamp'] = pd.to_datetime(frame['event_timestamp'], utc=True)\n"
                "buffer = io.BytesIO(); frame.to_parquet(buffer, index=False)\n"
                "boto3.client('s3').put_object(Bucket='datasets', Key=sys.argv[1], Body=buffer.getvalue())\n")
        done = self.python(TENANTS[0], code, key, json.dumps(rows))
        assert done.returncode == 0, done.stderr[-2000:]
        return f"s3://{BUCKET}/{key}"

    def read_parquet(self, uri: str) -> list[dict[str, Any]]:
        code = ("import json, sys, pandas as pd\n"
                "frame = pd.read_parquet(sys.argv[1])\n"
                "frame['event_timestamp'] = frame['event_timestamp'].map(lambda t: t.isoformat())\n"
                "print(frame.to_json(orient='records'))\n")
        done = self.python(TENANTS[0], code, uri)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    def serve(self, tenant: str, config: Path) -> str:
        """The feature server as the Deployment runs it; its URL once it answers."""
        port = free_port()
        log = self.folder / f"serve-{tenant}.log"
        process = subprocess.Popen([str(PYTHON), "-m", "workloads.features", "serve", "--config", str(config),
                                    "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                                   cwd=REPO, env=self.env(tenant), stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.processes.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", process, f"feature server ({log})", 120)
        return url

    def stop(self) -> None:
        stop_processes(self.processes)
        self.redis.stop()


def start_feature_stack(folder: Path, tracking: TrackingStack) -> FeatureStack:
    require_features()
    import boto3

    s3 = boto3.client("s3", endpoint_url=tracking.s3, aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name=REGION)
    try:
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass  # another file's feature stack on the session's moto server made it
    stack = FeatureStack(folder, None, tracking.s3, tracking)  # type: ignore[arg-type]
    stack.redis = start_redis(folder / "redis", {stack.user(t): project_name(t) for t in TENANTS})
    return stack
