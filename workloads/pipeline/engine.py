"""`python -m workloads.pipeline engine <component>`: one process of the tenant's Airflow, as
the pipeline engine's pods run it (components/pipelines_spec.py), in the `pipelines` image.

    engine migrate         `airflow db migrate` (the Job each Airflow version runs once)
    engine api-server      the API server: the UI, the REST API and the tasks' execution API
    engine scheduler       the scheduler, with the local executor: a task only submits its
                           step's Job to Kueue and waits for it (workloads/pipeline/launch.py)
    engine dag-processor   parses the golden-path DAG file
    engine check-dag-processor   the DAG processor's probe: is its heartbeat recent

Every component reads the tenant's database credentials first, as the tracking server's
users are read (workloads/tracking/server.py):
- on AWS, the tenant's Secrets Manager secret (`MLPLAT_PIPELINE_DB_SECRET_ARN`, its
  `password`; the tracking server made it and the role `airflow_<tenant>` with it,
  workloads/tracking/databases.py) on the tracking RDS instance at `MLPLAT_DB_HOST`, TLS
  verified against the RDS bundle;
- on a customer's cluster, the DSN in the customer's Secret, mounted at `MLPLAT_DB_DSN_FILE`.

Airflow's own keys (the JWT secret every component must share, the API's session key and
the Fernet key) are derived from that password, so nothing else secret exists to be made,
stored or rotated apart: a rotated password rotates them, and restarted pods agree again.
Nothing secret is in the pod spec or in Pulumi's state. Then `airflow <component>` replaces
this process, so signals reach Airflow directly."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from workloads import inputs

COMPONENTS = {
    "migrate": ["db", "migrate"],
    "api-server": ["api-server"],
    "scheduler": ["scheduler"],
    "dag-processor": ["dag-processor"],
    # The DAG processor's probe: its last heartbeat in the database is recent (exit 0), or not.
    "check-dag-processor": ["jobs", "check", "--job-type", "DagProcessorJob", "--local"],
}
API_PORT = 8080  # the pod's; MLPLAT_PIPELINE_API_PORT moves it (tests run several on one machine)
DAG_FILE = Path(__file__).with_name("dag.py")
SECRET_LIMIT = 64 << 10


class EngineInputError(ValueError):
    """A setting the pod spec or a mounted Secret got wrong: one line, exit 2."""


class EngineUnavailable(RuntimeError):
    """The database secret could not be read now (AWS unreachable, no credentials yet): one
    line, exit 1, and the pod's restart tries again."""


def _derived(password: str, purpose: str) -> bytes:
    return hmac.new(password.encode(), f"mlplat-pipelines:{purpose}".encode(), hashlib.sha256).digest()


def database_url(env: Mapping[str, str], read_secret=None) -> tuple[str, str]:
    """SQLAlchemy's URL of the tenant's database, and its password (the keys' seed)."""
    from workloads.tracking.server import database_from_dsn

    dsn_file = env.get("MLPLAT_DB_DSN_FILE")
    if dsn_file:
        text = inputs.read_text(Path(dsn_file), "database DSN file", SECRET_LIMIT).strip()
        try:
            db = database_from_dsn(text)
        except ValueError as err:
            raise EngineInputError(f"{dsn_file}: {err}") from None
        if not db.password:
            raise EngineInputError(f"{dsn_file}: the DSN has no password")
        user, password, host, port, name, sslmode, ca = (db.user, db.password, db.host, db.port, db.name,
                                                         db.sslmode, db.sslrootcert)
    else:
        missing = [k for k in ("MLPLAT_PIPELINE_DB_SECRET_ARN", "MLPLAT_DB_HOST", "MLPLAT_TENANT") if not env.get(k)]
        if missing:
            raise EngineInputError(f"{', '.join(missing)} not set: the engine's pod names its database secret, the "
                                   "database host and its tenant (or MLPLAT_DB_DSN_FILE on a customer's cluster)")
        from workloads.tracking.databases import database_name

        try:
            user = name = database_name(env["MLPLAT_TENANT"])
        except ValueError as err:
            raise EngineInputError(f"MLPLAT_TENANT: {err}") from None
        port_text = env.get("MLPLAT_DB_PORT", "5432")
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise EngineInputError(f"MLPLAT_DB_PORT {inputs.excerpt(port_text)} is not a port (1 to 65535)")
        try:
            value = (read_secret or _read_secret)(env["MLPLAT_PIPELINE_DB_SECRET_ARN"])
        except ValueError:
            raise EngineInputError(f"{env['MLPLAT_PIPELINE_DB_SECRET_ARN']}: its value is not JSON") from None
        except Exception as err:  # botocore's: not found, denied, unreachable
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise EngineUnavailable(f"{env['MLPLAT_PIPELINE_DB_SECRET_ARN']}: {first}") from None
        password = value.get("password") if isinstance(value, dict) else None
        if not isinstance(password, str) or not password:
            raise EngineInputError(f"{env['MLPLAT_PIPELINE_DB_SECRET_ARN']}: no password yet; the tracking server "
                                   "makes it when it starts (is it running?)")
        host, port, sslmode, ca = (env["MLPLAT_DB_HOST"], int(port_text), "verify-full",
                                   env.get("MLPLAT_DB_CA_BUNDLE", ""))
    query = f"sslmode={sslmode}" + (f"&sslrootcert={quote(ca, safe='/')}" if ca else "")
    return (f"postgresql+psycopg2://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/"
            f"{quote(name, safe='')}?{query}"), password


def _read_secret(arn: str) -> object:
    import boto3

    return json.loads(boto3.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"])


def airflow_environment(env: Mapping[str, str], url: str, password: str) -> dict[str, str]:
    """Airflow's settings for one tenant's engine, as environment variables."""
    namespace = env.get("MLPLAT_TENANT", "")
    api = env.get("MLPLAT_PIPELINE_API_URL") or f"http://airflow-api-server.{namespace}.svc:{API_PORT}"
    home = env.get("AIRFLOW_HOME", "/tmp/airflow")  # the pod's only writable place
    return {
        "AIRFLOW_HOME": home,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_FOLDER": env.get("MLPLAT_PIPELINE_DAGS", str(DAG_FILE)),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(_derived(password, "fernet")).decode(),
        "AIRFLOW__API_AUTH__JWT_SECRET": _derived(password, "jwt").hex(),
        "AIRFLOW__API__SECRET_KEY": _derived(password, "api").hex(),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        # Who reaches the API server is the NetworkPolicy's: the tenant's own pods, and its
        # developers through `kubectl port-forward` (their Role's); each is the tenant already.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": f"{home}/logs",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
    }


def main(argv: list[str], env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    if len(argv) != 1 or argv[0] not in COMPONENTS:
        print(f"python -m workloads.pipeline engine: error: name one component: {', '.join(COMPONENTS)}",
              file=sys.stderr)
        return 2
    port = env.get("MLPLAT_PIPELINE_API_PORT", str(API_PORT))
    try:
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise EngineInputError(f"MLPLAT_PIPELINE_API_PORT {inputs.excerpt(port)} is not a port (1 to 65535)")
        url, password = database_url(env)
    except (EngineInputError, inputs.InputError, EngineUnavailable) as err:
        print(f"python -m workloads.pipeline engine {argv[0]}: error: {err}", file=sys.stderr)
        return 1 if isinstance(err, EngineUnavailable) else 2
    merged = {**env, **airflow_environment(env, url, password)}
    Path(merged["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    airflow = str(Path(sys.executable).with_name("airflow"))
    args = COMPONENTS[argv[0]]
    if argv[0] == "api-server":
        args = [*args, "--host", "0.0.0.0", "--port", port]  # noqa: S104 - the pod's address; the policy fences it
    os.execve(airflow, [airflow, *args], merged)
    return 1  # not reached
