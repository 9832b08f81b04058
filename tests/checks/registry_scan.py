"""The deploy's image-scan step, as a script the workflow calls (so it runs, and is tested,
outside GitHub): for every image the environment runs, ECR's scan of each of its manifests
for the node pools' platforms, then the judge of tests/checks/security.py over them.

    python -m tests.checks.registry_scan --stack ENV --registry HOST --platform-images JSON
        [--out DIR] [--json F] [--markdown F] [--wait-seconds N] [--poll-seconds N] [--plain-http]
        exit 0: no new findings; 1: new findings (listed); 2: not every image could be judged
        (a scan that did not finish in time, an index with no image for the platforms, a
        registry that does not answer): one line each, and the summary says so

ECR scans images, not indexes: an index (a multi-arch mirror, or a build with attestations)
is read with `skopeo inspect --raw` (skopeo's own login to the registry) and judged by its
manifests for the platforms the environment's node pools run. An image pushed before
scanning was on has no scan: one is started (ECR allows one a day). A scan under way is
waited for, bounded by --wait-seconds with a line per poll; past it, the judge names the
scan that did not finish. Each answer is written whole (every page, as the AWS CLI prints
it) to DIR, one file per manifest, and kept as the job's artifact.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.checks import security

PENDING = ("IN_PROGRESS", "PENDING")
INSPECT_TIMEOUT = 120  # seconds for one `skopeo inspect --raw`


@dataclass
class Collected:
    files: list[Path] = field(default_factory=list)  # one scan answer per judged manifest
    problems: list[str] = field(default_factory=list)  # what could not be judged, one line each


def manifest_of(registry: str, repository: str, digest: str, plain_http: bool = False) -> dict[str, Any]:
    """The manifest (or index) stored at repository@digest, checked against its digest: a
    registry that answers other content than it was asked for is refused."""
    tls = ["--tls-verify=false"] if plain_http else []
    try:
        done = subprocess.run(["skopeo", "inspect", "--raw", *tls, f"docker://{registry}/{repository}@{digest}"],
                              capture_output=True, timeout=INSPECT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise security.ScanError(f"{repository}@{digest[:19]}: the registry did not answer in "
                                 f"{INSPECT_TIMEOUT}s") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise security.ScanError(f"{repository}@{digest[:19]}: skopeo inspect failed: "
                                 f"{said[-1][:300] if said else done.returncode}")
    if f"sha256:{hashlib.sha256(done.stdout).hexdigest()}" != digest:
        raise security.ScanError(f"{repository}@{digest[:19]}: the registry answered a manifest of another digest")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise security.ScanError(f"{repository}@{digest[:19]}: the registry's manifest is not JSON") from None


def images_for(manifest: dict[str, Any], digest: str, platforms: Sequence[str]) -> list[str]:
    """The image digests to judge: an index's manifests for `platforms` (os/architecture),
    or the image itself."""
    entries = manifest.get("manifests")
    if entries is None:
        return [digest]
    wanted = set(platforms)
    found = []
    for entry in entries if isinstance(entries, list) else []:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        if isinstance(platform, dict) and f"{platform.get('os', '')}/{platform.get('architecture', '')}" in wanted:
            found.append(str(entry.get("digest", "")))
    return found


def _json_default(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _status(ecr: Any, repository: str, image: str) -> str | None:
    """The scan's status, or None when the image has never been scanned."""
    try:
        answer = ecr.describe_image_scan_findings(repositoryName=repository, imageId={"imageDigest": image},
                                                  maxResults=1)
    except ecr.exceptions.ScanNotFoundException:
        return None
    return str(answer.get("imageScanStatus", {}).get("status", ""))


def scan_answer(ecr: Any, repository: str, image: str, label: str, wait_seconds: float, poll_seconds: float,
                say: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """ECR's whole answer for one image: a scan started if there was none, one under way
    waited for (bounded), then every page of findings merged as the AWS CLI merges them."""
    state = _status(ecr, repository, image)
    if state is None:
        ecr.start_image_scan(repositoryName=repository, imageId={"imageDigest": image})
        state = "IN_PROGRESS"
    waited = 0.0
    while state in PENDING:
        if waited >= wait_seconds:
            say(f"{label}: the scan of {image[7:19]} is still {state} after {waited:.0f}s")
            break
        say(f"{label}: the scan of {image[7:19]} is {state} ({waited:.0f}s of {wait_seconds:.0f}s)")
        sleep(poll_seconds)
        waited += poll_seconds
        state = _status(ecr, repository, image) or "not started"
    pages = ecr.get_paginator("describe_image_scan_findings")
    answer = pages.paginate(repositoryName=repository, imageId={"imageDigest": image}).build_full_result()
    answer.pop("ResponseMetadata", None)
    return answer


def collect(targets: Sequence[tuple[str, str, str]], platforms: Sequence[str], registry: str, ecr: Any, out: Path,
            wait_seconds: float, poll_seconds: float, plain_http: bool = False,
            say: Callable[[str], None] = print) -> Collected:
    """Every target's scan answers, written under `out`; what could not be read is listed,
    and the others are still collected so one failure does not hide the rest."""
    out.mkdir(parents=True, exist_ok=True)
    collected = Collected()
    for name, repository, digest in targets:
        try:
            images = images_for(manifest_of(registry, repository, digest, plain_http), digest, platforms)
        except security.ScanError as error:
            collected.problems.append(f"{name}: {error}")
            continue
        if not images:
            collected.problems.append(f"{name}: {repository}@{digest[:19]} holds no image for "
                                      f"{', '.join(platforms)}")
            continue
        for image in images:
            try:
                answer = scan_answer(ecr, repository, image, name, wait_seconds, poll_seconds, say)
            except Exception as error:  # an AWS error for one image: named, the rest still judged
                collected.problems.append(f"{name}: ECR's scan of {repository}@{image[:19]}: "
                                          f"{str(error).splitlines()[0][:300] if str(error) else type(error).__name__}")
                continue
            path = out / f"{name}-{image[7:19]}.json"
            path.write_text(json.dumps(answer, indent=1, default=_json_default) + "\n")
            collected.files.append(path)
    return collected


def ecr_client(registry: str) -> Any:
    """ECR's API in the registry's region (`<account>.dkr.ecr.<region>.amazonaws.com`)."""
    import boto3

    parts = registry.split(".")
    region = parts[3] if len(parts) > 4 and parts[1:3] == ["dkr", "ecr"] else None
    return boto3.client("ecr", region_name=region)


def main(argv: Sequence[str] | None = None, ecr: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.checks.registry_scan",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, help="the environment (a cloud-layer stack, or its cluster layer)")
    parser.add_argument("--registry", required=True, help="the environment's registry host")
    parser.add_argument("--platform-images", required=True, metavar="JSON",
                        help="the build step's record: {image name: tag@digest}")
    parser.add_argument("--out", type=Path, default=Path("out/image-scans"), help="where each scan answer is kept")
    parser.add_argument("--json", type=Path, help="write the findings as JSON")
    parser.add_argument("--markdown", type=Path, help="write the findings as Markdown (the job summary's part)")
    parser.add_argument("--accepted", type=Path, default=security.ACCEPTED)
    parser.add_argument("--wait-seconds", type=float, default=1800, help="longest wait for a scan under way")
    parser.add_argument("--poll-seconds", type=float, default=20)
    parser.add_argument("--plain-http", action="store_true", help="the registry speaks plain HTTP (a local one)")
    opts = parser.parse_args(argv)
    environment = opts.stack.removesuffix("-cluster")
    try:
        if not (0 <= opts.wait_seconds <= 86_400 and 1 <= opts.poll_seconds <= 3_600):
            raise security.ScanError("--wait-seconds must be 0 to 86400 and --poll-seconds 1 to 3600")
        try:
            built = json.loads(opts.platform_images)
        except ValueError:
            raise security.ScanError("--platform-images is not JSON; it is the build step's record, "
                                     "{image name: tag@digest}") from None
        targets = security.image_targets(environment, built)
        platforms = security.platforms_of(environment)
        collected = collect(targets, platforms, opts.registry, ecr or ecr_client(opts.registry), opts.out,
                            opts.wait_seconds, opts.poll_seconds, opts.plain_http)
        if not collected.files:
            raise security.ScanError("; ".join(collected.problems) or "no image to judge")
        verdict = security.scan_images(collected.files, opts.accepted)
    except security.ScanError as error:
        return security.could_not_run("Image scan", error, opts.markdown)
    code = security.write_reports(verdict, opts.json, opts.markdown)
    if not collected.problems:
        return code
    for problem in collected.problems:
        print(f"image scan: {problem}", file=sys.stderr)
    if opts.markdown is not None:
        with opts.markdown.open("a") as summary:
            summary.write("\n### Not judged\n\n" + "".join(f"- {p}\n" for p in collected.problems))
    return 2


if __name__ == "__main__":
    sys.exit(main())
