"""When to retrain without being asked: a new version of the run's dataset, or a drift verdict
on the served model newer than the last run. Both are read from the tenant's own MLflow (the
dataset registrations in `<tenant>/features`, the verdict the drift check records on the
registered model), never from the Prometheus every tenant's alerts share.

Storm guards (`guard`, and `decide` for the triggers): no new run starts within the minimum
interval of the last run's start, whether that run succeeded or not (a run that fails every
time must not be retried every few minutes); a run whose ledger exists is resumed, never
held; and the DAG triggers nothing while a run is in flight (workloads/pipeline/dag.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from workloads.pipeline.ledger import EXPERIMENT, find
from workloads.pipeline.params import Params
from workloads.tracking.client import DATASET_TAG, PIPELINE_MODEL_TAG, VERDICT_TAG, step_outputs


def _verdict(text: str | None) -> dict[str, Any]:
    """The drift check's verdict tag; {} where there is none or it is not one (a tag anyone
    with the model's edit permission could have set by hand)."""
    try:
        verdict = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(verdict, dict) or not isinstance(verdict.get("at", 0), (int, float)):
        return {}
    return verdict


def _newest(client: Any, experiment: str, filter_string: str) -> Any:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], filter_string=filter_string, max_results=1,
                              order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


def _last_run(client: Any, params: Params) -> tuple[Any, float]:
    """The newest pipeline run of the model (its ledger), and when it started (0: none)."""
    last = _newest(client, EXPERIMENT.format(tenant=params.tenant), f"tags.`{PIPELINE_MODEL_TAG}` = '{params.model}'")
    return last, (last.info.start_time / 1000 if last else 0.0)


def _held(last: Any, last_start: float, min_interval_h: float, now: float) -> str | None:
    if last is None or now - last_start >= min_interval_h * 3600:
        return None
    return (f"the last run ({last.info.run_name}) started {(now - last_start) / 3600:.1f} h ago, within the minimum "
            f"interval of {min_interval_h:g} h")


def guard(tracking_uri: str, params: Params, run: str, min_interval_h: float, now: float | None = None
          ) -> dict[str, Any]:
    """{"go": bool, "held": why not, or None}: a run whose ledger exists is resumed, never
    held; a new one is held within the minimum interval of the last run's start."""
    from workloads.tracking.client import tracking_client

    client, now = tracking_client(tracking_uri), time.time() if now is None else now
    if find(client, params.tenant, run) is not None:
        return {"go": True, "held": None}
    held = _held(*_last_run(client, params), min_interval_h, now)
    return {"go": held is None, "held": held}


def decide(tracking_uri: str, params: Params, min_interval_h: float, now: float | None = None) -> dict[str, Any]:
    """{"trigger": bool, "reasons": [...], "held": why not, or None}."""
    from mlflow.exceptions import MlflowException

    from workloads.tracking.client import tracking_client
    from workloads.tracking.registry import not_found

    client, now = tracking_client(tracking_uri), time.time() if now is None else now
    last, last_start = _last_run(client, params)
    last_dataset = step_outputs(last.data.tags).get("dataset", {}).get("id") if last else None

    reasons = []
    dataset = _newest(client, f"{params.tenant}/features", f"attributes.run_name = 'dataset-{params.features.dataset}'")
    if dataset is not None and dataset.data.tags.get(DATASET_TAG) and \
            dataset.data.tags[DATASET_TAG] != last_dataset and dataset.info.start_time / 1000 > last_start:
        reasons.append(f"new dataset version {dataset.data.tags[DATASET_TAG]}")
    try:
        tags = client.get_registered_model(params.model).tags
    except MlflowException as err:
        if not not_found(err):
            raise
        tags = {}
    verdict = _verdict(tags.get(VERDICT_TAG))
    if verdict.get("drifted") is True and verdict.get("at", 0) > last_start:
        reasons.append(f"drift on version {verdict.get('registered_version')}")
    held = _held(last, last_start, min_interval_h, now) if reasons else None
    return {"trigger": bool(reasons) and held is None, "reasons": reasons, "held": held}
