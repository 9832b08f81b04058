"""The chart cache: where the offline renderer finds the source of each pinned chart.

A real `pulumi up` lets the Kubernetes provider fetch each chart from its repository (or
the stack's OCI mirror). The offline preview and the render checks must see the same
chart without a network, so they read it from a cache:

- `$MLPLAT_CHART_CACHE` (one or more folders, separated like PATH), when set;
- otherwise `../shared/charts` beside the repository (or `shared/charts` inside a copy
  that carries it: the chart sources at the pinned versions, with a PROVENANCE.md), then
  the user cache `~/.cache/mlplat/charts`, which `mlplat charts pull` fills from the
  charts' own repositories.

A folder holds either packaged charts, `<name>-<version>.tgz` (what `pull` writes), or
chart source trees, `<name>/Chart.yaml`. A source tree counts for a pinned version when
its Chart.yaml says that version, or when the folder's PROVENANCE.md table gives that
version for it (some projects rewrite the version only when they publish). A chart that
is in no folder at its pinned version is an error naming the chart, the version and the
folders looked in: never a silent skip.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from infra.config import REPO_ROOT, ConfigError

CACHE_ENV = "MLPLAT_CHART_CACHE"
PROVENANCE = "PROVENANCE.md"


def shared_folder(name: str) -> Path:
    """`shared/<name>` beside the checkout, or inside it where a copy of the working tree
    carries it (the GPU machine's copy does); the first that exists, else the former."""
    candidates = [REPO_ROOT.parent / "shared" / name, REPO_ROOT / "shared" / name]
    return next((c for c in candidates if c.is_dir()), candidates[0])


SHARED_CACHE = shared_folder("charts")


class ChartCacheError(ConfigError):
    """A pinned chart that the cache does not hold, or that could not be fetched into it."""


def user_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlplat" / "charts"


def cache_dirs() -> list[Path]:
    """The folders looked in, in order."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return [Path(p) for p in configured.split(os.pathsep) if p]
    return [SHARED_CACHE, user_cache()]


@cache
def provenance_versions(folder: Path) -> dict[str, str]:
    """Folder name -> chart version, from the first two cells of each row of the cache's
    PROVENANCE.md table (`| nvidia-device-plugin | 0.19.3 (...) | ...`)."""
    path = folder / PROVENANCE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    versions: dict[str, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[1] and re.match(r"^v?\d", cells[1]):
            versions[cells[0]] = cells[1].split()[0]
    return versions


def _chart_yaml_version(folder: Path) -> str | None:
    try:
        meta = yaml.safe_load((folder / "Chart.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return str(meta.get("version")) if isinstance(meta, dict) and meta.get("version") is not None else None


def find_in(folder: Path, name: str, version: str) -> Path | None:
    archive = folder / f"{name}-{version}.tgz"
    if archive.is_file():
        return archive
    tree = folder / name
    if (tree / "Chart.yaml").is_file():
        if version in (_chart_yaml_version(tree), provenance_versions(folder).get(name)):
            return tree
    return None


def locate(name: str, version: str) -> Path:
    """The cached source of chart `name` at `version`: a .tgz or a chart folder."""
    return _locate(name, version, tuple(cache_dirs()))


@cache
def _locate(name: str, version: str, dirs: tuple[Path, ...]) -> Path:
    for folder in dirs:
        found = find_in(folder, name, version)
        if found is not None:
            return found
    looked = ", ".join(str(d) for d in dirs)
    raise ChartCacheError(
        f"chart {name} {version} is not in the chart cache (looked in {looked} for {name}-{version}.tgz or "
        f"{name}/ at that version); run `mlplat charts pull` where the chart repositories are reachable, "
        f"or point {CACHE_ENV} at a folder that holds it"
    )


# --- Filling the user cache from the charts' own repositories ---------------------------


@dataclass(frozen=True)
class PullResult:
    name: str
    version: str
    path: Path
    pulled: bool  # False: already in the cache, nothing fetched


def pull(
    charts: Iterable[tuple[str, str, str]],
    destination: Path | None = None,
    progress: Callable[[str], None] = lambda _msg: None,
    plain_http: bool = False,
) -> list[PullResult]:
    """Fetch each (name, repository, version) that `destination` lacks, as
    `<name>-<version>.tgz`. An https repository's archive must match the digest its
    index.yaml lists for that version; an OCI chart is fetched by its version tag."""
    from helm_python import chart as helm_chart
    from helm_python import registry
    from helm_python.errors import HelmError

    target = destination or user_cache()
    target.mkdir(parents=True, exist_ok=True)
    results = []
    for name, repository, version in charts:
        cached = find_in(target, name, version)
        if cached is not None:
            progress(f"{name} {version}: already cached ({cached})")
            results.append(PullResult(name, version, cached, pulled=False))
            continue
        progress(f"{name} {version}: pulling from {repository}")
        try:
            if repository.startswith("oci://"):
                registry.pull(f"{repository.rstrip('/')}/{name}", version=version, destination=target,
                              plain_http=plain_http)
            else:
                expected = _index_digest(registry.repo_index(repository), name, version, repository)
                registry.pull(name, repo_url=repository, version=version, destination=target)
                archive = target / f"{name}-{version}.tgz"
                actual = helm_chart.digest(archive)
                if expected and actual.removeprefix("sha256:") != expected.removeprefix("sha256:"):
                    archive.unlink(missing_ok=True)
                    raise ChartCacheError(
                        f"chart {name} {version} from {repository}: archive digest {actual} differs from the "
                        f"repository index's {expected}; nothing was kept"
                    )
        except HelmError as err:
            raise ChartCacheError(f"chart {name} {version}: could not pull from {repository}: "
                                  f"{_one_line(str(err))}") from None
        path = find_in(target, name, version)
        if path is None:
            raise ChartCacheError(f"chart {name} {version}: {repository} answered, but no "
                                  f"{name}-{version}.tgz arrived in {target}")
        results.append(PullResult(name, version, path, pulled=True))
    return results


def _index_digest(index: dict, name: str, version: str, repository: str) -> str:
    for entry in (index.get("entries") or {}).get(name) or []:
        if str(entry.get("version")) == version:
            return str(entry.get("digest") or "")
    raise ChartCacheError(f"chart {name} {version} is not in the index of {repository}")


def _one_line(text: str) -> str:
    return " ".join(text.split())
