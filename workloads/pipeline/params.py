"""A golden-path run's parameters: one YAML or JSON file per tenant pipeline, checked whole
before any step runs (one line naming the field, exit 2).

Who the run belongs to is the pod's, not the file's: `MLPLAT_TENANT` is set by the tenant's
namespace (its service account, its ledger, its buckets), and a file naming another tenant,
or a model outside the tenant's `<tenant>-` names, is refused before anything starts."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from workloads import inputs

PARAMS_LIMIT = 1 << 20  # a parameter file is a page of YAML; a megabyte is a mistake
NAME = r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$"  # tenant, model and dataset names: path and tag segments
RUN_ID = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$")
Name = Annotated[str, StringConstraints(pattern=NAME)]
# Printable, and never read as an option by the tool it is handed to (no leading '-').
Uri = Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=r"^[^\x00-\x1f\x7f-][^\x00-\x1f\x7f]*$")]
LocalPath = Annotated[str, StringConstraints(max_length=1024, pattern=r"^/[^\x00-\x1f\x7f]*$")]
Column = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
# The trainer's presets (workloads/train/shapes.py PRESETS; tests/unit/test_pipeline.py keeps
# them equal): checked here, before any step runs, without importing torch.
PRESETS = ("gpt-1.3b", "gpt-6.7b", "gpt2-124m", "tiny")
FeatureRef = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,64}:[a-z0-9_]{1,64}$")]


class PipelineInputError(inputs.InputError):
    """Bad parameters, or a run the caller may not start: one line, exit 2."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Features(_Strict):
    config: Uri  # the tenant's feature_store.yaml, as the cluster layer renders it
    entities: Uri  # Parquet of entity keys and label times (s3:// under the tenant's prefix)
    features: tuple[FeatureRef, ...] = Field(min_length=1, max_length=256)
    # The entity's join keys: a row goes to the held-out set by them (one entity, one side).
    entity_keys: tuple[Column, ...] = Field(min_length=1, max_length=16)
    dataset: Name  # the dataset's name; its version id is the content's


class Training(_Strict):
    preset: Literal[PRESETS] = "tiny"  # type: ignore[valid-type]
    max_steps: int = Field(default=200, ge=1, le=10_000_000)
    micro_batch: int = Field(default=8, ge=1, le=4096)
    nproc: int = Field(default=1, ge=1, le=64)  # processes per node (GPUs per node in the cluster)
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    bins: int = Field(default=32, ge=2, le=4096)  # tokens per feature value (workloads/pipeline/tokens.py)
    checkpoint_upload: Uri  # s3://<checkpoints bucket>/runs/<tenant>: the registry's copy of each checkpoint


class Evaluation(_Strict):
    holdout: float = Field(default=0.2, gt=0, lt=1)  # fraction of entities kept out of training
    # Promote only when the held-out loss is lower than production's by this fraction of it.
    margin: float = Field(default=0.01, ge=0, lt=1)


class Canary(_Strict):
    """Where the exported version is canaried (workloads/pipeline/canary.py): the platform
    team is asked to serve it in `stacks/Pulumi.<stack>.yaml`, then that stack's Rollout
    decides."""

    stack: Name  # this environment's stack: the one whose Rollout the step reads
    namespace: Name = "inference"  # the stack's mlplat:inference.namespace
    rollout: Name = "triton"  # the Rollout and the Deployment it runs
    wait_hours: float = Field(default=72, gt=0, le=24 * 14)  # review, deploy and every analysis step


class Serving(_Strict):
    repository: Uri  # the Triton model repository: a directory or s3://bucket/prefix
    model_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")]
    serving_image: Annotated[str, StringConstraints(max_length=512)] = ""
    # None: the registry's alias moves on the evaluation alone (a sandbox, or a model not
    # served by a stack's Rollout).
    canary: Canary | None = None


class Params(_Strict):
    tenant: Name
    model: Name  # the registered model: <tenant>-<name>
    workdir: LocalPath  # shards and checkpoints of the run: an absolute path (the tenant's scratch in the cluster)
    features: Features
    training: Training
    evaluation: Evaluation = Evaluation()
    serving: Serving

    @model_validator(mode="after")
    def _model_is_the_tenants(self) -> Params:
        if not self.model.startswith(f"{self.tenant}-"):
            raise ValueError(f"model {self.model!r} is not one of tenant {self.tenant!r}'s: name it "
                             f"{self.tenant}-<name>")
        return self


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id):
        raise PipelineInputError(f"run id {inputs.excerpt(run_id)}: use 1 to 128 lowercase letters, digits, '.', "
                                 "'_' and '-', starting and ending with a letter or digit")
    return run_id


def parse(data: object, source: str) -> Params:
    try:
        params = Params.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise PipelineInputError(f"{source}: {where}: {first['msg']}") from None
    tenant = os.environ.get("MLPLAT_TENANT", "")
    if not tenant:
        raise PipelineInputError("MLPLAT_TENANT is not set: a pipeline step runs as its tenant (the namespace's "
                                 "pod sets it)")
    if params.tenant != tenant:
        raise PipelineInputError(f"{source}: tenant {params.tenant!r} is not this pod's tenant {tenant!r}: a "
                                 "tenant runs pipelines in its own namespace only")
    return params


def load(path: str | Path) -> Params:
    text = inputs.read_text(path, "parameter file", PARAMS_LIMIT)
    return parse(inputs.load_yaml(text, inputs.shown(path), string_keys=True), inputs.shown(path))
