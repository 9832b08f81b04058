"""The golden path end to end, on the suite's real servers: Feast with Redis and moto's S3,
MLflow on PostgreSQL, the trainer under torchrun, the ONNX export into a Triton repository.
Airflow runs the DAG with its own local runner (`dag.test()`, in `.venv-pipelines`); each
step runs in the virtualenv that stands for its image, as the cluster runs it in its pod.

What is asserted is what the run left: the registry's versions and aliases, the lineage from
the served version back to the dataset and the pipeline run, the files in the repository."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from tests.services.pipeline import AIRFLOW, AS_OF, DAG, FEATURES, FEATURES_PYTHON, MODEL, Golden, start_golden
from tests.services.tracking import REPO
from workloads.pipeline.steps import STEPS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]  # its own worker: minutes of CPU


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """Its own tracking stack, not the session's: the golden path applies and materializes the
    research tenant's feature project, which the feature-store tests make on theirs."""
    from tests.services.tracking import start_tracking_stack

    folder = tmp_path_factory.mktemp("golden")
    (folder / "tracking").mkdir()
    tracking = start_tracking_stack(folder / "tracking")
    try:
        stack = start_golden(folder / "pipeline", tracking)
        try:
            yield stack
        finally:
            stack.features.stop()
    finally:
        tracking.stop()


REQUESTS = 320  # above the drift check's 300-row minimum
PUBLISHING = ("register", "export", "promote", "baseline")  # the steps that publish


def _serve_and_log(golden: Golden, version: int, train: Path) -> dict:
    """REQUESTS requests, windows of the training tokens as live traffic would resemble them,
    sent to the exported version behind MLServer; logged as the gateway's logger writes them
    (request-logs/<model>/date=<day>/ in the datasets bucket)."""
    import boto3
    import numpy as np

    from bench.serve_server import MLSERVER, Served
    from workloads.monitor.request_log import FieldPolicy, parquet_bytes, rows_of
    from workloads.serve.client import connect
    from workloads.serve.spec import INPUT_NAME
    from workloads.train.data import list_shards, read_shard

    if not MLSERVER.exists():
        pytest.fail(f"{MLSERVER} not found: run `make setup`", pytrace=False)
    tokens = np.concatenate([read_shard(p) for p in list_shards(train)]).astype(np.int64)
    rng = np.random.default_rng(7)
    windows = [tokens[s:s + n] for s, n in zip(rng.integers(0, len(tokens) - 64, REQUESTS),
                                               rng.integers(8, 64, REQUESTS))]
    model = golden.folder / "triton" / "golden" / str(version) / "model.onnx"
    server = Served(model, golden.folder / "mlserver", workers=1, threads=1, max_batch=1, max_batch_time_s=0)
    errors = 0
    try:
        from tritonclient.grpc import InferInput

        client = connect(server.url)
        for ids in windows:
            request = InferInput(INPUT_NAME, [1, len(ids)], "INT64")
            request.set_data_from_numpy(ids.reshape(1, -1))
            try:
                client.infer("gpt", [request])
            except Exception:  # noqa: BLE001 - counted: the canary's error rate
                errors += 1
        client.close()
    finally:
        server.stop()
    now = datetime.now(timezone.utc)
    policy = FieldPolicy({"input_ids": True})
    rows = [row for ids in windows for row in rows_of({"input_ids": ids.reshape(1, -1)}, policy, model="golden",
                                                      version=str(version), tenant="research", now=now)]
    s3 = boto3.client("s3", endpoint_url=golden.features.s3, aws_access_key_id="testing",
                      aws_secret_access_key="testing", region_name="me-central-1")
    s3.put_object(Bucket="datasets", Key=f"request-logs/golden/date={now:%Y-%m-%d}/000000-golden.parquet",
                  Body=parquet_bytes(rows))
    return {"errors": errors, "logs": "s3://datasets/request-logs/golden/"}


@pytest.fixture
def research(golden, monkeypatch):
    """This process as the research tenant's pod: its MLflow user and S3; its MLflow client."""
    from mlflow.tracking import MlflowClient

    for key, value in golden.features.tracking.env("research").items():
        monkeypatch.setenv(key, value)
    return MlflowClient(tracking_uri=golden.features.tracking.uri, registry_uri=golden.features.tracking.uri)


def _versions(client) -> list:
    return client.search_model_versions(f"name = '{MODEL}'")


def test_golden_path(golden, research):
    params = golden.params("golden")
    ran = golden.airflow({"params": str(params), "run": "golden-1"})
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]

    client = research
    (version,) = _versions(client)
    assert client.get_model_version_by_alias(MODEL, "production").version == version.version

    from workloads.tracking.lineage import lineage

    chain = lineage(f"models:/{MODEL}@production", golden.features.tracking.uri, verify=True)
    steps = chain["pipeline"]["steps"]
    assert chain["pipeline"]["run"] == "golden-1"
    assert set(steps) == {s.name for s in STEPS}
    # The served version's chain: the token dataset the run trained on, made from the feature
    # dataset version the pipeline built, by the training run the pipeline started.
    assert chain["dataset"]["id"] == steps["tokens"]["train"]["id"]
    assert chain["run"]["id"] == steps["train"]["run_id"] and chain["checkpoint"]["verified"] is True
    token_manifest = json.loads((Path(steps["tokens"]["train"]["dir"]) / "dataset.json").read_text())
    assert token_manifest["sources"] == [f"{steps['dataset']['uri']}#{steps['dataset']['id']}"]
    assert steps["evaluate"]["promote"] is True and steps["evaluate"]["production_version"] is None
    assert chain["triton"]["version"] == steps["export"]["triton_version"]
    assert (golden.folder / "triton" / "golden" / str(chain["triton"]["version"]) / "model.onnx").is_file()
    baseline = json.loads(client.get_registered_model(MODEL).tags["mlplat.drift.baseline"])
    assert baseline["id"] == steps["tokens"]["train"]["id"]

    # The same run again, its publishing steps each in its own process as the engine runs them,
    # while the served version takes traffic (the two use the machine's two cores): each answers
    # from the ledger with what it recorded, and nothing is published twice. (That a step
    # killed after its work is redone without publishing twice is the crash test's, below;
    # that the engine resumes a run whose ledger exists, the guard test's.)
    with ThreadPoolExecutor(max_workers=1) as pool:
        rerun = pool.submit(lambda: [golden.step(name, params, "golden-1") for name in PUBLISHING])
        served = _serve_and_log(golden, chain["triton"]["version"], Path(steps["tokens"]["train"]["dir"]))
        again = rerun.result()
    assert served["errors"] == 0
    drift = subprocess.run([sys.executable, "-m", "workloads.monitor", "drift-job", "--registered-model", MODEL,
                            "--model", "golden", "--version", str(chain["triton"]["version"]),
                            "--logs", served["logs"]], cwd=REPO, env={**golden.env, **golden.features.env("research")},
                           capture_output=True, text=True, timeout=300)
    assert drift.returncode == 0, drift.stderr[-2000:]
    report = json.loads(drift.stdout)
    assert report["reference"]["dataset"] == steps["tokens"]["train"]["id"]
    assert report["judged"] and report["rows"]["current"] == REQUESTS and report["drift"] is False

    for name, done in zip(PUBLISHING, again):
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert json.loads(done.stdout.strip().splitlines()[-1]) == steps[name], name
    assert len(_versions(client)) == 1
    assert sorted(p.name for p in (golden.folder / "triton" / "golden").iterdir() if p.name.isdigit()) == ["1"]


CRASH_AFTER_EFFECTS = """
import sys
from workloads.pipeline import ledger
from workloads.pipeline.cli import main

def crash(*args, **kwargs):
    raise SystemExit("injected: the step's pod died after its work, before its record")

ledger.Ledger.record = crash
main(sys.argv[1:])
"""


def test_a_step_that_dies_after_its_work_is_redone_without_publishing_twice(golden, research):
    """Each step in turn dies at the worst point, its work done and not yet recorded, then
    the run goes on: one registered version, one Triton version, one alias move."""
    test_golden_path_ran = bool(_versions(research))
    params = golden.params("crash", max_steps=60)  # three times the training: a lower held-out loss
    triton = golden.folder / "triton" / "golden"
    before = {p.name for p in triton.iterdir() if p.name.isdigit()} if triton.exists() else set()
    for step in STEPS:
        python = FEATURES_PYTHON if step.image == "features" else Path(sys.executable)
        crashed = subprocess.run([str(python), "-c", CRASH_AFTER_EFFECTS, "step", step.name, "--params", str(params),
                                  "--run", "golden-crash"], cwd=REPO,
                                 env={**golden.env, **golden.features.env("research")},
                                 capture_output=True, text=True, timeout=600)
        assert "injected" in crashed.stderr, (step.name, crashed.stderr[-2000:])
        again = golden.step(step.name, params, "golden-crash")
        assert again.returncode == 0, (step.name, again.stderr[-2000:])

    made = [v for v in _versions(research) if v.tags.get("mlplat.pipeline.run") == "golden-crash"]
    assert len(made) == 1, [v.version for v in made]
    after = {p.name for p in triton.iterdir() if p.name.isdigit()}
    assert len(after - before) == 1, (before, after)
    assert research.get_model_version_by_alias(MODEL, "production").version == made[0].version
    history = research.get_registered_model(MODEL).tags.get("mlplat.alias.production.history", "")
    assert history.split(",").count(made[0].version) == 0
    assert len([v for v in history.split(",") if v]) == (1 if test_golden_path_ran else 0)


def test_a_tenant_cannot_run_or_read_another_tenants_pipeline(golden):
    params = golden.params("tenancy")
    as_analytics = golden.step("tokens", params, "golden-1", tenant="analytics")
    assert as_analytics.returncode == 2
    assert "tenant 'research' is not this pod's tenant 'analytics'" in as_analytics.stderr
    assert len(as_analytics.stderr.strip().splitlines()) == 1

    data = yaml.safe_load(params.read_text())
    data.update(tenant="analytics")  # its own tenant, and the research tenant's model
    theirs = golden.folder / "theirs.yaml"
    theirs.write_text(yaml.safe_dump(data))
    refused = golden.step("tokens", theirs, "golden-1", tenant="analytics")
    assert refused.returncode == 2 and "is not one of tenant 'analytics'" in refused.stderr

    # The research tenant's ledger (every step's outputs) is not the analytics user's to read.
    peek = subprocess.run([sys.executable, "-c", (
        "from mlflow.tracking import MlflowClient\n"
        "from mlflow.exceptions import MlflowException\n"
        "try:\n"
        "    print(MlflowClient().get_experiment_by_name('research/pipelines'))\n"
        "except MlflowException as err:\n"
        "    print(err.error_code)\n")],
        cwd=REPO, env={**golden.features.env("analytics")}, capture_output=True, text=True, timeout=120)
    assert peek.returncode == 0, peek.stderr[-2000:]
    assert peek.stdout.strip() in ("None", "PERMISSION_DENIED", "RESOURCE_DOES_NOT_EXIST"), peek.stdout


GUARDED = """
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("golden_dag", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
states = []
for conf, hours in json.loads(sys.argv[2]):
    # The guard reads its interval when it runs: each run gets its own.
    os.environ["MLPLAT_PIPELINE_MIN_INTERVAL_H"] = hours
    # Every step marked done without running: only the guard runs.
    run = module.golden.test(run_conf=conf, mark_success_pattern=r"(?!guard$).*")
    states.append({ti.task_id: str(ti.state) for ti in run.get_task_instances()})
print(json.dumps(states))
"""


def _guarded(golden: Golden, runs: list[tuple[dict, str]]) -> list[dict]:
    """Each (conf, hours) in turn through one Airflow process (its start is most of a run's
    cost): the states of each run's tasks."""
    done = subprocess.run([str(AIRFLOW / "python"), "-c", GUARDED, str(DAG), json.dumps(runs)], cwd=REPO,
                          env={**golden.env, **golden.features.env("research"), **golden.airflow_env()},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_run_within_the_minimum_interval_runs_no_step(golden):
    """The storm guard, from the tenant's ledgers: a run started a moment ago holds any new
    run (named or Airflow's own), failed or not; the run itself resumes; with no interval
    nothing is held."""
    params = str(golden.params("guarded"))
    seeded = golden.step("materialize", Path(params), "guard-seed")  # a run started just now
    assert seeded.returncode == 0, seeded.stderr[-2000:]
    steps = [s.name for s in STEPS]
    new, airflows, resumed, free = _guarded(golden, [({"params": params, "run": "guard-new"}, "24"),
                                                     ({"params": params}, "24"),
                                                     ({"params": params, "run": "guard-seed"}, "24"),
                                                     ({"params": params, "run": "guard-free"}, "0")])
    for held in (new, airflows):
        assert held["guard"] == "success" and {held[s] for s in steps} == {"skipped"}
    assert {resumed[s] for s in steps} == {"success"}
    assert {free[s] for s in steps} == {"success"}


def _decide(golden: Golden, params: Path, hours: float = 0) -> dict:
    done = subprocess.run([sys.executable, "-m", "workloads.pipeline", "triggers", "--params", str(params),
                           "--min-interval-h", str(hours)], cwd=REPO,
                          env={**golden.env, **golden.features.env("research")}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_dataset_version_or_a_drift_verdict_triggers_a_run(golden, research):
    params = golden.params("triggered")
    started = golden.step("materialize", params, "golden-triggered")  # a run starts: the newest ledger
    assert started.returncode == 0, started.stderr[-2000:]
    assert _decide(golden, params) == {"trigger": False, "reasons": [], "held": None}

    # Someone builds a new version of the run's dataset (fewer label rows).
    labels = golden.features.put_parquet("features/research/labels/golden-new.parquet",
                                         {"customer_id": [1, 2, 3], "event_timestamp": [AS_OF.isoformat()] * 3})
    built = golden.features.run("research", "dataset", "--config", str(golden.features.config("research")),
                                "--entities", labels, "--features", ",".join(FEATURES), "--name", "golden")
    assert built.returncode == 0, built.stderr[-2000:]
    new = json.loads(built.stdout.strip().splitlines()[-1])["id"]
    assert _decide(golden, params) == {"trigger": True, "reasons": [f"new dataset version {new}"], "held": None}
    held = _decide(golden, params, hours=24)
    assert held["trigger"] is False and "within the minimum interval of 24 h" in held["held"]

    # The drift check finds the served version drifted (as drift_job.record_verdict writes it).
    from workloads.tracking.client import VERDICT_TAG

    if not _versions(research):
        research.create_registered_model(MODEL)
    research.set_registered_model_tag(MODEL, VERDICT_TAG, json.dumps(
        {"drifted": True, "registered_version": 1, "triton_version": 1, "at": time.time()}))
    assert _decide(golden, params)["reasons"] == [f"new dataset version {new}", "drift on version 1"]

    # The triggers DAG, through Airflow: it queues a run of the golden path.
    ran = subprocess.run([str(AIRFLOW / "python"), "-c", TRIGGERS_ONCE, str(DAG), str(params)], cwd=REPO,
                         env={**golden.env, **golden.features.env("research"), **golden.airflow_env()},
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    states, before, after = json.loads(ran.stdout.strip().splitlines()[-1])
    assert states == {"decide": "success", "trigger": "success"}
    assert after == before + 1  # one run of the golden path queued


TRIGGERS_ONCE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("golden_dag", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session

def runs():
    with create_session() as session:
        return session.query(DagRun).filter(DagRun.dag_id == module.DAG_ID).count()

before = runs()
run = module.triggers.test(run_conf={"params": sys.argv[2]})
states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
print(json.dumps([states, before, runs()]))
"""
