"""A pipeline run's ledger: an MLflow run in the tenant's `<tenant>/pipelines` experiment,
named by the pipeline run's id, with one tag per finished step holding its outputs (JSON).

Why MLflow, and not Airflow's XCom: the outputs are lineage. The registered version is tagged
with the pipeline run, so `lineage` from a served version reaches this run and every step's
outputs; and the tenant's MLflow user already confines who reads and writes it, with no
second store to secure. A step is finished when its tag is there: a rerun of the run skips
it and hands its outputs to the next step. The parameters' hash is the run's, so resuming a
run with other parameters is refused rather than mixed."""

from __future__ import annotations

import json
from typing import Any

from workloads.hashing import content_id
from workloads.pipeline.params import Params, PipelineInputError
from workloads.tracking.client import PIPELINE_MODEL_TAG
from workloads.tracking.client import PIPELINE_RUN_TAG as RUN_TAG
from workloads.tracking.client import PIPELINE_STEP_TAG as STEP_TAG
from workloads.tracking.client import step_outputs

PARAMS_TAG = "mlplat.pipeline.params"
EXPERIMENT = "{tenant}/pipelines"


def params_id(params: Params) -> str:
    return content_id(params.model_dump(mode="json"))


def _oldest(client: Any, experiment_id: str, pipeline_run: str) -> Any:
    # Two first steps at once may each make one: the oldest is the run's, always.
    found = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_TAG}` = '{pipeline_run}'",
                               max_results=1, order_by=["attributes.start_time ASC"])
    return found[0] if found else None


def find(client: Any, tenant: str, pipeline_run: str) -> Any:
    """The run's ledger (an MLflow run), or None where the run has not started."""
    experiment = client.get_experiment_by_name(EXPERIMENT.format(tenant=tenant))
    return _oldest(client, experiment.experiment_id, pipeline_run) if experiment else None


class Ledger:
    def __init__(self, client: Any, run: Any) -> None:
        self.client, self.run_id = client, run.info.run_id
        self.tags = dict(run.data.tags)

    @classmethod
    def open(cls, tracking_uri: str, params: Params, pipeline_run: str) -> Ledger:
        """The run's ledger, made on the run's first step."""
        from workloads.tracking.client import tracking_client

        client = tracking_client(tracking_uri)
        name = EXPERIMENT.format(tenant=params.tenant)
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        digest = params_id(params)
        if (run := _oldest(client, experiment_id, pipeline_run)) is not None:
            if run.data.tags.get(PARAMS_TAG) != digest:
                raise PipelineInputError(f"pipeline run {pipeline_run} was started with other parameters; resume it "
                                         "with the same file or start a new run id")
            return cls(client, run)
        tags = {RUN_TAG: pipeline_run, PARAMS_TAG: digest, PIPELINE_MODEL_TAG: params.model}
        run = client.create_run(experiment_id, run_name=pipeline_run, tags=tags)
        return cls(client, run)

    def outputs(self) -> dict[str, dict[str, Any]]:
        """Every finished step's outputs, by step."""
        return step_outputs(self.tags)

    def record(self, step: str, outputs: dict[str, Any]) -> None:
        value = json.dumps(outputs, sort_keys=True, separators=(",", ":"))
        self.client.set_tag(self.run_id, STEP_TAG + step, value)
        self.tags[STEP_TAG + step] = value

    def finish(self) -> None:
        self.client.set_terminated(self.run_id, "FINISHED")
