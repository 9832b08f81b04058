"""The model registry: a run's checkpoint registered as a model version, aliases that say
what serves where, rollback that moves an alias back, and `models:/<name>/<version>` (or
`models:/<name>@<alias>`) resolved to the checkpoint it was registered from.

A version's source is its checkpoint in the checkpoints bucket; its tags hold the
manifest's hash and the dataset version, and, once exported, the Triton model, version and
serving image (lineage reads them all back)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workloads.tracking.client import CHECKPOINT_SHA_TAG, CHECKPOINT_TAG, DATASET_TAG, tracking_client

MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>\d+)|@(?P<alias>[A-Za-z0-9_-]+))$")
RUN_URI = re.compile(r"^runs:/(?P<run>[0-9a-f]{32})/?$")
MANIFEST_TAG = "mlplat.checkpoint.manifest"
TRITON_MODEL_TAG = "mlplat.triton.model"
TRITON_VERSION_TAG = "mlplat.triton.version"
TRITON_REPOSITORY_TAG = "mlplat.triton.repository"
SERVING_IMAGE_TAG = "mlplat.triton.image"
# Each alias's earlier holders, newest last, on the registered model: what rollback moves to.
HISTORY_TAG = "mlplat.alias.{alias}.history"


class RegistryError(Exception):
    """An unknown model, version, alias or run: one line."""


@dataclass(frozen=True)
class CheckpointRef:
    manifest_uri: str
    manifest_sha256: str
    run_id: str
    model: str = ""  # registered model name, when resolved through the registry
    version: str = ""


def not_found(err: Exception) -> bool:
    """The server's answer for a name this user cannot see: the auth app says 403 for
    objects it has no permission record of, absent ones included."""
    return getattr(err, "error_code", "") in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE",
                                              "PERMISSION_DENIED")


def _fetch(call: Callable[[], Any], missing: str | Callable[[], str]) -> Any:
    """`call()`, or RegistryError(missing) where the server says there is no such object
    for this user (`missing` may be computed only then)."""
    from mlflow.exceptions import MlflowException

    try:
        return call()
    except MlflowException as err:
        if not not_found(err):
            raise
        raise RegistryError(missing() if callable(missing) else missing) from None


def _version(client: Any, name: str, version: str) -> Any:
    def missing() -> str:
        from mlflow.exceptions import MlflowException

        try:
            known = sorted(int(v.version) for v in client.search_model_versions(f"name='{name}'"))
        except MlflowException:
            known = []
        if not known:
            return f"no registered model {name!r} (or no permission to read it)"
        return f"model {name!r} has no version {version} (versions: {', '.join(map(str, known))})"

    return _fetch(lambda: client.get_model_version(name, version), missing)


def get_run(client: Any, run_id: str) -> Any:
    return _fetch(lambda: client.get_run(run_id), f"no run {run_id} (or no permission to read it)")


def _model(client: Any, name: str) -> Any:
    return _fetch(lambda: client.get_registered_model(name),
                  f"no registered model {name!r} (or no permission to read it)")


def model_version(client: Any, uri: str) -> Any:
    """The model version `models:/<name>/<version>` or `models:/<name>@<alias>` names."""
    match = MODEL_URI.match(uri)
    if match is None:
        raise RegistryError(f"{uri!r} is not models:/<name>/<version> or models:/<name>@<alias>")
    name, alias = match["name"], match["alias"]
    if alias:
        return _fetch(lambda: client.get_model_version_by_alias(name, alias),
                      f"model {name!r} has no alias {alias!r} (or no permission to read it)")
    return _version(client, name, match["version"])


def checkpoint_of(mv: Any) -> CheckpointRef:
    """The checkpoint a model version was registered from."""
    return CheckpointRef(mv.tags.get(MANIFEST_TAG, mv.source), mv.tags.get(CHECKPOINT_SHA_TAG, ""), mv.run_id,
                         mv.name, mv.version)


def resolve(uri: str, tracking_uri: str) -> CheckpointRef:
    """`models:/<name>/<version>`, `models:/<name>@<alias>` or `runs:/<run id>` (its newest
    uploaded checkpoint) -> the checkpoint's manifest."""
    client = tracking_client(tracking_uri)
    if run := RUN_URI.match(uri):
        tags = get_run(client, run["run"]).data.tags
        if CHECKPOINT_TAG not in tags:
            raise RegistryError(f"run {run['run']} has uploaded no checkpoint")
        return CheckpointRef(tags[CHECKPOINT_TAG], tags.get(CHECKPOINT_SHA_TAG, ""), run["run"])
    if not MODEL_URI.match(uri):
        raise RegistryError(f"{uri!r} is not models:/<name>/<version>, models:/<name>@<alias> or runs:/<run id>")
    return checkpoint_of(model_version(client, uri))


def register(tracking_uri: str, name: str, run_id: str, step: int | None = None,
             extra_tags: Mapping[str, str] | None = None) -> Any:
    """A new version of `name` from the run's checkpoint (its newest, or `step`'s), with
    `extra_tags` set in the same call (a crash cannot leave the version without them)."""
    from mlflow.exceptions import MlflowException

    client = tracking_client(tracking_uri)
    tags = get_run(client, run_id).data.tags
    key = CHECKPOINT_TAG if step is None else f"{CHECKPOINT_TAG}.step_{step:08d}"
    if key not in tags:
        what = "no checkpoint" if step is None else f"no checkpoint of step {step}"
        raise RegistryError(f"run {run_id} has uploaded {what}")
    if step is None:
        manifest, sha = tags[CHECKPOINT_TAG], tags.get(CHECKPOINT_SHA_TAG, "")
    else:
        manifest, _, sha = tags[key].partition(" sha256:")
    try:
        client.get_registered_model(name)
    except MlflowException as err:
        if not not_found(err):
            raise
        try:
            client.create_registered_model(name)
        except MlflowException as made:
            if made.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            raise RegistryError(f"registered model {name!r} belongs to another tenant; choose another name "
                                "(by convention <tenant>-<model>)") from None
    return client.create_model_version(
        name, source=manifest.rsplit("/", 1)[0], run_id=run_id,
        tags={MANIFEST_TAG: manifest, CHECKPOINT_SHA_TAG: sha, DATASET_TAG: tags.get(DATASET_TAG, ""),
              **(extra_tags or {})})


def record_export(tracking_uri: str, name: str, version: str, *, triton_model: str, triton_version: int,
                  repository: str, serving_image: str) -> None:
    client = tracking_client(tracking_uri)
    # The version's tag last: a reader that finds it finds the others (a crash between tags
    # leaves the export unrecorded, not half-recorded).
    for key, value in ((TRITON_MODEL_TAG, triton_model), (TRITON_REPOSITORY_TAG, repository),
                       (SERVING_IMAGE_TAG, serving_image), (TRITON_VERSION_TAG, str(triton_version))):
        client.set_model_version_tag(name, version, key, value)


def set_alias(tracking_uri: str, name: str, alias: str, version: str) -> str | None:
    """Point `alias` at `version`; the version it held before goes on the alias's history.
    Returns that earlier version."""
    client = tracking_client(tracking_uri)
    _version(client, name, version)
    model = client.get_registered_model(name)
    before = model.aliases.get(alias)
    if before is not None and before != version:
        history = [v for v in model.tags.get(HISTORY_TAG.format(alias=alias), "").split(",") if v]
        if history[-1:] != [before]:  # a move that died after this tag, before the alias, is not recorded twice
            client.set_registered_model_tag(name, HISTORY_TAG.format(alias=alias), ",".join([*history, before]))
    client.set_registered_model_alias(name, alias, version)
    return before


def rollback(tracking_uri: str, name: str, alias: str) -> tuple[str, str]:
    """Move `alias` back to the version it held before. Returns (from, to)."""
    client = tracking_client(tracking_uri)
    model = _model(client, name)
    current = model.aliases.get(alias)
    if current is None:
        raise RegistryError(f"model {name!r} has no alias {alias!r}")
    history = [v for v in model.tags.get(HISTORY_TAG.format(alias=alias), "").split(",") if v]
    if not history:
        raise RegistryError(f"alias {alias!r} of {name!r} has pointed only at version {current}; nothing to roll "
                            "back to")
    previous = history.pop()
    client.set_registered_model_alias(name, alias, previous)
    client.set_registered_model_tag(name, HISTORY_TAG.format(alias=alias), ",".join(history))
    return current, previous

