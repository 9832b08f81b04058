"""The golden path end to end, on the suite's real servers: Feast with Redis and moto's S3,
MLflow on PostgreSQL, the trainer under torchrun, the ONNX export into a Triton repository.
Airflow runs the DAG with its own local runner (`dag.test()`, in `.venv-pipelines`); each
step runs in the virtualenv that stands for its image, as the cluster runs it in its pod.

What is asserted is what the run left: the registry's versions and aliases, the lineage from
the served version back to the dataset and the pipeline run, the files in the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from tests.services.features import PYTHON as FEATURES_PYTHON
from tests.services.features import FeatureStack, start_feature_stack
from tests.services.tracking import REPO
from workloads.pipeline.steps import STEPS

pytestmark = pytest.mark.slow

AIRFLOW = REPO / ".venv-pipelines" / "bin"
DAG = REPO / "workloads" / "pipeline" / "dag.py"
MODEL = "research-golden"
AS_OF = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)
CUSTOMERS = 240
FEATURES = ["customer_stats:spend", "customer_stats:visits"]


@dataclass
class Golden:
    features: FeatureStack
    folder: Path
    env: dict[str, str]

    def params(self, name: str, **training: int) -> Path:
        """A parameter file of the research tenant's golden path; `training` overrides."""
        data = {
            "tenant": "research", "model": MODEL, "workdir": str(self.folder / "work"),
            "features": {"config": str(self.features.config("research")),
                         "entities": f"s3://datasets/features/research/labels/golden.parquet",
                         "features": FEATURES, "dataset": "golden"},
            "training": {"preset": "tiny", "max_steps": 20, "micro_batch": 2, "nproc": 1, "bins": 16,
                         "checkpoint_upload": "s3://checkpoints/runs", **training},
            "evaluation": {"holdout": 0.25, "margin": 0.0},
            "serving": {"repository": str(self.folder / "triton"), "model_name": "golden",
                        "serving_image": "registry.example/mlplat/dev/mirror/tritonserver:26.01@sha256:" + "cd" * 32},
        }
        path = self.folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def airflow(self, conf: dict[str, str], tenant: str = "research") -> subprocess.CompletedProcess:
        """One DAG run through Airflow's dag.test()."""
        return subprocess.run([str(AIRFLOW / "python"), str(DAG), json.dumps(conf)], cwd=REPO,
                              env={**self.env, **self.features.env(tenant), **self._airflow_env()},
                              capture_output=True, text=True, timeout=600)

    def step(self, name: str, params: Path, run: str, tenant: str = "research") -> subprocess.CompletedProcess:
        python = FEATURES_PYTHON if name in ("materialize", "dataset") else Path(sys.executable)
        return subprocess.run([str(python), "-m", "workloads.pipeline", "step", name, "--params", str(params),
                               "--run", run], cwd=REPO, env={**self.env, **self.features.env(tenant)},
                              capture_output=True, text=True, timeout=600)

    def _airflow_env(self) -> dict[str, str]:
        return {"AIRFLOW_HOME": str(self.folder / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": str(DAG),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": str(REPO)}



def _rows() -> dict[str, list]:
    """Each customer's spend and visits at two times before AS_OF: values with a pattern (visits
    follow spend) for the model to learn."""
    ids, times, spend, visits = [], [], [], []
    for c in range(1, CUSTOMERS + 1):
        for hours in (-30, -3):
            ids.append(c)
            times.append((AS_OF + timedelta(hours=hours)).isoformat())
            spend.append(float((c * 7) % 97) + (hours == -3) * 0.5)
            visits.append(((c * 7) % 97) // 8)
    return {"customer_id": ids, "event_timestamp": times, "spend": spend, "visits": visits}


@pytest.fixture(scope="module")
def golden(tracking, tmp_path_factory):
    if not (AIRFLOW / "airflow").exists():
        pytest.fail(f"{AIRFLOW.parent} lacks Airflow: run `make setup`", pytrace=False)
    folder = tmp_path_factory.mktemp("golden")
    features = start_feature_stack(folder / "features", tracking)
    try:
        source = features.put_parquet("features/research/customers/golden.parquet", _rows())
        config = features.config("research")
        done = subprocess.run([str(FEATURES_PYTHON), "-m", "workloads.features", "apply", "--config", str(config),
                               "--repo", str(REPO / "tests" / "fixtures" / "features" / "repo")], cwd=REPO,
                              env={**features.env("research"), "FEATURES_SOURCE": source},
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        features.put_parquet("features/research/labels/golden.parquet",
                             {"customer_id": list(range(1, CUSTOMERS + 1)),
                              "event_timestamp": [AS_OF.isoformat()] * CUSTOMERS})
        env = {"OMP_NUM_THREADS": "1", "MLPLAT_PIPELINE_DEVICE": "cpu",
               "MLPLAT_PIPELINE_PYTHON_FEATURES": str(FEATURES_PYTHON),
               "MLPLAT_PIPELINE_PYTHON_TRAINING": sys.executable}
        stack = Golden(features, folder, env)
        migrated = subprocess.run([str(AIRFLOW / "airflow"), "db", "migrate"], cwd=REPO,
                                  env={**os.environ, **stack._airflow_env()}, capture_output=True, text=True,
                                  timeout=300)
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        yield stack
    finally:
        features.stop()


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

    # The same run again: every step is in the ledger, nothing is published twice.
    again = golden.airflow({"params": str(params), "run": "golden-1"})
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert len(_versions(client)) == 1
    assert sorted(p.name for p in (golden.folder / "triton" / "golden").iterdir() if p.name.isdigit()) == ["1"]
