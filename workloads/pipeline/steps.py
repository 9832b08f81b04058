"""The golden path's steps, in order, and what each does when it runs in its image.

Each step takes the run's parameters and the outputs of the steps before it (from the
ledger) and returns its own outputs, which the ledger records. Every step can be run again
after it died, its work done or not, without publishing twice:
- materialize, dataset: Feast's incremental materialization, and a dataset version whose id
  is its content's, are the same on a rerun;
- tokens: the shards are written beside, then renamed into place; an existing, verified
  version is kept;
- train: the trainer resumes from the run's newest checkpoint and continues its MLflow run;
- register: a version already tagged with this pipeline run is the one registered;
- export: a version already tagged with its Triton version is the one exported;
- canary: asking again sets the same tag, and the Rollout's verdict is read again;
- promote, baseline: setting an alias or a tag to the value it holds changes nothing; and
  promote refuses when production moved since the candidate was judged against it.

An export that died after publishing and before tagging is found again by the registered
version its marker names (workloads/serve/repository.py published_from), and tagged.

The existing tools do the work (`python -m workloads.features`, `workloads.train`,
`workloads.serve export`): a step adds only the ordering, the idempotence and the record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.pipeline.params import Params
from workloads.tracking.client import PIPELINE_LEDGER_TAG, PIPELINE_RUN_TAG

Outputs = dict[str, Any]
Done = Mapping[str, Outputs]
# On the registered model: the dataset version production was trained on. The drift check
# finds the same through the served version's lineage; this is the record for people.
BASELINE_TAG = "mlplat.drift.baseline"
STEP_TIMEOUT_S = 24 * 3600  # a training step may take a day; the cluster's own limits are Kueue's


class StepError(Exception):
    """A step that cannot finish: one line naming the step (exit 1; a rerun continues)."""


@dataclass(frozen=True)
class Context:
    params: Params
    run: str  # the pipeline run's id
    ledger: str  # the MLflow run holding the ledger
    done: Done  # outputs of the finished steps
    tracking_uri: str

    @property
    def folder(self) -> Path:
        return Path(self.params.workdir) / self.run


def _tool(step: str, module: str, *args: str, torchrun: int = 0) -> str:
    """Run one of the platform's tools in this image; its last stdout line, or StepError
    with its last stderr line."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={torchrun}"] \
        if torchrun else [sys.executable]
    # Its own process group: a step past its time takes torchrun's workers down with it.
    process = subprocess.Popen([*launcher, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=os.environ.copy(), start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise StepError(f"{step}: {module} ran past {STEP_TIMEOUT_S // 3600} h and was stopped") from None
    if process.returncode != 0:
        said = [line for line in stderr.splitlines() if line.strip()]
        raise StepError(f"{step}: {module} exited {process.returncode}: {said[-1] if said else '(no message)'}")
    lines = stdout.strip().splitlines()
    return lines[-1] if lines else ""


def _summary(step: str, line: str) -> Outputs:
    """A tool's one-line JSON summary, or StepError saying what it printed instead."""
    try:
        summary = json.loads(line)
    except ValueError:
        summary = None
    if not isinstance(summary, dict):
        raise StepError(f"{step}: expected a JSON summary as the last line, got {line[:80]!r}")
    return summary


def materialize(ctx: Context) -> Outputs:
    return _summary("materialize", _tool("materialize", "workloads.features", "materialize", "--config",
                                         ctx.params.features.config))


def dataset(ctx: Context) -> Outputs:
    f = ctx.params.features
    line = _tool("dataset", "workloads.features", "dataset", "--config", f.config, "--entities", f.entities,
                 "--features", ",".join(f.features), "--name", f.dataset, "--tracking-uri", ctx.tracking_uri,
                 "--experiment", f"{ctx.params.tenant}/features")
    summary = _summary("dataset", line)
    return {"id": summary["id"], "uri": summary["uri"], "rows": summary["rows"], "run_id": summary.get("run_id", "")}


def tokens(ctx: Context) -> Outputs:
    from workloads.pipeline.tokens import write_versions

    made = ctx.done["dataset"]
    try:
        f = ctx.params.features
        return write_versions(made["uri"], made["id"], f.features, f.entity_keys, ctx.folder / "shards",
                              bins=ctx.params.training.bins, holdout=ctx.params.evaluation.holdout)
    except (OSError, ValueError) as err:
        raise StepError(f"tokens: {err}") from None


def train(ctx: Context) -> Outputs:
    t, data = ctx.params.training, ctx.done["tokens"]
    metrics = ctx.folder / "metrics.jsonl"
    args = ["--data", data["train"]["dir"], "--model", t.preset, "--vocab-size", str(data["vocab_size"]),
            "--precision", t.precision, "--device", os.environ.get("MLPLAT_PIPELINE_DEVICE", "auto"),
            "--micro-batch", str(t.micro_batch), "--max-steps", str(t.max_steps),
            "--checkpoint-dir", str(ctx.folder / "checkpoints"), "--checkpoint-every", str(max(1, t.max_steps // 4)),
            "--checkpoint-upload", t.checkpoint_upload, "--metrics", str(metrics),
            "--experiment", f"{ctx.params.tenant}/{ctx.params.model}", "--run-name", ctx.run,
            "--tracking-uri", ctx.tracking_uri]
    _tool("train", "workloads.train", *args, torchrun=t.nproc)
    ends = [r for r in map(json.loads, metrics.read_text().splitlines()) if r.get("event") == "end"]
    if not ends or not ends[-1].get("run_id"):
        raise StepError(f"train: the trainer recorded no tracked run in {metrics}")
    run_id, step = ends[-1]["run_id"], ends[-1]["step"]
    from workloads.tracking.client import CHECKPOINT_TAG, tracking_client

    client = tracking_client(ctx.tracking_uri)
    if f"{CHECKPOINT_TAG}.step_{step:08d}" not in client.get_run(run_id).data.tags:
        _upload_final(ctx, run_id, step)  # the trainer saved it, then died before its upload
    client.set_tag(run_id, PIPELINE_RUN_TAG, ctx.run)
    return {"run_id": run_id, "step": step}


def _upload_final(ctx: Context, run_id: str, step: int) -> None:
    """Upload the run's last checkpoint and record it as the trainer does, so the registry
    never takes an earlier checkpoint for the run's result."""
    from workloads.tracking.client import RunTracker
    from workloads.tracking.store import upload
    from workloads.train import checkpoint as ckpt

    path = ckpt.latest_checkpoint(ctx.folder / "checkpoints")
    if path is None or ckpt.checkpoint_step(path) != step:
        raise StepError(f"train: the run ended at step {step}, but no complete checkpoint of that step is in "
                        f"{ctx.folder / 'checkpoints'}")
    config = ckpt.read_config(path)
    manifest, digest = upload(path, ctx.params.training.checkpoint_upload, run_id=run_id,
                              dataset=str(config.get("dataset", "")), config=config)
    tracker = RunTracker(ctx.tracking_uri, f"{ctx.params.tenant}/{ctx.params.model}", ctx.run)
    tracker.run_id = run_id
    tracker.log_checkpoint(step, manifest, digest)


def evaluate(ctx: Context) -> Outputs:
    from workloads.pipeline.evaluate import compare

    try:
        return compare(ctx.tracking_uri, ctx.params.model, ctx.done["train"]["run_id"],
                       ctx.done["tokens"]["heldout"]["dir"], margin=ctx.params.evaluation.margin,
                       scratch=ctx.folder / "evaluate")
    except (OSError, ValueError) as err:
        raise StepError(f"evaluate: {err}") from None


def _promoted(ctx: Context) -> bool:
    return bool(ctx.done["evaluate"]["promote"])


def register(ctx: Context) -> Outputs:
    if not _promoted(ctx):
        return {"skipped": "not better than production by the margin"}
    from workloads.tracking.client import tracking_client
    from workloads.tracking.registry import register as new_version

    client, name = tracking_client(ctx.tracking_uri), ctx.params.model
    found = client.search_model_versions(f"name = '{name}' and tags.`{PIPELINE_RUN_TAG}` = '{ctx.run}'")
    if found:
        return {"version": min(int(v.version) for v in found)}
    version = new_version(ctx.tracking_uri, name, ctx.done["train"]["run_id"],
                          extra_tags={PIPELINE_RUN_TAG: ctx.run, PIPELINE_LEDGER_TAG: ctx.ledger})
    return {"version": int(version.version)}


def export(ctx: Context) -> Outputs:
    if not _promoted(ctx):
        return {"skipped": "not promoted"}
    from workloads.tracking.client import tracking_client
    from workloads.tracking.registry import TRITON_MODEL_TAG, TRITON_REPOSITORY_TAG, TRITON_VERSION_TAG

    s, name, number = ctx.params.serving, ctx.params.model, str(ctx.done["register"]["version"])
    client = tracking_client(ctx.tracking_uri)
    tags = client.get_model_version(name, number).tags
    # record_export writes the version's tag last: with it, the others are there.
    if TRITON_VERSION_TAG not in tags:
        _tool("export", "workloads.serve", "export", "--checkpoint", f"models:/{name}/{number}",
              "--tracking-uri", ctx.tracking_uri, "--repository", s.repository, "--model-name", s.model_name,
              "--serving-image", s.serving_image, "--device", "cpu")
        tags = client.get_model_version(name, number).tags
    return {"triton_model": tags[TRITON_MODEL_TAG], "triton_version": int(tags[TRITON_VERSION_TAG]),
            "repository": tags[TRITON_REPOSITORY_TAG]}


def canary(ctx: Context) -> Outputs:
    if not _promoted(ctx):
        return {"skipped": "not promoted"}
    c = ctx.params.serving.canary
    if c is None:
        return {"skipped": "no canary configured (serving.canary): the alias moves on the evaluation alone"}
    from workloads.pipeline import canary as rollout
    from workloads.tracking.client import tracking_client

    name, number = ctx.params.model, str(ctx.done["register"]["version"])
    client = tracking_client(ctx.tracking_uri)
    try:
        return rollout.run(ctx.done["export"]["triton_version"], model=ctx.params.serving.model_name, stack=c.stack,
                           repository=ctx.done["export"]["repository"], wait_hours=c.wait_hours,
                           cluster=rollout.Rollouts(c.namespace, c.rollout),
                           ask=lambda command: client.set_model_version_tag(name, number, rollout.REQUEST_TAG, command))
    except rollout.CanaryError as err:
        raise StepError(f"canary: {err}") from None


def _canaried(ctx: Context) -> str | None:
    """Why the canary stops the alias and the baseline, or None when it does not."""
    outcome = ctx.done.get("canary", {}).get("outcome")
    return None if outcome in (None, "promoted") else f"canary {outcome}: {ctx.done['canary'].get('message', '')}"


def promote(ctx: Context) -> Outputs:
    if not _promoted(ctx):
        return {"skipped": "not promoted"}
    if stopped := _canaried(ctx):
        return {"skipped": stopped}
    from workloads.tracking.registry import set_alias

    from mlflow.exceptions import MlflowException

    from workloads.tracking.client import tracking_client
    from workloads.tracking.registry import not_found

    version, judged = str(ctx.done["register"]["version"]), ctx.done["evaluate"]["production_version"]
    try:
        now = tracking_client(ctx.tracking_uri).get_model_version_by_alias(ctx.params.model, "production").version
    except MlflowException as err:
        if not not_found(err):
            raise
        now = None
    if now not in (version, None if judged is None else str(judged)):
        raise StepError(f"promote: production is version {now}, not version {judged} the candidate was judged "
                        "against; start a new run to judge it against the new one")
    before = set_alias(ctx.tracking_uri, ctx.params.model, "production", version)
    return {"alias": "production", "version": int(version), "before": int(before) if before else None}


def baseline(ctx: Context) -> Outputs:
    if not _promoted(ctx):
        return {"skipped": "not promoted"}
    if stopped := _canaried(ctx):
        return {"skipped": stopped}
    from workloads.tracking.client import tracking_client

    made = ctx.done["tokens"]["train"]
    value = json.dumps({"id": made["id"], "uri": made["dir"], "pipeline_run": ctx.run}, sort_keys=True)
    tracking_client(ctx.tracking_uri).set_registered_model_tag(ctx.params.model, BASELINE_TAG, value)
    return {"dataset": made["id"]}


@dataclass(frozen=True)
class Step:
    name: str
    image: str  # the platform image it runs in: features or training
    run: Callable[[Context], Outputs]


STEPS = (
    Step("materialize", "features", materialize),
    Step("dataset", "features", dataset),
    Step("tokens", "training", tokens),
    Step("train", "training", train),
    Step("evaluate", "training", evaluate),
    Step("register", "training", register),
    Step("export", "training", export),
    Step("canary", "training", canary),
    Step("promote", "training", promote),
    Step("baseline", "training", baseline),
)
BY_NAME = {s.name: s for s in STEPS}
