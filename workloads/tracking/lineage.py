"""The chain behind one model version, as an auditor asks for it:

    dataset version -> run -> checkpoint -> registered model -> Triton version -> image digests

Read from the registry and the run (three requests), plus the checkpoint manifest's
hash as the registry recorded it; `verify=True` also reads the manifest from the bucket
and checks that hash."""

from __future__ import annotations

import json
from typing import Any

from workloads.tracking.client import (
    DATASET_TAG,
    DATASET_URI_TAG,
    GIT_SHA_TAG,
    IMAGE_TAG,
    PIPELINE_LEDGER_TAG,
    PIPELINE_RUN_TAG,
    step_outputs,
    tracking_client,
)
from workloads.tracking.registry import (
    SERVING_IMAGE_TAG,
    TRITON_MODEL_TAG,
    TRITON_REPOSITORY_TAG,
    TRITON_VERSION_TAG,
    RegistryError,
    checkpoint_of,
    get_run,
    model_version,
)


def lineage(model_uri: str, tracking_uri: str, *, verify: bool = False) -> dict[str, Any]:
    client = tracking_client(tracking_uri)
    mv = model_version(client, model_uri)
    ref = checkpoint_of(mv)
    run = get_run(client, mv.run_id)
    tags, params = run.data.tags, run.data.params
    inputs = [{"name": d.dataset.name, "digest": d.dataset.digest, "source": json.loads(d.dataset.source or "{}")}
              for d in (run.inputs.dataset_inputs if run.inputs else [])]
    checkpoint: dict[str, Any] = {"manifest": ref.manifest_uri, "sha256": ref.manifest_sha256}
    if verify:
        from workloads.tracking.store import read_manifest

        manifest, digest = read_manifest(checkpoint["manifest"])
        checkpoint.update(verified=digest == checkpoint["sha256"], step=manifest.step, files=len(manifest.files))
    model = client.get_registered_model(ref.model)
    triton = None
    if TRITON_VERSION_TAG in mv.tags:
        triton = {"model": mv.tags.get(TRITON_MODEL_TAG, ""), "version": int(mv.tags[TRITON_VERSION_TAG]),
                  "repository": mv.tags.get(TRITON_REPOSITORY_TAG, "")}
    return {
        "dataset": {"id": mv.tags.get(DATASET_TAG) or tags.get(DATASET_TAG, ""), "uri": tags.get(DATASET_URI_TAG, ""),
                    "inputs": inputs},
        "run": {"id": run.info.run_id, "name": run.info.run_name, "experiment": run.info.experiment_id,
                "status": run.info.status, "git_sha": tags.get(GIT_SHA_TAG, ""), "params": dict(sorted(params.items()))},
        "checkpoint": checkpoint,
        "model": {"name": ref.model, "version": int(ref.version), "status": mv.status,
                  "aliases": sorted(a for a, v in model.aliases.items() if v == ref.version)},
        "triton": triton,
        "images": {"training": tags.get(IMAGE_TAG, ""), "serving": mv.tags.get(SERVING_IMAGE_TAG, "")},
        "pipeline": _pipeline(client, mv.tags),
    }


def _pipeline(client: Any, tags: dict[str, str]) -> dict[str, Any] | None:
    """The pipeline run that registered the version, with every step's outputs (its ledger)."""
    if PIPELINE_LEDGER_TAG not in tags:
        return None
    chain = {"run": tags.get(PIPELINE_RUN_TAG, ""), "ledger": tags[PIPELINE_LEDGER_TAG]}
    try:
        return {**chain, "steps": step_outputs(get_run(client, tags[PIPELINE_LEDGER_TAG]).data.tags)}
    except (RegistryError, ValueError):  # deleted, not this user's, or a tag that is not JSON
        return {**chain, "steps": {}, "unreadable": True}


def human(chain: dict[str, Any]) -> str:
    d, r, c, m, t, i = (chain[k] for k in ("dataset", "run", "checkpoint", "model", "triton", "images"))
    lines = [
        f"dataset     {d['id'] or '(unrecorded)'}" + (f"  {d['uri']}" if d["uri"] else ""),
        f"run         {r['id']}  {r['name'] or ''}  {r['status']}  git {r['git_sha'][:12] or '(unrecorded)'}",
        f"checkpoint  {c['manifest']}  sha256:{c['sha256'][:16] or '(unrecorded)'}"
        + ({True: "  verified", False: "  HASH DIFFERS"}[c["verified"]] if "verified" in c else ""),
        f"model       {m['name']} version {m['version']}" + (f"  @{', @'.join(m['aliases'])}" if m["aliases"] else ""),
        f"triton      {t['model']} version {t['version']}  {t['repository']}" if t else "triton      (not exported)",
        f"images      training {i['training'] or '(unrecorded)'}",
        f"            serving  {i['serving'] or '(unrecorded)'}",
    ]
    if p := chain.get("pipeline"):
        lines.append(f"pipeline    {p['run']}  ledger {p['ledger']}  steps {', '.join(p['steps']) or '(none)'}")
    return "\n".join(lines)
