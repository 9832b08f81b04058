"""The golden path as an Airflow DAG: one task per step (workloads/pipeline/steps.py), in
order, each running `python -m workloads.pipeline step <name>` in the step's image.

One Airflow runs in each tenant's namespace (docs/pipelines.md), so this file is the tenant's
own: its parameters are `MLPLAT_PIPELINE_PARAMS` (the mounted file), its schedule
`MLPLAT_PIPELINE_SCHEDULE` (cron; unset: triggered only). Storm guards: one run at a time
(`max_active_runs`), and a new run within `MLPLAT_PIPELINE_MIN_INTERVAL_H` hours (24 unless
set) of the last run's start, failed or not, ends at its first task, running nothing; a run
whose ledger exists is resumed, never held (workloads/pipeline/triggers.py). A second DAG,
`golden_path_triggers`, triggers a run on a new dataset version or a drift verdict, under
the same guards and never while a run is in flight.

Where a step runs is the launcher's (`MLPLAT_PIPELINE_LAUNCHER`): in the tenant's engine,
`cluster` submits it as a Job through the tenant's Kueue queue (the `train` step as a
JobSet; workloads/pipeline/launch.py); `local` runs it as a process of the interpreter the
step's image stands for (`MLPLAT_PIPELINE_PYTHON_<IMAGE>`, e.g. the features virtualenv), as
`make demo` and the golden-path test do with Airflow's own `dag.test()`.

A run's id is the conf's `run` when given (the same id again continues that run), otherwise
Airflow's run id made safe for a tag and a folder name."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from airflow.exceptions import AirflowException
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, get_current_context, task

from workloads.pipeline.steps import STEPS

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "golden_path"
TRIGGERS_DAG_ID = "golden_path_triggers"


def safe_run_id(airflow_run_id: str) -> str:
    """Airflow's run id (`manual__2026-11-27T03:00:00+00:00`) as the ledger's: lowercase
    letters, digits, '.', '_', '-'; a hash keeps two ids that differ only in what was
    replaced apart."""
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", airflow_run_id.lower()).strip("-._")[:100]
    return f"{cleaned}-{hashlib.sha256(airflow_run_id.encode()).hexdigest()[:8]}"


def _run_of(context) -> str:
    conf = context["dag_run"].conf or {}
    return str(conf.get("run") or safe_run_id(context["dag_run"].run_id))


def _params_of(context) -> str:
    conf = context["dag_run"].conf or {}
    params = conf.get("params") or os.environ.get("MLPLAT_PIPELINE_PARAMS", "")
    if not params:
        raise AirflowException("no parameters: set MLPLAT_PIPELINE_PARAMS or pass conf {\"params\": <file>}")
    return str(params)


def launch_local(image: str, *args: str) -> str:
    """`python -m workloads.pipeline <args>` in the interpreter standing for `image`; its
    last stdout line."""
    python = os.environ.get(f"MLPLAT_PIPELINE_PYTHON_{image.upper()}", "")
    if not python:
        raise AirflowException(f"{args[0]}: MLPLAT_PIPELINE_PYTHON_{image.upper()} names no interpreter for the "
                               f"{image} image")
    done = subprocess.run([python, "-m", "workloads.pipeline", *args], cwd=REPO, capture_output=True, text=True,
                          env=os.environ.copy())
    said = [line for line in done.stderr.splitlines() if line.strip()]
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AirflowException(f"{' '.join(args[:2])} exited {done.returncode}: "
                               f"{said[-1] if said else '(no message)'}")
    return lines[-1]


def launch(image: str, *args: str) -> str:
    """Run `python -m workloads.pipeline <args>` where the launcher says: `cluster` (the
    tenant's engine) submits it as a Job through Kueue (workloads/pipeline/launch.py);
    otherwise a local process."""
    if os.environ.get("MLPLAT_PIPELINE_LAUNCHER", "local") != "cluster":
        return launch_local(image, *args)
    import json

    from workloads.pipeline import launch as cluster

    templates = json.loads(Path(os.environ["MLPLAT_PIPELINE_TEMPLATES"]).read_text())
    try:
        return cluster.run(cluster.Cluster(os.environ["MLPLAT_TENANT"]), templates, image, args)
    except cluster.LaunchError as err:
        raise AirflowException(str(err)) from None


def _step_task(step: str, image: str):
    @task(task_id=step)
    def run_step(_: object = None) -> str:
        context = get_current_context()
        return launch(image, "step", step, "--params", _params_of(context), "--run", _run_of(context))

    return run_step


def _min_interval_h() -> str:
    return os.environ.get("MLPLAT_PIPELINE_MIN_INTERVAL_H") or "24"


@task.short_circuit(task_id="guard")
def guard() -> bool:
    """False (skip every step) when this is a new run within the minimum interval of the
    last run's start (from the tenant's ledgers: Airflow's own history forgets failed and
    held runs); a run whose ledger exists is resumed."""
    import json
    import logging

    context = get_current_context()
    said = json.loads(launch("training", "guard", "--params", _params_of(context), "--run", _run_of(context),
                                   "--min-interval-h", _min_interval_h()))
    if said["held"]:
        logging.getLogger(__name__).info("held: %s", said["held"])
    return bool(said["go"])


@dag(dag_id=DAG_ID, schedule=os.environ.get("MLPLAT_PIPELINE_SCHEDULE") or None,
     start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False, max_active_runs=1,
     tags=["mlplat", "golden-path"], doc_md=__doc__)
def golden_path():
    previous = guard()
    for step in STEPS:
        previous = _step_task(step.name, step.image)(previous)


golden = golden_path()


@task.short_circuit(task_id="decide")
def decide() -> bool:
    """True when a new dataset version or a drift verdict calls for a run, no run is in
    flight, and the last one started before the minimum interval."""
    import json
    import logging

    context = get_current_context()
    in_flight = context["ti"].get_dr_count(dag_id=DAG_ID, states=["queued", "running"])
    if in_flight:
        logging.getLogger(__name__).info("held: %d run(s) of %s in flight", in_flight, DAG_ID)
        return False
    said = json.loads(launch("training", "triggers", "--params", _params_of(context), "--min-interval-h",
                                   _min_interval_h()))
    logging.getLogger(__name__).info("triggers: %s", said)
    return bool(said["trigger"])


@dag(dag_id=TRIGGERS_DAG_ID, schedule=os.environ.get("MLPLAT_PIPELINE_TRIGGER_SCHEDULE") or "*/15 * * * *",
     start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False, max_active_runs=1,
     tags=["mlplat", "golden-path"])
def golden_path_triggers():
    """Every 15 minutes: a new version of the run's dataset, or a drift verdict on the served
    model newer than the last run, triggers the golden path (workloads/pipeline/triggers.py)."""
    decide() >> TriggerDagRunOperator(task_id="trigger", trigger_dag_id=DAG_ID)


triggers = golden_path_triggers()

if __name__ == "__main__":
    import json
    import sys

    # `python dag.py '<conf JSON>'`: one run in this process (Airflow's dag.test()), as
    # `make demo` and the golden-path test run it; exit 1 unless it succeeded.
    result = golden.test(run_conf=json.loads(sys.argv[1]) if len(sys.argv) > 1 else None)
    sys.exit(0 if result is not None and str(result.state) == "success" else 1)
