"""`python -m workloads.serve canary`: make a published version the stack's served version,
which the next deploy rolls out as a canary (or an A/B split) through Argo Rollouts.

The version must be completely published in the model repository (the registry the pods
copy from): a version that is not there would leave every canary pod failing its start.
The stack file is edited in place with its comments and layout kept (ruamel.yaml's round
trip), and only after the whole edited config passes the same validation as a preview.
Promotion and abort of a running rollout are Argo's own commands (`kubectl argo rollouts
promote|abort`), not this module's.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

INFERENCE = "mlplat:inference"
# On the served Deployment's pod template (components/inference_spec.py): the version its
# pods serve, which the golden path's canary step reads (workloads/pipeline/canary.py).
VERSION_ANNOTATION = "mlplat.io/model-version"


class CanaryError(Exception):
    """One line for the user (exit 2)."""


@dataclass(frozen=True)
class Change:
    path: Path
    model: str
    before: int | None
    after: int
    strategy: str


def _round_trip():
    from ruamel.yaml import YAML

    yaml = YAML()  # round-trip: comments, order and quoting survive
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)  # the stack files' own style
    return yaml


def set_version(stack: str, version: int, published: list[int], *, stacks_dir: Path | None = None) -> Change:
    """Write `version` as the stack's `mlplat:inference.version`, once it is known to be
    published and the edited config is valid."""
    from ruamel.yaml import YAMLError

    from infra.config import STACK_FILE_LIMIT, STACKS_DIR, ConfigError, parse_config, stack_file
    from workloads import inputs

    path = stack_file(stack, stacks_dir or STACKS_DIR)
    if not os.path.lexists(path):
        raise CanaryError(f"--stack {stack}: no {path.name} in {path.parent}")
    try:
        # Bounded as every stack file is read (infra/config.py): regular file, 1 MiB, UTF-8.
        text = inputs.read_text(path, "stack file", STACK_FILE_LIMIT)
    except inputs.InputError as err:
        raise CanaryError(f"--stack {stack}: {err}") from None
    yaml = _round_trip()
    try:
        document = yaml.load(text)
    except YAMLError as err:
        raise CanaryError(f"--stack {stack}: {path} is not valid YAML: {getattr(err, 'problem', None) or err}") \
            from None
    config = document.get("config") if isinstance(document, dict) else None
    inference = config.get(INFERENCE) if isinstance(config, dict) else None
    if not isinstance(inference, dict):
        raise CanaryError(f"--stack {stack}: {path.name} serves no model (no {INFERENCE} section)")
    model = str(inference.get("modelName", "gpt"))
    if version not in published:
        listed = ", ".join(map(str, published)) or "none"
        raise CanaryError(f"--version {version}: {model} has no completely published version {version} in the "
                          f"repository (published: {listed}); export it first")
    before = inference.get("version")
    if before == version:
        raise CanaryError(f"--version {version}: it is already the served version of {model} in {path.name}")
    inference["version"] = version
    out = io.StringIO()
    yaml.dump(document, out)
    import yaml as pyyaml

    try:
        parsed = parse_config(pyyaml.safe_load(out.getvalue())["config"], str(path), from_stack_file=True)
    except ConfigError as err:
        raise CanaryError(str(err)) from None
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(out.getvalue(), encoding="utf-8")
    partial.replace(path)  # never half a stack file
    return Change(path, model, before, version, parsed.inference.rollout.strategy)
