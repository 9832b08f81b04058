"""`mlplat mirror --stack <env>`: every third-party image and every chart an environment
runs, copied by digest into its in-region registry before the cluster layer needs them.

The plan (`plan`) is the registry plan of infra/versions.py for one environment: each
mirror image with its pinned digest and the platforms the environment's node pools run,
and each chart with its archive's digest. `mirror` then, per artifact:

1. asks the in-region registry what its tag holds: the pinned digest means there is
   nothing to do (a repeat run only asks, in parallel, and copies nothing);
2. reads the upstream tag, and refuses when it no longer names the pinned digest (the tag
   moved, or the pin is wrong: a person decides which), or when a multi-arch image lacks
   a platform the node pools run;
3. copies by digest (skopeo, every platform of an index, digests kept) or, for a chart,
   fetches the archive, checks its digest and pushes it as an OCI artifact (Helm);
4. reads the copy back and refuses if it is not the pinned digest.

An interrupted run leaves whole artifacts in place and partial ones untagged; the next
run skips the former and finishes the latter, and skopeo sends no blob the registry
already holds. Tags in the in-region registry are immutable: a tag that holds another
digest is refused, never overwritten.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from infra.skopeo import ECR_HOST, Manifest, RegistryError, Skopeo, Unreachable, host_of
from infra.versions import CHARTS, DIGEST, IMAGES, Chart, Image, PlanError

Progress = Callable[[str], None]
CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


class MirrorError(Exception):
    """An artifact that cannot be mirrored as pinned; the message names it."""


@dataclass(frozen=True)
class Artifact:
    kind: str  # "image" or "chart"
    name: str
    source: str  # image: `host/path` upstream; chart: its repository (https:// or oci://)
    version: str  # image tag or chart version
    digest: str  # the pin: the image's manifest (index) digest, or the chart archive's
    target: str  # `host/path` in the in-region registry
    platforms: tuple[str, ...] = ()  # images: every platform the node pools run

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def target_ref(self) -> str:
        return f"{self.target}:{self.version}"

    @property
    def upstream_ref(self) -> str:
        return f"{self.source.removeprefix('oci://')}/{self.name}:{self.version}" if self.archive_pin is False \
            else f"{self.source}:{self.version}"

    @property
    def upstream_repository(self) -> str:
        """Where the pinned manifest lives upstream (`host/path`), for a copy by digest."""
        return self.upstream_ref.rsplit(":", 1)[0]

    @property
    def archive_pin(self) -> bool | None:
        """Charts from an https repository are pinned by their archive (pulled, checked and
        pushed with Helm); charts from an OCI registry by their manifest, copied by digest
        like an image. None: an image."""
        return None if self.kind == "image" else not self.source.startswith("oci://")


def plan(environment: str, region: str, registry: str, platforms: Iterable[str],
         images: Iterable[Image] | None = None, charts: Iterable[Chart] | None = None) -> list[Artifact]:
    """Every artifact of the environment's plan, images first. An image or chart without
    a digest is a PlanError naming all of them."""
    from infra.config import site_of

    site = site_of(environment)  # the plan of what the environment's site runs
    images = [i for i in IMAGES.values() if site in i.sites] if images is None else list(images)
    charts = [c for c in CHARTS.values() if site in c.sites] if charts is None else list(charts)
    unpinned = [f"image {i.name}" for i in images if not i.built_here and not DIGEST.match(i.digest)]
    unpinned += [f"chart {c.name}" for c in charts if not DIGEST.match(c.digest)]
    if unpinned:
        raise PlanError(f"{', '.join(unpinned)} in the plan without a sha256 digest; pin each in infra/versions.py "
                        "(`skopeo inspect --raw docker://<source>:<tag> | sha256sum` gives the digest a tag names)")
    needed = tuple(sorted(set(platforms)))
    artifacts = [
        Artifact("image", i.name, i.upstream(region).rsplit(":", 1)[0], i.tag, i.digest,
                 f"{registry}/{i.repository(environment)}", needed)
        for i in images if not i.built_here
    ]
    artifacts += [Artifact("chart", c.name, c.repository, c.version, c.digest,
                           f"{registry}/{c.mirror_repository(environment)}") for c in charts]
    return artifacts


def check_registry(registry: str, region: str) -> None:
    """An ECR destination must be in the stack's region; other hosts (a customer's
    in-country registry) are taken as given."""
    ecr = ECR_HOST.match(registry)
    if ecr and ecr.group(2) != region:
        raise PlanError(f"registry {registry} is in {ecr.group(2)}, but the stack deploys to {region}; "
                        "mirror into the stack's own region")


@dataclass
class Outcome:
    artifact: Artifact
    action: str  # "present", "copied", "would copy"
    size: int = 0  # bytes of the artifact (what is sent, less blobs the registry already holds)
    seconds: float = 0.0


@dataclass
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, action: str) -> int:
        return sum(o.action == action for o in self.outcomes)


class Mirror:
    """Copies a plan with `skopeo` (images) and Helm's registry client (charts)."""

    def __init__(self, skopeo: Skopeo, progress: Progress = lambda _msg: None, workers: int = 8) -> None:
        self.skopeo = skopeo
        self.progress = progress
        self.workers = workers

    def run(self, artifacts: list[Artifact], dry_run: bool = False) -> Summary:
        summary = Summary()
        # What the in-region registry holds, asked in parallel: all a repeat run does.
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            present = list(pool.map(self._in_place, artifacts))
        total = len(artifacts)
        for index, (artifact, in_place) in enumerate(zip(artifacts, present, strict=True), start=1):
            step = f"[{index}/{total}] {artifact.label} {artifact.version}"
            if in_place:
                summary.outcomes.append(Outcome(artifact, "present"))
                continue
            started = time.perf_counter()
            if artifact.archive_pin:
                outcome = self._chart(artifact, dry_run, step)
            else:
                outcome = self._copy(artifact, dry_run, step)
            outcome.seconds = time.perf_counter() - started
            summary.outcomes.append(outcome)
        return summary

    # --- what is there --------------------------------------------------------------

    def _in_place(self, artifact: Artifact) -> bool:
        """True when the in-region tag holds the pin; a tag holding anything else is an
        error (tags there are immutable, and what runs must be what was pinned)."""
        manifest = self.skopeo.inspect(artifact.target_ref)
        if manifest is None:
            return False
        held = _chart_digest(manifest) if artifact.archive_pin else manifest.digest
        if held == artifact.digest:
            return True
        raise MirrorError(f"{artifact.label}: {artifact.target_ref} in the in-region registry holds {held}, not the "
                          f"pinned {artifact.digest}; its tags are immutable, so give the new pin a new tag or "
                          "delete the old image there deliberately")

    # --- images and OCI charts: copied by digest -------------------------------------

    def _copy(self, artifact: Artifact, dry_run: bool, step: str) -> Outcome:
        pinned = f"{artifact.upstream_repository}@{artifact.digest}"
        upstream = self.skopeo.inspect(artifact.upstream_ref)
        if upstream is None:
            # The tag is gone upstream; the pinned digest may still be there.
            upstream = self.skopeo.inspect(pinned)
            if upstream is None:
                raise MirrorError(f"{artifact.label}: {artifact.upstream_repository} has neither tag "
                                  f"{artifact.version} nor the pinned {artifact.digest}; check the pin in "
                                  "infra/versions.py")
        if upstream.digest != artifact.digest:
            raise MirrorError(f"{artifact.label}: upstream {artifact.upstream_ref} is {upstream.digest}, but the "
                              f"plan pins {artifact.digest}; the tag moved or the pin is wrong: check which, and "
                              "update the pin in infra/versions.py")
        size = self._check_platforms(artifact, upstream) if artifact.kind == "image" else upstream.size()
        what = f"{_platform_text(upstream)}, {_mb(size)}" if artifact.kind == "image" else _mb(size)
        if dry_run:
            self.progress(f"{step}: would copy {pinned} ({what})")
            return Outcome(artifact, "would copy", size)
        self.progress(f"{step}: copying {pinned} ({what}) to {artifact.target_ref}")
        try:
            self.skopeo.copy(pinned, artifact.target_ref)
        except Unreachable:
            raise
        except RegistryError as err:
            raise MirrorError(f"{artifact.label}: copy to {artifact.target_ref} failed: {err}") from None
        copied = self.skopeo.inspect(artifact.target_ref)
        if copied is None or copied.digest != artifact.digest:
            raise MirrorError(f"{artifact.label}: {artifact.target_ref} is "
                              f"{copied.digest if copied else 'missing'} after the copy, not the pinned "
                              f"{artifact.digest}")
        self.progress(f"{step}: done")
        return Outcome(artifact, "copied", size)

    def _check_platforms(self, artifact: Artifact, upstream: Manifest) -> int:
        """Refuse an image that lacks a platform the node pools run; its size in bytes."""
        reference = f"{artifact.upstream_repository}@{artifact.digest}"
        if upstream.is_index:
            offered = upstream.platforms()
            entries = [e for e in upstream.body.get("manifests") or [] if e.get("digest")]
            parts = [self.skopeo.inspect(f"{artifact.source}@{e['digest']}") for e in entries]
            size = sum(p.size() for p in parts if p is not None)
        else:
            offered = {self.skopeo.image_platform(reference)}
            size = upstream.size()
        missing = [p for p in artifact.platforms if p not in offered]
        if missing:
            raise MirrorError(f"{artifact.label}: {reference} offers {', '.join(sorted(offered))}, not "
                              f"{', '.join(missing)}, which the node pools run; pin a multi-arch image")
        return size

    # --- charts from https repositories: pulled, checked, pushed ----------------------

    def _chart(self, artifact: Artifact, dry_run: bool, step: str) -> Outcome:
        from helm_python import chart as helm_chart

        with tempfile.TemporaryDirectory(prefix="mlplat-chart-") as folder:
            archive = self._fetch_chart(artifact, Path(folder))
            digest = helm_chart.digest(archive)
            if digest != artifact.digest:
                raise MirrorError(f"chart {artifact.name}: the {artifact.version} archive from {artifact.source} is "
                                  f"{digest}, but the plan pins {artifact.digest}; the release was replaced or "
                                  "the pin is wrong: check which, and update the pin in infra/versions.py")
            size = archive.stat().st_size
            if dry_run:
                self.progress(f"{step}: would push {archive.name} ({_mb(size)}) to oci://{artifact.target}")
                return Outcome(artifact, "would copy", size)
            self.progress(f"{step}: pushing {archive.name} ({_mb(size)}) to oci://{artifact.target}")
            self._push_chart(artifact, archive)
        copied = self.skopeo.inspect(artifact.target_ref)
        if copied is None or _chart_digest(copied) != artifact.digest:
            raise MirrorError(f"chart {artifact.name}: {artifact.target_ref} does not hold the pinned archive "
                              f"{artifact.digest} after the push")
        self.progress(f"{step}: done")
        return Outcome(artifact, "copied", size)

    def _fetch_chart(self, artifact: Artifact, folder: Path) -> Path:
        from infra.chart_cache import ChartCacheError, pull

        try:
            [result] = pull([(artifact.name, artifact.source, artifact.version)], folder,
                            plain_http=host_of(artifact.source) in self.skopeo.plain_http)
        except ChartCacheError as err:
            host = host_of(artifact.source) if artifact.source.startswith("oci://") else \
                artifact.source.split("/")[2]
            if any(word in str(err).lower() for word in ("connect", "no such host", "timeout", "unreachable")):
                raise Unreachable(host, f"cannot reach chart repository {host} ({err}); check the network") from None
            raise MirrorError(str(err)) from None
        return result.path

    def _push_chart(self, artifact: Artifact, archive: Path) -> None:
        from helm_python import registry
        from helm_python.errors import HelmError

        host = host_of(artifact.target)
        remote = "oci://" + artifact.target.rsplit("/", 1)[0]  # Helm appends the chart's name
        try:
            client = registry.RegistryClient(credentials_file=self.skopeo.authfile,
                                             plain_http=host in self.skopeo.plain_http)
            with client:
                client.push(archive, remote, plain_http=host in self.skopeo.plain_http)
        except HelmError as err:
            raise MirrorError(f"chart {artifact.name}: push to {remote} failed: {' '.join(str(err).split())}") \
                from None


def _chart_digest(manifest: Manifest) -> str:
    """The chart archive a Helm OCI artifact carries (its manifest also records when it was
    pushed, so the archive, not the manifest, is what is pinned)."""
    layers = [layer for layer in manifest.body.get("layers") or [] if layer.get("mediaType") == CHART_LAYER]
    return str(layers[0].get("digest")) if layers else manifest.digest


def _platform_text(manifest: Manifest) -> str:
    platforms = sorted(manifest.platforms()) if manifest.is_index else []
    return f"{len(platforms)} platforms: {', '.join(platforms)}" if platforms else "1 platform"


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def summary_text(summary: Summary, registry: str, dry_run: bool) -> str:
    present = summary.count("present")
    moved = summary.count("would copy" if dry_run else "copied")
    size = sum(o.size for o in summary.outcomes if o.action in ("copied", "would copy"))
    if moved == 0:
        return f"nothing to copy: all {present} artifact(s) are in {registry} at their pinned digests"
    verb = "would copy" if dry_run else "copied"
    return f"{verb} {moved} artifact(s) ({_mb(size)}) to {registry}; {present} already there"
