"""The golden path's local stand-ins, for its test (tests/services/test_pipeline.py) and for
`make demo`: the research tenant's feature project on the suite's Feast, Redis and moto S3,
MLflow on PostgreSQL, and Airflow (`.venv-pipelines`) running the DAG with `dag.test()`.
Each step runs in the virtualenv that stands for its image, as the cluster runs it in its pod.

    .venv/bin/python -m tests.services.pipeline     # make demo: one run, then its lineage
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from tests.services.features import PYTHON as FEATURES_PYTHON
from tests.services.features import FeatureStack, start_feature_stack
from tests.services.tracking import REPO, TrackingStack

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
                         "entities": "s3://datasets/features/research/labels/golden.parquet",
                         "features": FEATURES, "entity_keys": ["customer_id"], "dataset": "golden"},
            "training": {"preset": "tiny", "max_steps": 20, "micro_batch": 2, "nproc": 1, "bins": 16,
                         "precision": "fp32",
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
                              env={**self.env, **self.features.env(tenant), **self.airflow_env()},
                              capture_output=True, text=True, timeout=600)

    def step(self, name: str, params: Path, run: str, tenant: str = "research") -> subprocess.CompletedProcess:
        python = FEATURES_PYTHON if name in ("materialize", "dataset") else Path(sys.executable)
        return subprocess.run([str(python), "-m", "workloads.pipeline", "step", name, "--params", str(params),
                               "--run", run], cwd=REPO, env={**self.env, **self.features.env(tenant)},
                              capture_output=True, text=True, timeout=600)

    def airflow_env(self) -> dict[str, str]:
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




def start_golden(folder: Path, tracking: TrackingStack) -> Golden:
    """The research tenant's feature project applied over a source of CUSTOMERS customers,
    its label table, and Airflow's database; stop it with `.features.stop()`."""
    if not (AIRFLOW / "airflow").exists():
        pytest.fail(f"{AIRFLOW.parent} lacks Airflow: run `make setup`", pytrace=False)
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
        # The tests start runs back to back: no storm guard but where a test sets one.
        env = {"OMP_NUM_THREADS": "1", "MLPLAT_PIPELINE_DEVICE": "cpu", "MLPLAT_PIPELINE_MIN_INTERVAL_H": "0",
               "MLPLAT_PIPELINE_PYTHON_FEATURES": str(FEATURES_PYTHON),
               "MLPLAT_PIPELINE_PYTHON_TRAINING": sys.executable}
        stack = Golden(features, folder, env)
        migrated = subprocess.run([str(AIRFLOW / "airflow"), "db", "migrate"], cwd=REPO,
                                  env={**os.environ, **stack.airflow_env()}, capture_output=True, text=True,
                                  timeout=300)
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        return stack
    except BaseException:
        features.stop()
        raise


def demo() -> int:
    """Start the servers, run the golden path once, print its lineage and how long it took."""
    from tests.services.tracking import start_tracking_stack

    with tempfile.TemporaryDirectory(prefix="mlplat-demo-") as folder:
        started = time.perf_counter()
        (Path(folder) / "tracking").mkdir()
        tracking = start_tracking_stack(Path(folder) / "tracking")
        try:
            golden = start_golden(Path(folder) / "golden", tracking)
            try:
                ready = time.perf_counter()
                print(f"servers up in {ready - started:.0f} s; running the golden path with Airflow's dag.test()",
                      flush=True)
                ran = golden.airflow({"params": str(golden.params("demo")), "run": "demo-1"})
                took = time.perf_counter() - ready
                if ran.returncode != 0:
                    print((ran.stdout + ran.stderr)[-3000:], file=sys.stderr)
                    print(f"the golden path failed after {took:.0f} s", file=sys.stderr)
                    return 1
                shown = subprocess.run([sys.executable, "-m", "workloads.tracking", "lineage",
                                        f"models:/{MODEL}@production", "--verify"], cwd=REPO,
                                       env={**os.environ, **tracking.env("research")}, capture_output=True,
                                       text=True, timeout=120)
                print(shown.stdout or shown.stderr)
                print(f"the golden path ran in {took:.0f} s (one run of the DAG on this machine's cores)")
                return shown.returncode
            finally:
                golden.features.stop()
        finally:
            tracking.stop()


if __name__ == "__main__":
    sys.exit(demo())
