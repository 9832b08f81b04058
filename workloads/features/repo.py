"""A tenant's feature_store.yaml and feature definitions, checked before Feast uses them.

Who the pod is comes from its environment, which the platform sets (components/
features_spec.py): `MLPLAT_TENANT`, its project `MLPLAT_FEATURE_PROJECT`, and the
environment's `MLPLAT_DATASETS_BUCKET`. A config or a definition that would reach outside
the tenant's project, or an online store without TLS, stops here with one line; IAM and the
Redis ACL refuse the same things again where they are enforced."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads import inputs

# The platform's constants, kept in step with components/features_spec.py (the image holds
# only workloads/).
PREFIX = "features"
STORE_TYPES = ("workloads.features.online.IamRedisOnlineStore", "redis",
               "workloads.features.online.PasswordFileRedisOnlineStore")  # the last: a customer's cluster
REGISTRY_STORE = "workloads.features.registry.TenantS3RegistryStore"
CONFIG_LIMIT = 1 << 20  # a feature_store.yaml is a few hundred bytes


class FeatureInputError(Exception):
    """Bad input from the tenant: one line, exit 2."""


@dataclass(frozen=True)
class Tenant:
    name: str
    project: str
    bucket: str  # the datasets bucket

    @property
    def prefix(self) -> str:
        return f"s3://{self.bucket}/{PREFIX}/{self.name}/"


def tenant_from_env(env: Any = os.environ) -> Tenant:
    missing = [k for k in ("MLPLAT_TENANT", "MLPLAT_FEATURE_PROJECT", "MLPLAT_DATASETS_BUCKET") if not env.get(k)]
    if missing:
        raise FeatureInputError(f"{', '.join(missing)} not set: the platform sets them in the tenant's feature-store "
                                "pods; set them to your tenant, its project and the datasets bucket")
    return Tenant(env["MLPLAT_TENANT"], env["MLPLAT_FEATURE_PROJECT"], env["MLPLAT_DATASETS_BUCKET"])


def read_yaml(path: Path) -> dict[str, Any]:
    """The tenant's feature_store.yaml, read bounded (workloads/inputs.py): a regular file
    of at most CONFIG_LIMIT bytes of UTF-8 YAML, duplicate keys refused."""
    try:
        data = inputs.read_yaml(path, "feature_store.yaml", CONFIG_LIMIT)
    except inputs.InputError as err:
        raise FeatureInputError(str(err)) from None
    if not isinstance(data, dict):
        raise FeatureInputError(f"{path}: expected a mapping of Feast settings (project, registry, ...)")
    return data


def check_config(data: dict[str, Any], tenant: Tenant, where: str) -> None:
    project = data.get("project")
    if project != tenant.project:
        raise FeatureInputError(f"{where}: project {project!r} is not tenant {tenant.name!r}'s project "
                                f"{tenant.project!r}; a tenant reads and writes its own project only")
    registry = data.get("registry")
    path = registry.get("path") if isinstance(registry, dict) else registry
    if not isinstance(path, str) or not path.startswith(tenant.prefix):
        raise FeatureInputError(f"{where}: registry {path!r} is outside {tenant.prefix}; keep the registry "
                                f"at {tenant.prefix}registry.pb")
    if not isinstance(registry, dict) or registry.get("registry_store_type") != REGISTRY_STORE:
        raise FeatureInputError(f"{where}: registry.registry_store_type must be {REGISTRY_STORE} (Feast's own S3 "
                                "store needs to list the whole bucket, which a tenant's role may not)")
    offline = data.get("offline_store") or {}
    if not isinstance(offline, dict) or offline.get("type", "file") != "file":
        raise FeatureInputError(f"{where}: offline_store type {offline.get('type') if isinstance(offline, dict) else offline!r} "
                                "is not the platform's; use type: file (Parquet in the datasets bucket)")
    online = data.get("online_store")
    if not isinstance(online, dict) or online.get("type") not in STORE_TYPES:
        raise FeatureInputError(f"{where}: online_store must be the platform's Redis "
                                f"(type: {STORE_TYPES[0]})")
    options = [part.strip().lower().replace(" ", "") for part in str(online.get("connection_string", "")).split(",")]
    if "ssl=true" not in options:
        raise FeatureInputError(f"{where}: online_store.connection_string has no ssl=true: the online store accepts "
                                "TLS only; append ,ssl=true")


def load_config(path: str | Path, tenant: Tenant) -> Any:
    """The checked RepoConfig for `path`."""
    path = Path(path)
    data = read_yaml(path)
    check_config(data, tenant, str(path))
    # Feast only now: importing it takes seconds, and a bad file is refused without it.
    from feast.repo_config import RepoConfig
    from pydantic import ValidationError

    try:
        return RepoConfig(repo_path=path.parent, **data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise FeatureInputError(f"{path}: {field}: {first['msg']}") from None


def source_paths(objects: Iterable[Any]) -> list[tuple[str, str]]:
    """(what, path) for every file-backed source among Feast objects: the feature views'
    batch sources first (an error names the view), then the data sources themselves."""
    objects = list(objects)
    views = [(f"feature view {o.name}", o.batch_source) for o in objects if getattr(o, "batch_source", None)]
    sources = [(f"data source {o.name or '(unnamed)'}", o) for o in objects if hasattr(o, "path")]
    return [(label, src.path) for label, src in views + sources if getattr(src, "path", None) is not None]


def check_definitions(objects: Iterable[Any], tenant: Tenant) -> None:
    for label, path in source_paths(objects):
        # Feast runs without typeguard (workloads/features/__init__.py): a path that is not a
        # plain string (an object whose str() says one prefix and whose reads go to another)
        # is refused here, before the prefix is judged on its text.
        if type(path) is not str:
            raise FeatureInputError(f"{label}: source path must be a string, not {type(path).__name__}")
        if not path.startswith(f"s3://{tenant.bucket}/"):
            raise FeatureInputError(f"{label}: source {path} is outside the datasets bucket; put the Parquet under "
                                    f"{tenant.prefix}")
        if not path.startswith(tenant.prefix):
            raise FeatureInputError(f"{label}: source {path} is outside tenant {tenant.name!r}'s prefix; put the "
                                    f"Parquet under {tenant.prefix}")


def load_definitions(repo: str | Path, tenant: Tenant) -> list[Any]:
    """Every Feast object the repository's Python files define, checked."""
    from feast.repo_operations import parse_repo

    repo = Path(repo)
    if not repo.is_dir():
        raise FeatureInputError(f"{repo}: not a directory of feature definitions")
    try:
        contents = parse_repo(repo.resolve())
    except SyntaxError as err:
        raise FeatureInputError(f"{err.filename}:{err.lineno}: {err.msg}") from None
    except Exception as err:  # a definition file that fails as it is imported: the tenant's code
        raise FeatureInputError(f"{repo}: the definitions fail to load ({type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else ''})") from None
    objects = [*contents.entities, *contents.data_sources, *contents.feature_views,
               *contents.on_demand_feature_views, *contents.stream_feature_views, *contents.feature_services]
    if not objects:
        raise FeatureInputError(f"{repo}: defines no entities, sources or feature views")
    check_definitions(objects, tenant)
    return objects
