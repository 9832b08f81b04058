"""The candidate against the model in production, on the same held-out tokens: promote only
when the candidate's mean next-token loss is lower by the margin (a fraction of
production's). Both checkpoints come from the registry's store, every file's hash checked.
A model with no production version yet is promoted. Both losses and the verdict go on the
candidate's training run, so the registry shows why a version was or was not promoted."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from workloads.train.data import list_shards, read_shard

MAX_WINDOWS = 4096  # held-out windows judged: enough for a loss to 1e-3 on the tiny model, bounded time


def _checkpoint(uri: str, tracking_uri: str, into: Path) -> Any:
    from workloads.tracking.registry import resolve
    from workloads.tracking.store import download
    from workloads.train.checkpoint import load_for_inference

    ref = resolve(uri, tracking_uri)
    path = download(ref.manifest_uri, into, expect_sha256=ref.manifest_sha256 or None)
    return load_for_inference(path)


def heldout_loss(model: Any, block: int, folder: str | Path) -> float:
    """Mean next-token cross-entropy over non-overlapping windows of the held-out shards."""
    tokens = np.concatenate([read_shard(p) for p in list_shards(folder)]).astype(np.int64)
    width = min(block, len(tokens) - 1)
    if width < 1:
        raise ValueError(f"{folder}: the held-out set has {len(tokens)} tokens; it needs 2 or more")
    starts = range(0, len(tokens) - width, width)[:MAX_WINDOWS]
    windows = torch.from_numpy(np.stack([tokens[s:s + width + 1] for s in starts]))
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in windows.split(64):
            logits = model(batch[:, :-1])
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += batch[:, 1:].numel()
    return total / count


def compare(tracking_uri: str, model_name: str, run_id: str, heldout: str | Path, *, margin: float,
            scratch: Path) -> dict[str, Any]:
    from mlflow.exceptions import MlflowException

    from workloads.tracking.client import tracking_client
    from workloads.tracking.registry import not_found

    client = tracking_client(tracking_uri)
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        model, config = _checkpoint(f"runs:/{run_id}", tracking_uri, Path(folder) / "candidate")
        candidate = heldout_loss(model, config.block_size, heldout)
        if not math.isfinite(candidate):
            raise ValueError(f"the candidate's held-out loss is {candidate}: the run diverged")
        try:
            current = client.get_model_version_by_alias(model_name, "production")
        except MlflowException as err:
            if not not_found(err):
                raise
            current = None  # no model, or no production alias yet: nothing to beat
        production = None
        if current is not None:
            vocab = config.vocab_size
            model, config = _checkpoint(f"models:/{model_name}/{current.version}", tracking_uri,
                                        Path(folder) / "production")
            if config.vocab_size != vocab:
                # Other features or bins: the same held-out tokens mean other things to it.
                raise ValueError(f"production version {current.version} reads {config.vocab_size} tokens, this run's "
                                 f"model {vocab}: the features or bins changed, so the two cannot be judged on one "
                                 "held-out set; promote by hand (python -m workloads.tracking alias) or keep them")
            production = heldout_loss(model, config.block_size, heldout)
    promote = production is None or candidate < production * (1 - margin)
    client.log_metric(run_id, "heldout_loss", candidate)
    if production is not None:
        client.log_metric(run_id, "production_heldout_loss", production)
    client.set_tag(run_id, "mlplat.pipeline.promote", str(promote).lower())
    return {"candidate_loss": candidate, "production_loss": production,
            "production_version": int(current.version) if current is not None else None, "margin": margin,
            "promote": promote}
