"""The launcher's decisions (workloads/pipeline/launch.py) against a cluster that answers as
the API server would, kept in memory: one submission per step of a run, a step still
running found again rather than doubled, a failed step reported in one line with its last
log line; and the engine's settings (workloads/pipeline/engine.py)."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloads.inputs import InputError
from workloads.pipeline import launch
from workloads.pipeline.engine import EngineInputError, airflow_environment, database_url

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": "research", "labels": {"q": "default"}},
       "spec": {"template": {"metadata": {"labels": {}}, "spec": {"containers": [{"name": "step"}]}}}}
TEMPLATES = {"training": JOB, "features": JOB,
             "train": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                       "metadata": {"namespace": "research", "labels": {"q": "default"}},
                       "spec": {"replicatedJobs": [{"name": "trainer", "replicas": 1,
                                                    "template": {"spec": copy.deepcopy(JOB["spec"])}}]}}}
STEP = ("step", "evaluate", "--params", "/p.yaml", "--run", "manual-1")


class Cluster:
    """Jobs and JobSets by name, each finishing after `polls` status reads with `outcome`."""

    def __init__(self, outcome: str = "Complete", polls: int = 2, log: str = '{"loss": 1.5}') -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.outcome, self.polls, self.logs, self.created = outcome, polls, log, []

    def find(self, kind: str, selector: str) -> list[dict[str, Any]]:
        wanted = dict(pair.split("=") for pair in selector.split(","))
        return [o for o in self.objects.values() if o["kind"] == kind
                and wanted.items() <= o["metadata"]["labels"].items()]

    def create(self, made: dict[str, Any]) -> str:
        name = f"{made['metadata']['generateName']}{len(self.objects)}"
        self.objects[name] = {**made, "metadata": {**made["metadata"], "name": name}, "reads": 0}
        self.created.append(name)
        return name

    def status(self, kind: str, name: str) -> dict[str, Any]:
        obj = self.objects[name]
        obj["reads"] += 1
        if obj["reads"] < self.polls:
            return {}
        kind_done = {"Complete": "Completed"}.get(self.outcome, self.outcome) if kind == "JobSet" else self.outcome
        obj["status"] = {"conditions": [{"type": "Suspended", "status": "False"},
                                        {"type": kind_done, "status": "True"}]}
        return obj["status"]

    def log(self, kind: str, name: str) -> str:
        return self.logs


def test_a_step_is_submitted_once_and_its_outputs_come_back():
    cluster, waits = Cluster(), []
    assert launch.run(cluster, TEMPLATES, "training", STEP, sleep=waits.append) == '{"loss": 1.5}'
    [name] = cluster.created
    made = cluster.objects[name]
    assert made["kind"] == "Job" and name.startswith("gp-evaluate-")
    assert made["metadata"]["labels"] == {"q": "default", launch.RUN_LABEL: launch.run_label(STEP),
                                          launch.VERB_LABEL: "evaluate"}
    assert made["spec"]["template"]["metadata"]["labels"][launch.RUN_LABEL] == launch.run_label(STEP)
    assert made["spec"]["template"]["spec"]["containers"][0]["args"] == list(STEP)
    assert waits == [launch.POLL_S]
    assert TEMPLATES["training"]["metadata"].get("generateName") is None  # the template is untouched


def test_the_train_step_is_a_jobset_and_judged_by_its_own_conditions():
    cluster = Cluster()
    args = ("step", "train", "--params", "/p.yaml", "--run", "manual-1")
    launch.run(cluster, TEMPLATES, "training", args, sleep=lambda s: None)
    [made] = cluster.objects.values()
    assert made["kind"] == "JobSet"
    pod = made["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["spec"]["containers"][0]["args"] == list(args) and pod["metadata"]["labels"][launch.VERB_LABEL] == "train"


def test_a_step_still_running_is_waited_for_not_submitted_again():
    cluster = Cluster(polls=3)
    first = launch.manifest(TEMPLATES, "training", STEP)
    running = cluster.create(first)  # a task that died while its step ran
    launch.run(cluster, TEMPLATES, "training", STEP, sleep=lambda s: None)
    assert cluster.created == [running]
    # Another run's step, or this run's next step, is its own submission.
    launch.run(cluster, TEMPLATES, "training", ("step", "evaluate", "--params", "/p.yaml", "--run", "manual-2"),
               sleep=lambda s: None)
    launch.run(cluster, TEMPLATES, "training", ("step", "register", "--params", "/p.yaml", "--run", "manual-1"),
               sleep=lambda s: None)
    assert len(cluster.created) == 3


def test_a_finished_step_of_the_run_is_submitted_again_when_asked():
    """Airflow's retry of a failed step: a new Job (the step's ledger makes it continue)."""
    cluster = Cluster()
    launch.run(cluster, TEMPLATES, "training", STEP, sleep=lambda s: None)
    launch.run(cluster, TEMPLATES, "training", STEP, sleep=lambda s: None)
    assert len(cluster.created) == 2


def test_a_failed_step_is_one_line_with_its_last_log_line():
    cluster = Cluster(outcome="Failed", log="loading\nerror: step evaluate: the held-out set is empty\n")
    with pytest.raises(launch.LaunchError) as err:
        launch.run(cluster, TEMPLATES, "training", STEP, sleep=lambda s: None)
    assert str(err.value) == f"Job {cluster.created[0]} failed: error: step evaluate: the held-out set is empty"


@pytest.mark.parametrize("log, line", [
    ('{"a": 1}\n', '{"a": 1}'),
    ('{"a": 1}\nWARNING: late\n', '{"a": 1}'),
    ('{"a": 1}\n{not json\n', '{"a": 1}'),
])
def test_the_outputs_line_is_the_last_json_object(log, line):
    assert launch.outputs_line(log) == line


def test_no_outputs_line_is_an_error():
    with pytest.raises(launch.LaunchError, match="printed no outputs line"):
        launch.outputs_line("done\n")


def test_a_step_of_an_image_with_no_template_is_named():
    with pytest.raises(launch.LaunchError, match="no step template for the serving image"):
        launch.manifest({"training": JOB}, "serving", STEP)


def test_the_engines_keys_are_derived_from_its_password_and_shared_by_every_component():
    env = {"MLPLAT_TENANT": "research", "MLPLAT_PIPELINE_DB_SECRET_ARN": "arn:s", "MLPLAT_DB_HOST": "db.internal",
           "MLPLAT_DB_CA_BUNDLE": "/etc/ssl/rds/global-bundle.pem"}
    url, password = database_url(env, read_secret=lambda arn: {"password": "p@ss/word"})
    assert url == ("postgresql+psycopg2://airflow_research:p%40ss%2Fword@db.internal:5432/airflow_research?"
                   "sslmode=verify-full&sslrootcert=/etc/ssl/rds/global-bundle.pem")
    one, two = airflow_environment(env, url, password), airflow_environment(env, url, password)
    assert one == two  # the scheduler and the API server agree on the JWT secret
    other = airflow_environment(env, url, "rotated")
    for key in ("AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        assert one[key] != other[key] and password not in one[key]
    assert len(base64.urlsafe_b64decode(one["AIRFLOW__CORE__FERNET_KEY"])) == 32  # a Fernet key
    assert one["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-api-server.research.svc:8080/execution/"
    assert one["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


TEXT = st.text(max_size=40)
SECRETS = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), TEXT),
                       lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
                       max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(tenant=TEXT, port=TEXT, secret=st.one_of(SECRETS, st.fixed_dictionaries({"password": SECRETS})))
def test_the_engines_settings_are_read_or_refused_in_one_line(tenant, port, secret):
    env = {"MLPLAT_TENANT": tenant, "MLPLAT_PIPELINE_DB_SECRET_ARN": "arn:s", "MLPLAT_DB_HOST": "db",
           "MLPLAT_DB_PORT": port}
    try:
        url, password = database_url(env, read_secret=lambda arn: secret)
    except EngineInputError as err:
        assert "\n" not in str(err)
    else:
        assert url.startswith("postgresql+psycopg2://airflow_") and password == secret["password"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dsn=st.text(max_size=200))
def test_a_dsn_file_is_read_or_refused_in_one_line(tmp_path, dsn):
    path = tmp_path / "dsn"
    path.write_bytes(dsn.encode("utf-8", "surrogatepass"))
    try:
        url, _ = database_url({"MLPLAT_DB_DSN_FILE": str(path)})
    except (EngineInputError, InputError) as err:
        assert "\n" not in str(err)
    else:
        assert url.startswith("postgresql+psycopg2://")
