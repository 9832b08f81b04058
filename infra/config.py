"""The one typed, validated configuration of a platform stack.

Both ways of running the program read their settings through `parse_config`: the Pulumi
program from the engine's config (`from_pulumi`), the offline preview from the stack file
(`load_stack_file`). So a bad key fails the same way in both, before any resource exists.
Every error is one line that names the key, the bad value and what is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

PROJECT = "mlplat"
REPO_ROOT = Path(__file__).resolve().parent.parent
STACKS_DIR = REPO_ROOT / "stacks"

# Keys outside our own namespace that the program reads. Anything else under `aws:` would
# configure a default provider, which every stack disables, so it would be silently ignored.
AWS_REGION_KEY = "aws:region"
DISABLE_DEFAULT_PROVIDERS_KEY = "pulumi:disable-default-providers"


class ConfigError(Exception):
    """A user's configuration mistake: printed as one line, exit code 2."""


class _Model(BaseModel):
    """Strict base: camelCase keys as in the stack file, unknown keys rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ResidencyConfig(_Model):
    # The regions data may live in. Never a wildcard: `me-*` would admit Bahrain.
    allowed_regions: tuple[str, ...] = ("me-central-1",)

    @model_validator(mode="after")
    def _no_wildcards(self) -> ResidencyConfig:
        for region in self.allowed_regions:
            if "*" in region or not region:
                raise ValueError(
                    f"region {region!r} is not allowed; list each region by name, e.g. 'me-central-1'"
                )
        return self


# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557,
                      2922, 3288, 3653)


class StorageConfig(_Model):
    # Throwaway environments may turn this on so `pulumi destroy` can empty buckets.
    force_destroy: bool = False
    log_retention_days: int = 365

    @model_validator(mode="after")
    def _retention(self) -> StorageConfig:
        if self.log_retention_days not in LOG_RETENTION_DAYS:
            raise ValueError(
                f"logRetentionDays {self.log_retention_days} is not a CloudWatch retention period; "
                f"allowed: {', '.join(map(str, LOG_RETENTION_DAYS))}"
            )
        return self


class NodePoolConfig(_Model):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    # system: cluster add-ons; cpu: CPU workloads (smb); gpu: training; inference: serving.
    role: Literal["system", "cpu", "gpu", "inference"]
    instance_type: str
    min_size: int = Field(ge=0)
    max_size: int = Field(ge=1)
    desired_size: int | None = Field(default=None, ge=0)
    efa: bool = False

    @model_validator(mode="after")
    def _sizes(self) -> NodePoolConfig:
        if self.min_size > self.max_size:
            raise ValueError(
                f"minSize {self.min_size} is above maxSize {self.max_size}; set minSize <= maxSize"
            )
        if self.desired_size is not None and not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"desiredSize {self.desired_size} is outside [{self.min_size}, {self.max_size}]"
            )
        return self


class PlatformConfig(_Model):
    """Everything one stack says about itself, validated."""

    region: str
    environment: Literal["dev", "staging", "prod", "smb"]
    owner: str = Field(min_length=1)
    cost_center: str = Field(min_length=1)
    data_classification: Literal["public", "internal", "confidential", "restricted"] = "confidential"
    residency: ResidencyConfig = ResidencyConfig()
    storage: StorageConfig = StorageConfig()
    node_pools: tuple[NodePoolConfig, ...] = ()

    @model_validator(mode="after")
    def _region_in_allow_list(self) -> PlatformConfig:
        if self.region not in self.residency.allowed_regions:
            raise _KeyError(
                AWS_REGION_KEY,
                f"{self.region!r} is outside the residency allow-list; allowed: "
                + ", ".join(self.residency.allowed_regions),
            )
        return self

    @model_validator(mode="after")
    def _unique_pool_names(self) -> PlatformConfig:
        seen: set[str] = set()
        for pool in self.node_pools:
            if pool.name in seen:
                raise ValueError(f"node pool name {pool.name!r} is used twice; names must be unique")
            seen.add(pool.name)
        return self

    @property
    def default_tags(self) -> dict[str, str]:
        """Tags every AWS resource carries, set once on the provider."""
        return {
            "environment": self.environment,
            "owner": self.owner,
            "data-classification": self.data_classification,
            "cost-center": self.cost_center,
            "managed-by": "pulumi",
            "project": PROJECT,
        }


class _KeyError(ValueError):
    """A validator's error about a key other than the one pydantic is checking."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _key_path(loc: tuple[Any, ...]) -> str:
    """('nodePools', 0, 'minSize') -> 'mlplat:nodePools[0].minSize'."""
    if not loc:
        return f"{PROJECT}:<stack>"
    head, *rest = loc
    path = AWS_REGION_KEY if head == "region" else f"{PROJECT}:{head}"
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _describe(error: Mapping[str, Any]) -> str:
    """One readable phrase for one pydantic error."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling"
    if kind == "missing":
        return "is required but missing"
    if kind == "literal_error":
        return f"{value!r} is not allowed; allowed: {ctx.get('expected')}"
    if kind == "string_pattern_mismatch":
        return f"{value!r} does not match {ctx.get('pattern')}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{value!r}: {error['msg']}"


def parse_config(raw: Mapping[str, Any], source: str, *, from_stack_file: bool = False) -> PlatformConfig:
    """Validate a flat `namespace:key -> value` mapping into a PlatformConfig.

    `source` names where the values came from, for the error line. Values may be native
    (from YAML) or JSON strings (how the engine hands structured config to a program).
    """
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        namespace, _, name = key.partition(":")
        if key == AWS_REGION_KEY:
            fields["region"] = value
        elif key == DISABLE_DEFAULT_PROVIDERS_KEY:
            _check_default_providers(value, source)
        elif namespace == PROJECT and name not in ("region",):
            fields[name] = _maybe_json(value)
        else:
            raise ConfigError(
                f"{source}: {key}: unknown key; this project reads {AWS_REGION_KEY}, "
                f"{DISABLE_DEFAULT_PROVIDERS_KEY} and {PROJECT}:* keys only"
            )
    if from_stack_file and DISABLE_DEFAULT_PROVIDERS_KEY not in raw:
        raise ConfigError(
            f"{source}: {DISABLE_DEFAULT_PROVIDERS_KEY}: is required; set it to [\"*\"] so every "
            "resource must use the region-pinned provider"
        )
    try:
        return PlatformConfig.model_validate(fields)
    except _KeyError as err:  # raised directly by a model validator on the root
        raise ConfigError(f"{source}: {err.key}: {err}") from None
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        original = (first.get("ctx") or {}).get("error")
        if isinstance(original, _KeyError):
            raise ConfigError(f"{source}: {original.key}: {original}") from None
        raise ConfigError(f"{source}: {_key_path(first['loc'])}: {_describe(first)}") from None


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _check_default_providers(value: Any, source: str) -> None:
    items = _maybe_json(value)
    if not isinstance(items, list) or not ({"*", "aws"} & set(map(str, items))):
        raise ConfigError(
            f"{source}: {DISABLE_DEFAULT_PROVIDERS_KEY}: {value!r} leaves the default AWS provider "
            'on; set it to ["*"]'
        )


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    return stacks_dir / f"Pulumi.{stack}.yaml"


def available_stacks(stacks_dir: Path = STACKS_DIR) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml"))


def read_stack_file(path: Path) -> dict[str, Any]:
    """The raw `config:` mapping of a stack file, or a ConfigError naming the file."""
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such stack file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} is not valid YAML: {getattr(err, 'problem', err)}") from None
    if not isinstance(document, dict) or not isinstance(document.get("config", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with a `config:` section")
    unknown = set(document) - {"config", "secretsprovider", "encryptedkey", "encryptionsalt"}
    if unknown:
        raise ConfigError(f"{path}: {sorted(unknown)[0]}: unknown top-level key; only `config:` is read")
    return document.get("config") or {}


def load_stack_file(path: Path) -> PlatformConfig:
    return parse_config(read_stack_file(path), str(_relative(path)), from_stack_file=True)


def load_stack(stack: str, stacks_dir: Path = STACKS_DIR) -> PlatformConfig:
    """Config of a named stack in stacks/, with the list of stacks in the error."""
    path = stack_file(stack, stacks_dir)
    if not path.exists():
        raise ConfigError(
            f"unknown stack {stack!r}: no {_relative(path)}; available: "
            f"{', '.join(available_stacks(stacks_dir)) or 'none'}"
        )
    return load_stack_file(path)


def from_pulumi() -> PlatformConfig:
    """Config as the Pulumi engine hands it to the running program."""
    import pulumi
    from pulumi.runtime.config import CONFIG

    raw: dict[str, Any] = {}
    # Older engines pass config in the environment, newer ones through the language host.
    for key, value in {**pulumi.runtime.get_config_env(), **CONFIG.get()}.items():
        namespace, _, name = key.partition(":")
        raw[f"{namespace}:{name.removeprefix('config:')}"] = value
    return parse_config(raw, f"stack {pulumi.get_stack()!r}")


def _relative(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path
