"""The trainer's MLflow run, and the one check every tracking command makes first.

Credentials are MLflow's own: `MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD`
(the tenant's user on the server's basic-auth app). Artifacts go through the server
(proxied), so no client holds bucket credentials for them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import requests

# MLflow retries a failed request for minutes by default; a command run by a person or a
# training job should fail in seconds and say why.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

CHECK_TIMEOUT_S = 5.0
# Tags that lineage reads back (workloads/tracking/lineage.py).
GIT_SHA_TAG = "mlflow.source.git.commit"  # MLflow's own, shown in its UI
IMAGE_TAG = "mlplat.image"
DATASET_TAG = "mlplat.dataset"
DATASET_URI_TAG = "mlplat.dataset.uri"
CHECKPOINT_TAG = "mlplat.checkpoint"  # the newest uploaded checkpoint's manifest URI
CHECKPOINT_SHA_TAG = "mlplat.checkpoint.sha256"
# The pipeline run that made a training run or a registered version (workloads/pipeline), and
# its ledger: the MLflow run whose tags hold every step's outputs.
PIPELINE_RUN_TAG = "mlplat.pipeline.run"
PIPELINE_LEDGER_TAG = "mlplat.pipeline.ledger"
PIPELINE_STEP_TAG = "mlplat.pipeline.step."
PIPELINE_MODEL_TAG = "mlplat.pipeline.model"  # on a ledger: the model the run trains
# On a registered model: the drift check's last judged verdict (workloads/monitor/drift_job.py),
# which the tenant's retraining trigger reads (workloads/pipeline/triggers.py).
VERDICT_TAG = "mlplat.drift.verdict"

# MLflow keeps a dataset digest in 36 characters; the full id is in DATASET_TAG.
DIGEST_CHARS = 36


def step_outputs(tags: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A pipeline ledger's finished steps and their outputs, from its run's tags."""
    return {key.removeprefix(PIPELINE_STEP_TAG): json.loads(value) for key, value in tags.items()
            if key.startswith(PIPELINE_STEP_TAG)}


class TrackingError(Exception):
    """The tracking server cannot be used: one line saying why and what to do."""


def _credentials() -> tuple[str, str] | None:
    """The user's name and password; in a pod, the password is read once from the tenant's
    secret (MLPLAT_TRACKING_SECRET_ARN, with the pod's own role) and handed to MLflow."""
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    arn = os.environ.get("MLPLAT_TRACKING_SECRET_ARN")
    if user and not password and arn:
        import json

        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            value = boto3.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
            password = os.environ["MLFLOW_TRACKING_PASSWORD"] = json.loads(value)["password"]
        except (BotoCoreError, ClientError, ValueError, KeyError) as err:
            raise TrackingError(f"cannot read the tracking password from {arn} ({type(err).__name__}); the tracking "
                                "server makes it at its first start: is it running?") from None
    return (user, password) if user and password else None


def check_server(uri: str, timeout: float = CHECK_TIMEOUT_S) -> None:
    """The server answers and accepts these credentials, or TrackingError. One small
    authenticated request: a search of at most one experiment."""
    if not uri.startswith(("http://", "https://")):
        raise TrackingError(f"tracking URI {uri!r} is not http(s)://host:port; set --tracking-uri or "
                            "MLFLOW_TRACKING_URI to the platform's MLflow server")
    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search"
    try:
        reply = requests.get(url, params={"max_results": 1}, auth=_credentials(), timeout=timeout)
    except requests.RequestException as err:
        reason = type(err).__name__.replace("Error", " error").replace("Timeout", "timeout").strip()
        raise TrackingError(f"tracking server {uri} is unreachable ({reason}); check --tracking-uri / "
                            "MLFLOW_TRACKING_URI and that the server runs") from None
    if reply.status_code == 401:
        raise TrackingError(f"tracking server {uri} refused the credentials; set MLFLOW_TRACKING_USERNAME and "
                            "MLFLOW_TRACKING_PASSWORD to your tenant's tracking user")
    if reply.status_code >= 400:
        raise TrackingError(f"tracking server {uri} answered HTTP {reply.status_code} to a search; is it MLflow?")


def tracking_client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


class RunTracker:
    """One training run in MLflow. Only rank 0 holds one. Metrics are sent without
    waiting (MLflow's asynchronous logging), so a step never waits on the network."""

    def __init__(self, uri: str, experiment: str, run_name: str | None = None) -> None:
        check_server(uri)
        self.uri = uri
        self.client = tracking_client(uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.run_name = run_name
        self.run_id = ""
        self._pending: list[Any] = []  # asynchronous metric batches not yet confirmed

    def start(self, *, run_id: str | None, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """A new run, or (resuming) the checkpoint's run again, so one run spans restarts."""
        if run_id:
            self.client.update_run(run_id, status="RUNNING")
            self.run_id = run_id
            return run_id
        run = self.client.create_run(self.experiment_id, run_name=self.run_name, tags=dict(tags))
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in sorted(params.items())])
        return self.run_id

    def log_dataset(self, dataset_id: str, uri: str, profile: Mapping[str, Any]) -> None:
        """The dataset version as the run's input (MLflow's datasets), and its full id as
        a tag (MLflow keeps 36 characters of a digest)."""
        import json

        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(name=f"dataset-{dataset_id.removeprefix('sha256:')[:12]}",
                          digest=dataset_id.removeprefix("sha256:")[:DIGEST_CHARS], source_type="mlplat",
                          source=json.dumps({"uri": uri, "id": dataset_id}), profile=json.dumps(dict(profile)))
        self.client.log_inputs(self.run_id, datasets=[
            DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])])
        self.client.set_tag(self.run_id, DATASET_TAG, dataset_id)
        self.client.set_tag(self.run_id, DATASET_URI_TAG, uri)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric
        from mlflow.utils.time import get_current_time_millis

        now = get_current_time_millis()
        batch = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None]
        self._pending.append(self.client.log_batch(self.run_id, metrics=batch, synchronous=False))

    def log_checkpoint(self, step: int, manifest_uri: str, manifest_sha256: str) -> None:
        """Where the step's checkpoint is, and the hash its manifest has."""
        self.client.set_tag(self.run_id, f"{CHECKPOINT_TAG}.step_{step:08d}", f"{manifest_uri} sha256:{manifest_sha256}")
        self.client.set_tag(self.run_id, CHECKPOINT_TAG, manifest_uri)
        self.client.set_tag(self.run_id, CHECKPOINT_SHA_TAG, manifest_sha256)

    def finish(self, status: str = "FINISHED") -> None:
        """Every metric batch delivered, then the run closed."""
        for operation in self._pending:
            operation.wait()
        self._pending.clear()
        self.client.set_terminated(self.run_id, status=status)
