"""A tenant's pipeline engine with real parts: the tracking server (on PostgreSQL, with moto's
Secrets Manager) makes each pipeline tenant's database and role as it starts; the engine's
own entrypoint (`python -m workloads.pipeline engine <component>`, as the engine's pods run
it) reads the tenant's secret, migrates Airflow's schema into that database as that role,
and its DAG processor and API server run on it. A tenant's role cannot open another
tenant's database, even as the instance's non-superuser master (RDS's) made them both."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.services.oci import free_port
from tests.services.tracking import REPO, TRACKING_VENV, TrackingStack, aws_env, start_postgres, stop_processes

pytestmark = pytest.mark.slow
PIPELINES_PYTHON = REPO / ".venv-pipelines" / "bin" / "python"


@pytest.fixture(scope="module", autouse=True)
def _engine_installed():
    if not (REPO / ".venv-pipelines" / "bin" / "airflow").exists():
        pytest.fail(".venv-pipelines lacks Airflow: run `make setup`", pytrace=False)


def _secrets_manager(tracking: TrackingStack):
    import boto3

    return boto3.client("secretsmanager", endpoint_url=tracking.s3, region_name="me-central-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def _password(tracking: TrackingStack, tenant: str, timeout: float = 60) -> str:
    """The tenant's engine password, once the tracking server has made it (and its database)."""
    manager = _secrets_manager(tracking)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return json.loads(manager.get_secret_value(SecretId=tracking.pipeline_secrets[tenant])["SecretString"])[
                "password"]
        except manager.exceptions.ResourceNotFoundException:
            time.sleep(0.5)
    raise AssertionError(f"the tracking server made no engine password for {tenant} in {timeout:.0f} s")


def _sql(dsn: str, query: str) -> subprocess.CompletedProcess:
    """One query through psycopg, in the tracking image's environment."""
    code = ("import json, sys, psycopg\n"
            "with psycopg.connect(sys.argv[1]) as c:\n"
            "    print(json.dumps(c.execute(sys.argv[2]).fetchall()))\n")
    return subprocess.run([str(TRACKING_VENV / "bin" / "python"), "-c", code, dsn, query], capture_output=True,
                          text=True, timeout=60)


def _dsn(tracking: TrackingStack, user: str, password: str, database: str) -> str:
    pg = tracking.postgres
    return (f"postgresql://{user}:{password}@127.0.0.1:{pg.port}/{database}?sslmode=verify-full&"
            f"sslrootcert={pg.ca}")


def _engine_env(tracking: TrackingStack, tenant: str, home: Path) -> dict[str, str]:
    """What the engine's pod has on AWS: its tenant, the RDS host and bundle, its secret."""
    return {**os.environ, **aws_env(tracking.s3), "PYTHONPATH": str(REPO), "MLPLAT_TENANT": tenant,
            "MLPLAT_DB_HOST": "127.0.0.1", "MLPLAT_DB_PORT": str(tracking.postgres.port),
            "MLPLAT_DB_CA_BUNDLE": str(tracking.postgres.ca),
            "MLPLAT_PIPELINE_DB_SECRET_ARN": tracking.pipeline_secrets[tenant], "AIRFLOW_HOME": str(home)}


def _engine(component: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(PIPELINES_PYTHON), "-m", "workloads.pipeline", "engine", component], env=env,
                          cwd=REPO, capture_output=True, text=True, **kwargs)


def test_the_engine_migrates_into_its_tenants_own_database(tracking, tmp_path):
    password = _password(tracking, "research")
    done = _engine("migrate", _engine_env(tracking, "research", tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # Airflow's schema, owned by the tenant's role, in the tenant's database.
    own = _sql(_dsn(tracking, "airflow_research", password, "airflow_research"),
               "SELECT tableowner FROM pg_tables WHERE tablename = 'dag_run'")
    assert own.returncode == 0, own.stderr[-2000:]
    assert json.loads(own.stdout) == [["airflow_research"]]
    # The same role cannot open the other tenant's database.
    other = _sql(_dsn(tracking, "airflow_research", password, "airflow_analytics"), "SELECT 1")
    assert other.returncode != 0 and 'permission denied for database "airflow_analytics"' in other.stderr


def test_the_engine_runs_the_golden_path_dags_on_its_database(tracking, tmp_path):
    """The DAG processor parses the golden path into the tenant's database; the API server
    serves it, with the settings the pods get (workloads/pipeline/engine.py)."""
    password = _password(tracking, "analytics")
    env = _engine_env(tracking, "analytics", tmp_path)
    assert _engine("migrate", env, timeout=300).returncode == 0
    port = free_port()
    env = {**env, "MLPLAT_PIPELINE_API_PORT": str(port), "MLPLAT_PIPELINE_API_URL": f"http://127.0.0.1:{port}"}
    processes = []
    try:
        for component in ("dag-processor", "api-server"):
            processes.append(subprocess.Popen(
                [str(PIPELINES_PYTHON), "-m", "workloads.pipeline", "engine", component], env=env, cwd=REPO,
                stdout=(tmp_path / f"{component}.log").open("w"), stderr=subprocess.STDOUT))
        deadline, dags, health = time.monotonic() + 180, [], {}
        while time.monotonic() < deadline and not (dags and health):
            assert all(p.poll() is None for p in processes), \
                [(tmp_path / f"{c}.log").read_text()[-2000:] for c in ("dag-processor", "api-server")]
            try:
                health = requests.get(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5).json()
                listed = requests.get(f"http://127.0.0.1:{port}/api/v2/dags", timeout=5).json()
                dags = sorted(d["dag_id"] for d in listed.get("dags", []))
            except (requests.RequestException, ValueError):
                pass
            time.sleep(2)
        assert dags == ["golden_path", "golden_path_triggers"], dags
        assert health["metadatabase"]["status"] == "healthy"
        tables = _sql(_dsn(tracking, "airflow_analytics", password, "airflow_analytics"),
                      "SELECT dag_id FROM serialized_dag ORDER BY dag_id")
        assert json.loads(tables.stdout) == [["golden_path"], ["golden_path_triggers"]]
        # The DAG processor's probe (its heartbeat in the database) passes while it runs.
        probe = _engine("check-dag-processor", env, timeout=120)
        assert probe.returncode == 0, probe.stderr[-2000:]
    finally:
        stop_processes(processes)


def test_a_non_superuser_master_makes_them_and_a_rotated_password_resets_the_role(tmp_path):
    """As on RDS, whose master user has CREATEROLE and CREATEDB but is no superuser."""
    postgres = start_postgres()
    try:
        root = (f"postgresql://{postgres.user}:{postgres.password}@127.0.0.1:{postgres.port}/postgres?"
                f"sslmode=verify-full&sslrootcert={postgres.ca}")
        made = subprocess.run([str(TRACKING_VENV / "bin" / "python"), "-c", (
            "import sys, psycopg\n"
            "with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
            "    c.execute(\"CREATE ROLE master LOGIN CREATEDB CREATEROLE PASSWORD 'master-pw'\")\n"), root],
            capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr

        def ensure(passwords: dict[str, str]) -> subprocess.CompletedProcess:
            code = ("import json, sys\n"
                    "from workloads.tracking.server import Database\n"
                    "from workloads.tracking.databases import ensure_pipeline_databases\n"
                    "db = Database('127.0.0.1', int(sys.argv[1]), 'postgres', 'master', 'master-pw', "
                    "sslrootcert=sys.argv[2])\n"
                    "ensure_pipeline_databases(db, json.loads(sys.argv[3]))\n")
            return subprocess.run([str(TRACKING_VENV / "bin" / "python"), "-c", code, str(postgres.port),
                                   str(postgres.ca), json.dumps(passwords)], cwd=REPO, capture_output=True,
                                  text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})

        def dsn(user: str, password: str, database: str) -> str:
            return (f"postgresql://{user}:{password}@127.0.0.1:{postgres.port}/{database}?sslmode=verify-full&"
                    f"sslrootcert={postgres.ca}")

        first = ensure({"research": "first", "ml-ops": "other"})
        assert first.returncode == 0, first.stderr[-2000:]
        again = ensure({"research": "second", "ml-ops": "other"})  # rotated, and idempotent
        assert again.returncode == 0, again.stderr[-2000:]
        assert _sql(dsn("airflow_research", "second", "airflow_research"), "SELECT current_user").stdout.strip() \
            == '[["airflow_research"]]'
        assert "password authentication failed" in _sql(dsn("airflow_research", "first", "airflow_research"),
                                                         "SELECT 1").stderr
        # Neither tenant opens the other's database; '-' in a tenant's name becomes '_'.
        assert "permission denied" in _sql(dsn("airflow_ml_ops", "other", "airflow_research"), "SELECT 1").stderr
        assert "permission denied" in _sql(dsn("airflow_research", "second", "airflow_ml_ops"), "SELECT 1").stderr
        owner = _sql(dsn("airflow_ml_ops", "other", "airflow_ml_ops"),
                     "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()")
        assert owner.stdout.strip() == '[["airflow_ml_ops"]]'
    finally:
        postgres.stop()


# --- a secret not made yet: one line, exit 2 ------------------------------------------------
# (the pod's other bad settings: tests/workloads/test_verb_inputs.py)


def test_a_secret_the_tracking_server_has_not_filled_yet_is_one_line(tracking, tmp_path):
    empty = _secrets_manager(tracking).create_secret(Name=f"pipelines-empty-{tmp_path.name}",
                                  SecretString=json.dumps({"username": "x"}))["ARN"]
    env = {**_engine_env(tracking, "research", tmp_path), "MLPLAT_PIPELINE_DB_SECRET_ARN": empty}
    done = _engine("scheduler", env, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "no password yet" in lines[0], done.stderr[-2000:]
