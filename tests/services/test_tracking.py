"""Experiment tracking, the registry and lineage against the real thing: PostgreSQL (TLS
only), a moto server for S3 and Secrets Manager, and the MLflow server started by the
tracking image's entrypoint (tests/services/tracking.py).

One chain runs through them as on the platform: a 2-rank CPU training run logs to MLflow
and uploads its checkpoints, the checkpoint is registered, exported from the registry
into a Triton repository, aliased and rolled back, and lineage prints the whole chain."""

from __future__ import annotations

import json
import time

import boto3
import pytest
import requests

from tests.services.oci import closed_port
from tests.services.tracking import aws_env
from tests.workloads.launch import events, python_module, torchrun
from workloads.train import dataset_version as dv
from workloads.train.data import generate_synthetic_shards

pytestmark = pytest.mark.slow

MODEL = "research-gpt"


def _client(stack, tenant):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=stack.uri, registry_uri=stack.uri)


@pytest.fixture
def as_tenant(tracking, monkeypatch):
    def use(tenant: str) -> None:
        for key, value in tracking.env(tenant).items():
            monkeypatch.setenv(key, value)
    return use


@pytest.fixture(scope="module")
def trained(tracking, tmp_path_factory):
    """Two ranks train the tiny model for 20 steps as tenant `research`, tracked, with a
    checkpoint every 10 steps copied to the checkpoints bucket."""
    folder = tmp_path_factory.mktemp("trained")
    shards = folder / "shards"
    generate_synthetic_shards(shards, num_shards=2, tokens_per_shard=6000, vocab_size=256, seed=0)
    version = dv.build(shards, "gpt2-bpe", sources=["s3://datasets/corpus/2026-11/"])
    dv.write(version, shards)
    args = ["--data", str(shards), "--model", "tiny", "--precision", "fp32", "--micro-batch", "2",
            "--max-steps", "20", "--checkpoint-every", "10", "--checkpoint-dir", str(folder / "ckpt"),
            "--metrics", str(folder / "m.jsonl"), "--experiment", "research/tiny", "--run-name", "tiny-smoke",
            "--checkpoint-upload", "s3://checkpoints/runs"]
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**tracking.env("research"), "MLPLAT_GIT_SHA": "0123456789abcdef0123456789abcdef01234567",
                           "MLPLAT_IMAGE": "registry.example/mlplat/dev/training:1.0@sha256:" + "ab" * 32}.items():
            mp.setenv(key, value)
        done = torchrun(2, "workloads.train", *args, "--track-every", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = events(folder / "m.jsonl", "end")[-1]["run_id"]
    return {"folder": folder, "shards": shards, "version": version, "args": args, "run_id": run_id}


def test_the_run_holds_params_metrics_dataset_code_and_image(tracking, trained, as_tenant):
    as_tenant("research")
    run = _client(tracking, "research").get_run(trained["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["world_size"] == "2" and run.data.params["model.n_layer"] == "2"
    history = _client(tracking, "research").get_metric_history(trained["run_id"], "loss")
    assert sorted(m.step for m in history) == [5, 10, 15, 20]
    logged = {r["step"]: r["loss"] for r in events(trained["folder"] / "m.jsonl", "step")}
    assert all(abs(m.value - logged[m.step]) < 1e-9 for m in history)
    assert run.data.tags["mlplat.dataset"] == trained["version"].id
    [dataset] = run.inputs.dataset_inputs
    assert dataset.dataset.digest == trained["version"].id.removeprefix("sha256:")[:36]
    assert json.loads(dataset.dataset.profile)["shards"] == 2
    assert run.data.tags["mlflow.source.git.commit"].startswith("0123456789ab")
    assert run.data.tags["mlplat.image"].endswith("@sha256:" + "ab" * 32)


def test_rank_0_uploaded_each_checkpoint_with_a_manifest_of_hashes(tracking, trained, as_tenant):
    as_tenant("research")
    tags = _client(tracking, "research").get_run(trained["run_id"]).data.tags
    s3 = boto3.client("s3", endpoint_url=tracking.s3)
    for step in (10, 20):
        uri, _, digest = tags[f"mlplat.checkpoint.step_{step:08d}"].partition(" sha256:")
        key = uri.removeprefix("s3://checkpoints/")
        assert key == f"runs/{trained['run_id']}/step_{step:08d}/manifest.json"
        body = s3.get_object(Bucket="checkpoints", Key=key)["Body"].read()
        import hashlib

        assert hashlib.sha256(body).hexdigest() == digest
        manifest = json.loads(body)
        assert manifest["step"] == step and manifest["dataset"] == trained["version"].id
        stored = {o["Key"] for o in s3.list_objects_v2(Bucket="checkpoints", Prefix=key.rsplit("/", 1)[0])["Contents"]}
        assert {f"{key.rsplit('/', 1)[0]}/{f['path']}" for f in manifest["files"]} | {key} == stored
        assert {".metadata", "config.json"} <= {f["path"] for f in manifest["files"]}


def test_tenants_see_and_write_only_their_own(tracking, trained, as_tenant):
    as_tenant("research")
    assert "research/tiny" in [e.name for e in _client(tracking, "research").search_experiments()]
    as_tenant("analytics")
    assert "research/tiny" not in [e.name for e in _client(tracking, "analytics").search_experiments()]
    reply = requests.get(f"{tracking.uri}/api/2.0/mlflow/runs/get", params={"run_id": trained["run_id"]},
                         auth=("analytics", tracking.passwords["analytics"]), timeout=10)
    assert reply.status_code == 403
    wrong = requests.get(f"{tracking.uri}/api/2.0/mlflow/experiments/search", params={"max_results": 1},
                         auth=("analytics", "not-the-password"), timeout=10)
    assert wrong.status_code == 401


def test_register_export_alias_rollback_and_lineage(tracking, trained, as_tenant, tmp_path):
    as_tenant("research")
    run_id = trained["run_id"]
    first = python_module("workloads.tracking", "register", "--run", run_id, "--name", MODEL, "--step", "10")
    second = python_module("workloads.tracking", "register", "--run", run_id, "--name", MODEL)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert f"registered {MODEL} version 1" in first.stdout and f"registered {MODEL} version 2" in second.stdout

    repository = tmp_path / "triton"
    exported = python_module("workloads.serve", "export", "--checkpoint", f"models:/{MODEL}/2", "--repository",
                             str(repository), "--model-name", "gpt", "--device", "cpu",
                             "--serving-image", "registry.example/mlplat/dev/mirror/tritonserver:26.01@sha256:" + "cd" * 32)
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert (repository / "gpt" / "1" / "model.onnx").is_file()
    version = _client(tracking, "research").get_model_version(MODEL, "2")
    assert version.tags["mlplat.triton.version"] == "1" and version.tags["mlplat.triton.model"] == "gpt"

    # The export died after publishing and before recording it (the pipeline's rerun case):
    # the rerun records version 1 again and publishes nothing.
    client = _client(tracking, "research")
    recorded = {k: v for k, v in version.tags.items() if k.startswith("mlplat.triton.")}
    for key in recorded:
        client.delete_model_version_tag(MODEL, "2", key)
    rerun = python_module("workloads.serve", "export", "--checkpoint", f"models:/{MODEL}/2", "--repository",
                          str(repository), "--model-name", "gpt", "--device", "cpu",
                          "--serving-image", "registry.example/mlplat/dev/mirror/tritonserver:26.01@sha256:" + "cd" * 32)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "published nothing again" in rerun.stdout
    assert sorted(p.name for p in (repository / "gpt").iterdir() if p.name.isdigit()) == ["1"]
    again = client.get_model_version(MODEL, "2").tags
    assert {k: v for k, v in again.items() if k.startswith("mlplat.triton.")} == recorded

    for alias, number in (("production", "1"), ("production", "2")):
        moved = python_module("workloads.tracking", "alias", "--name", MODEL, "--alias", alias, "--version", number)
        assert moved.returncode == 0, moved.stderr
    rolled = python_module("workloads.tracking", "rollback", "--name", MODEL, "--alias", "production")
    assert rolled.returncode == 0 and "-> version 1 (was 2)" in rolled.stdout
    assert _client(tracking, "research").get_model_version_by_alias(MODEL, "production").version == "1"
    again = python_module("workloads.tracking", "rollback", "--name", MODEL, "--alias", "production")
    assert again.returncode == 2 and "nothing to roll back to" in again.stderr

    started = time.perf_counter()
    chain_run = python_module("workloads.tracking", "lineage", f"models:/{MODEL}/2", "--json", "--verify")
    assert chain_run.returncode == 0, chain_run.stderr
    chain = json.loads(chain_run.stdout)
    assert chain["dataset"]["id"] == trained["version"].id
    assert chain["run"]["id"] == run_id and chain["run"]["git_sha"].startswith("0123456789ab")
    assert chain["checkpoint"]["verified"] is True and chain["checkpoint"]["step"] == 20
    assert chain["model"] == {"name": MODEL, "version": 2, "status": "READY", "aliases": []}
    assert chain["triton"]["model"] == "gpt" and chain["triton"]["version"] == 1
    assert chain["images"]["training"].endswith("ab" * 32) and chain["images"]["serving"].endswith("cd" * 32)
    readable = python_module("workloads.tracking", "lineage", f"models:/{MODEL}@production")
    assert readable.returncode == 0
    lines = readable.stdout.splitlines()
    assert [line.split()[0] for line in lines[:6]] == ["dataset", "run", "checkpoint", "model", "triton", "images"]
    assert "@production" in lines[3] and "(not exported)" in lines[4]  # version 1 was never exported
    assert time.perf_counter() - started < 30  # two processes; the query itself is timed in bench/

    # The manifest replaced in the bucket after registration: --verify says so, and fails.
    s3 = boto3.client("s3", endpoint_url=tracking.s3)
    key = chain["checkpoint"]["manifest"].removeprefix("s3://checkpoints/")
    original = s3.get_object(Bucket="checkpoints", Key=key)["Body"].read()
    s3.put_object(Bucket="checkpoints", Key=key, Body=original.replace(b'"step": 20', b'"step": 21'))
    try:
        tampered = python_module("workloads.tracking", "lineage", f"models:/{MODEL}/2", "--json", "--verify")
        assert tampered.returncode == 1, tampered.stderr
        assert json.loads(tampered.stdout)["checkpoint"]["verified"] is False
        told = python_module("workloads.tracking", "lineage", f"models:/{MODEL}/2", "--verify")
        assert told.returncode == 1 and "HASH DIFFERS" in told.stdout.splitlines()[2]
    finally:
        s3.put_object(Bucket="checkpoints", Key=key, Body=original)


@pytest.mark.parametrize("uri, expect", [
    ("models:/no-such-model/1", "no registered model 'no-such-model'"),
    (f"models:/{MODEL}/99", f"model '{MODEL}' has no version 99"),
])
def test_an_unknown_model_or_version_is_one_line(tracking, trained, as_tenant, uri, expect):
    as_tenant("research")
    python_module("workloads.tracking", "register", "--run", trained["run_id"], "--name", MODEL)
    for result in (python_module("workloads.tracking", "lineage", uri),
                   python_module("workloads.serve", "export", "--checkpoint", uri, "--repository", "/tmp/unused",
                                 "--model-name", "gpt", "--device", "cpu")):
        assert result.returncode == 2
        assert expect in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_unreachable_server_is_one_line_before_any_step(tracking, trained, monkeypatch, tmp_path):
    with closed_port() as port:  # bound, never listening: every connection is refused
        dead = f"http://127.0.0.1:{port}"
        for key, value in {**aws_env(tracking.s3), "MLFLOW_TRACKING_URI": dead}.items():
            monkeypatch.setenv(key, value)
        train = python_module("workloads.train", "--data", str(trained["shards"]), "--model", "tiny", "--precision",
                              "fp32", "--max-steps", "1", "--metrics", str(tmp_path / "m.jsonl"))
        lineage = python_module("workloads.tracking", "lineage", f"models:/{MODEL}/1")
    for result in (train, lineage):
        assert result.returncode == 2
        assert f"tracking server {dead} is unreachable" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "m.jsonl").exists()  # refused before the first step


def test_a_tampered_shard_is_refused_at_resume_with_its_name(tracking, trained, as_tenant, tmp_path):
    as_tenant("research")
    import shutil

    shards = shutil.copytree(trained["shards"], tmp_path / "shards")
    ckpt = shutil.copytree(trained["folder"] / "ckpt", tmp_path / "ckpt")
    tampered = shards / "shard_00001.bin"
    data = bytearray(tampered.read_bytes())
    data[-2] ^= 1
    tampered.write_bytes(bytes(data))
    args = [a if a not in (str(trained["shards"]), str(trained["folder"] / "ckpt")) else
            str(shards if a == str(trained["shards"]) else ckpt) for a in trained["args"]]
    refused = torchrun(2, "workloads.train", *args, "--max-steps", "30")
    assert refused.returncode != 0
    assert f"train: error: {tampered}: does not match dataset {trained['version'].id}" in refused.stderr


def _processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process on the machine, from /proc."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue  # /proc/self, /proc/meminfo, ...
        try:
            # The parent is the 2nd field after the command's closing parenthesis.
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue  # gone
        found.append((int(entry.name), parent, command))
    return found


def test_no_process_of_the_server_has_the_database_password_on_its_command_line(tracking):
    """Any user of the node can read a process's command line (/proc/<pid>/cmdline, `ps`);
    the server's processes take the database URI from their environment."""
    commands = [command for _, _, command in _processes()]
    assert any("mlflow server" in c for c in commands)  # the server runs
    assert len(tracking.postgres.password) >= 16
    assert [c for c in commands if tracking.postgres.password in c] == []


def _descendants(pid: int) -> list[str]:
    """The command lines of every process under pid."""
    children: dict[int, list[tuple[int, str]]] = {}
    for child, parent, command in _processes():
        children.setdefault(parent, []).append((child, command))
    found, todo = [], [pid]
    while todo:
        for child, command in children.get(todo.pop(), []):
            found.append(command)
            todo.append(child)
    return found


def test_the_server_runs_no_job_consumers(tracking):
    """MLflow's job runner (its GenAI scorer and optimisation jobs) would run functions in
    consumer processes beside the workers, with the server's database and bucket credentials;
    the platform's server tracks and registers, and runs nothing else."""
    (entrypoint,) = [p for p in tracking.processes if "workloads.tracking.server" in " ".join(map(str, p.args))]
    commands = _descendants(entrypoint.pid)
    assert any("uvicorn" in c for c in commands), commands  # the server's workers are seen
    # The job runner's own process starts with the server, the consumers after it.
    assert [c for c in commands if "huey" in c or "mlflow.server.jobs" in c] == []
