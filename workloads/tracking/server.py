"""The tracking server: MLflow's own server with its basic-auth app, started by this
module in the `tracking` image (workloads/images/tracking.Dockerfile).

Why the basic-auth app and not an OIDC proxy: the issue asks that each tenant see and
write only its own experiments and registered models. A proxy in front can authenticate
but sees only URLs, and MLflow's search endpoints would still list every tenant's objects;
the auth app checks permissions per experiment and per registered model inside the server
and filters searches. Each tenant gets one user (its password in a Secrets Manager secret
its own role reads); `default_permission = NO_PERMISSIONS`, and a user that creates an
experiment or a model is its only manager.

At start, and whenever a credential changes:
- the database password is read from the RDS-managed Secrets Manager secret (rotated by
  RDS), and the server restarted when it rotates;
- the auth database is created where missing;
- every tenant's user is created, or its password set, from its secret;
- each pipeline tenant's engine database and role are made, or the role's password set,
  from that tenant's pipelines secret (workloads/tracking/databases.py).
Nothing secret is in the pod spec or in Pulumi state.

On a customer's own cluster (docs/onprem.md) there is no Secrets Manager: the credentials
are Kubernetes Secrets the customer makes, mounted as files and read the same way, again
on every round, so a rotated one restarts the server or resets the user's password:
- `MLPLAT_DB_DSN_FILE`: the PostgreSQL DSN (`postgresql://user:password@host:port/db?
  sslmode=verify-full&sslrootcert=...`);
- `MLPLAT_USERS_DIR`: `admin` (the admin's password), `flask-secret-key`, and
  `tenant.<name>` (each tenant's password).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import requests

from workloads import inputs

AUTH_DATABASE = "mlflow_auth"
ADMIN_USER = "admin"
# Where the server writes its auth config: the pod's only writable directory.
CONFIG_DIR = Path(os.environ.get("MLPLAT_TRACKING_CONFIG_DIR", "/tmp/mlflow"))
AUTH_CACHE_S = 60  # how long a worker trusts a checked password
POLL_S = 300  # how often the secrets are read again (RDS rotates the database's weekly)
READY_TIMEOUT_S = 120


@dataclass(frozen=True)
class Database:
    host: str
    port: int
    name: str
    user: str
    password: str
    # TLS to RDS, verified against the RDS CA bundle in the image; "disable" only in tests.
    sslmode: str = "verify-full"
    sslrootcert: str = ""

    def uri(self, database: str | None = None) -> str:
        query = f"sslmode={self.sslmode}" + (f"&sslrootcert={self.sslrootcert}" if self.sslrootcert else "")
        return (f"postgresql://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{self.host}:{self.port}/"
                f"{database or self.name}?{query}")


@dataclass(frozen=True)
class ServerSettings:
    database: Database
    artifacts: str  # s3://<models bucket>/<prefix>: proxied, clients never see the bucket
    admin_password: str
    # Flask's CSRF key: the same in every replica, so a form one served another accepts.
    secret_key: str
    host: str = "0.0.0.0"  # noqa: S104 - inside the pod; the NetworkPolicy says who reaches it
    port: int = 5000
    workers: int = 2


def auth_config(settings: ServerSettings) -> str:
    """MLflow's basic_auth.ini."""
    return "\n".join([
        "[mlflow]",
        "default_permission = NO_PERMISSIONS",
        f"database_uri = {settings.database.uri(AUTH_DATABASE)}",
        f"admin_username = {ADMIN_USER}",
        f"admin_password = {settings.admin_password}",
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth",
        # Every request otherwise hashes the password again (PBKDF2): about half a second on
        # a loaded 2-core node. A changed password reaches the other workers within this.
        f"auth_cache_ttl_seconds = {AUTH_CACHE_S}",
        "",
    ])


def server_command(settings: ServerSettings, mlflow: str = "mlflow") -> list[str]:
    """The server's arguments: nothing secret, since any process on the node can read
    another's command line (/proc/<pid>/cmdline); the database URI, which holds the
    password, goes in the environment (start)."""
    return [
        mlflow, "server",
        # Proxied artifacts: the server reads and writes the bucket with its own (Pod
        # Identity) credentials; clients send artifacts through it.
        "--artifacts-destination", settings.artifacts,
        "--serve-artifacts",
        "--app-name", "basic-auth",
        "--host", settings.host,
        "--port", str(settings.port),
        "--workers", str(settings.workers),
    ]


def ensure_auth_database(database: Database) -> None:
    """The auth app keeps users and permissions in its own database on the same server."""
    import psycopg

    # autocommit: CREATE DATABASE cannot run in a transaction.
    connection = psycopg.connect(database.uri(), autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (AUTH_DATABASE,))
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{AUTH_DATABASE}"')
    finally:
        connection.close()


def sync_users(uri: str, admin_password: str, tenants: Mapping[str, str]) -> None:
    """Each tenant's user exists with its secret's password (idempotent)."""
    auth = (ADMIN_USER, admin_password)
    base = uri.rstrip("/") + "/api/2.0/mlflow/users"
    for user, password in sorted(tenants.items()):
        found = requests.get(f"{base}/get", params={"username": user}, auth=auth, timeout=10)
        if found.status_code == 404:
            made = requests.post(f"{base}/create", json={"username": user, "password": password}, auth=auth,
                                 timeout=10)
            made.raise_for_status()
        else:
            found.raise_for_status()
            requests.patch(f"{base}/update-password", json={"username": user, "password": password}, auth=auth,
                           timeout=10).raise_for_status()


def start(settings: ServerSettings, env: Mapping[str, str] | None = None, mlflow: str = "mlflow",
          log: Any = None) -> subprocess.Popen:
    """The auth database, the auth config, then the server process (not waited for)."""
    ensure_auth_database(settings.database)
    CONFIG_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = CONFIG_DIR / "basic_auth.ini"
    # It holds the admin password: created owner-only, never readable by others for a moment.
    descriptor = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(descriptor, 0o600)  # a file left by an earlier start keeps its old mode otherwise
    with os.fdopen(descriptor, "w") as out:
        out.write(auth_config(settings))
    # MLflow's job runner (GenAI scorers, prompt optimisation) would run functions in consumer
    # processes beside the workers, with this pod's database and bucket credentials: the
    # platform's server tracks and registers, and runs nothing else.
    return subprocess.Popen(server_command(settings, mlflow),
                            env={**(env if env is not None else os.environ), "MLFLOW_AUTH_CONFIG_PATH": str(config),
                                 "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
                                 "MLFLOW_BACKEND_STORE_URI": settings.database.uri(),
                                 "MLFLOW_FLASK_SERVER_SECRET_KEY": settings.secret_key},
                            stdout=log, stderr=subprocess.STDOUT if log else None)


def wait_ready(uri: str, process: subprocess.Popen, timeout: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {process.returncode}")
        try:
            if requests.get(uri.rstrip("/") + "/health", timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"mlflow server did not answer on {uri} within {timeout:.0f} s")


# --- in the pod --------------------------------------------------------------------


def _secret(client: Any, arn: str) -> dict[str, Any]:
    return json.loads(client.get_secret_value(SecretId=arn)["SecretString"])


def _made_secret(client: Any, arn: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """A secret the cloud layer created empty: its value, or (the first time) one made
    here, so no password passes through Pulumi. Replicas starting together use one client
    token, so Secrets Manager keeps the first value and the others read it back."""
    import secrets as random
    import uuid

    from botocore.exceptions import ClientError

    try:
        return _secret(client, arn)
    except ClientError as err:
        if err.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
    value = {"password": random.token_urlsafe(24), **{f: random.token_hex(32) for f in fields}}
    try:
        client.put_secret_value(SecretId=arn, SecretString=json.dumps(value),
                                ClientRequestToken=str(uuid.uuid5(uuid.NAMESPACE_URL, arn)))
    except ClientError as err:
        if err.response["Error"]["Code"] not in ("ResourceExistsException", "InvalidRequestException"):
            raise
    return _secret(client, arn)


def _read_settings(secrets: Any) -> tuple[ServerSettings, dict[str, str]]:
    env = os.environ
    db = _secret(secrets, env["MLPLAT_DB_SECRET_ARN"])
    database = Database(host=env["MLPLAT_DB_HOST"], port=int(env.get("MLPLAT_DB_PORT", "5432")),
                        name=env.get("MLPLAT_DB_NAME", "mlflow"), user=db["username"], password=db["password"],
                        sslrootcert=env.get("MLPLAT_DB_CA_BUNDLE", ""))
    admin = _made_secret(secrets, env["MLPLAT_ADMIN_SECRET_ARN"], ("flask_secret_key",))
    tenants = {name: _made_secret(secrets, arn, ())["password"]
               for name, arn in json.loads(env.get("MLPLAT_TENANT_SECRET_ARNS", "{}")).items()}
    return ServerSettings(database=database, artifacts=env["MLPLAT_ARTIFACTS"], admin_password=admin["password"],
                          secret_key=admin["flask_secret_key"],
                          port=int(env.get("MLPLAT_PORT", "5000")), workers=int(env.get("MLPLAT_WORKERS", "2"))), tenants


# --- on a customer's cluster: the credentials as mounted Kubernetes Secrets ---------------

DSN_FILE_ENV = "MLPLAT_DB_DSN_FILE"
USERS_DIR_ENV = "MLPLAT_USERS_DIR"
ADMIN_KEY = "admin"
FLASK_KEY_FILE = "flask-secret-key"
TENANT_PREFIX = "tenant."
SECRET_LIMIT = 64 << 10  # a password, a key or a DSN is well under a kilobyte


def database_from_dsn(dsn: str) -> Database:
    """A PostgreSQL DSN as libpq writes it; TLS verified unless it says otherwise."""
    parts = urlsplit(dsn.strip())
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or not parts.username:
        raise ValueError("the database DSN is not postgresql://<user>:<password>@<host>[:<port>]/<database>")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return Database(host=parts.hostname, port=parts.port or 5432, name=parts.path.lstrip("/") or "mlflow",
                    user=unquote(parts.username), password=unquote(parts.password or ""),
                    sslmode=query.get("sslmode", "verify-full"), sslrootcert=query.get("sslrootcert", ""))


def settings_from_files(env: Mapping[str, str]) -> tuple[ServerSettings, dict[str, str]]:
    """The settings and the tenants' passwords from the mounted Secrets."""
    users = Path(env[USERS_DIR_ENV])

    def read(path: Path) -> str:
        # A mounted Secret's key is a small regular file; anything else (a FIFO, a device,
        # a huge file) is refused in one line rather than hanging or filling memory.
        value = inputs.read_text(path, "secret file", SECRET_LIMIT).strip()
        if not value:
            raise ValueError(f"{path} is empty")
        return value

    tenants = {path.name.removeprefix(TENANT_PREFIX): read(path) for path in sorted(users.glob(f"{TENANT_PREFIX}*"))}
    return ServerSettings(database=database_from_dsn(read(Path(env[DSN_FILE_ENV]))), artifacts=env["MLPLAT_ARTIFACTS"],
                          admin_password=read(users / ADMIN_KEY), secret_key=read(users / FLASK_KEY_FILE),
                          port=int(env.get("MLPLAT_PORT", "5000")), workers=int(env.get("MLPLAT_WORKERS", "2"))), tenants


def main() -> int:
    """Run the server; read the secrets again every POLL_S and restart it when the
    database password or the admin password has rotated."""
    from workloads.tracking.databases import ensure_pipeline_databases

    if os.environ.get(DSN_FILE_ENV):
        def read_settings() -> tuple[ServerSettings, dict[str, str]]:
            return settings_from_files(os.environ)

        def pipelines() -> dict[str, str]:
            return {}  # the customer makes each tenant's engine database (docs/onprem.md)
    else:
        import boto3

        secrets = boto3.client("secretsmanager")

        def read_settings() -> tuple[ServerSettings, dict[str, str]]:
            return _read_settings(secrets)

        def pipelines() -> dict[str, str]:
            arns = json.loads(os.environ.get("MLPLAT_PIPELINE_SECRET_ARNS", "{}"))
            return {tenant: _made_secret(secrets, arn, ())["password"] for tenant, arn in arns.items()}
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    settings, tenants = read_settings()
    uri = f"http://127.0.0.1:{settings.port}"
    process = start(settings)
    wait_ready(uri, process)
    sync_users(uri, settings.admin_password, tenants)
    ensure_pipeline_databases(settings.database, pipelines())
    checked = time.monotonic()
    while not stopping and process.poll() is None:
        time.sleep(1)
        if time.monotonic() - checked < POLL_S:
            continue
        checked = time.monotonic()
        fresh, tenants = read_settings()
        if fresh != settings:
            process.terminate()
            process.wait(timeout=60)
            settings, process = fresh, start(fresh)
            wait_ready(uri, process)
        sync_users(uri, settings.admin_password, tenants)
        ensure_pipeline_databases(settings.database, pipelines())
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=60)
    return 0 if stopping else (process.returncode or 1)


if __name__ == "__main__":
    sys.exit(main())
