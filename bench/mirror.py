"""`mlplat mirror` against real local registries: the first run, and a repeat run with
nothing changed.

    .venv/bin/python bench/mirror.py [--images 8] [--layer-mb 24] [--repeat 5]
    .venv/bin/python bench/mirror.py --smoke [--output FILE]   # 1 image of 1 MB, 1 repeat

Two CNCF distribution registries (Debian's `docker-registry`) run on this machine: one
stands in for the upstream registries, one for the environment's in-region ECR. The plan
is `--images` two-platform images (one layer of `--layer-mb` random megabytes per
platform, so nothing compresses) and two charts (one from an OCI registry, one from an
https-style chart repository served over HTTP). The first run copies everything; each
repeat run finds everything in place and copies nothing. Target: a repeat run takes at
most 5% of the first.

What is measured: real servers and the real copier (skopeo, Helm's registry client) over
loopback, so network transfer abroad is left out: a first run against nvcr.io moves tens
of gigabytes and takes far longer, while a repeat run still only asks the in-region
registry. Results go to bench/results/mirror.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from machine import describe, finish, record  # noqa: E402
from options import output, parse, write  # noqa: E402

from infra import cli  # noqa: E402
from infra.versions import Chart, Image  # noqa: E402
from tests.services.oci import (  # noqa: E402
    chart_repository,
    package_chart,
    push_chart,
    push_image,
    require_tools,
    start_registry,
)

RESULTS = REPO / "bench" / "results" / "mirror.json"
TARGET_RATIO = 0.05


def _run(images: list[Image], charts: list[Chart], upstream: str, mirror: str) -> tuple[float, str]:
    """One `mlplat mirror --stack dev` with this plan; its wall time and its summary line."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch("infra.mirror.IMAGES", {i.name: i for i in images}), \
            mock.patch("infra.mirror.CHARTS", {c.name: c for c in charts}), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        started = time.perf_counter()
        code = cli.main(["mirror", "--stack", "dev", "--registry", mirror, "--plain-http", upstream,
                         "--plain-http", mirror])
        seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"mlplat mirror exited {code}: {err.getvalue()[-2000:]}")
    return seconds, out.getvalue().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--layer-mb", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=5)
    args = parse(parser, {"images": 1, "layer_mb": 1, "repeat": 1})
    require_tools()
    machine = record()
    skopeo = subprocess.run(["skopeo", "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="mlplat-bench-mirror-") as folder:
        root = Path(folder)
        upstream, mirror = start_registry(root / "upstream"), start_registry(root / "mirror")
        try:
            images, size = [], 0
            for index in range(args.images):
                built = push_image(root / f"image-{index}", upstream, f"vendor/image-{index}:v1", f"image {index}",
                                   layer_bytes=args.layer_mb << 20)
                images.append(Image(f"image-{index}", f"{upstream.host}/vendor/image-{index}", "v1", built.digest))
                size += built.size
            _, oci_digest = push_chart(root / "oci-chart", upstream, "charts", "kueue", "0.18.2")
            https_archive = package_chart(root / "repo", "dcgm-exporter", "4.8.2")
            from helm_python import chart as helm_chart

            with chart_repository(root / "repo") as url:
                charts = [Chart("kueue", f"oci://{upstream.host}/charts", "0.18.2", oci_digest),
                          Chart("dcgm-exporter", url, "4.8.2", helm_chart.digest(https_archive))]
                first_s, first_line = _run(images, charts, upstream.host, mirror.host)
                repeats = [_run(images, charts, upstream.host, mirror.host) for _ in range(args.repeat)]
        finally:
            upstream.stop()
            mirror.stop()
    repeat_s = statistics.median(s for s, _ in repeats)
    machine = finish(machine)
    result = {
        "date": date.today().isoformat(),
        "machine": describe(machine),
        "cpu": machine,
        "measured": f"real servers: two local CNCF distribution registries (docker-registry 2.8), {skopeo}, "
                    "Helm's registry client (helm-python-sdk), over loopback",
        "images": args.images, "platforms": 2, "charts": 2, "bytes": size,
        "first_s": round(first_s, 3), "first": first_line,
        "repeat_s": round(repeat_s, 3), "repeat_runs": [round(s, 3) for s, _ in repeats], "repeat": repeats[0][1],
        "ratio": round(repeat_s / first_s, 4), "target_ratio": TARGET_RATIO,
    }
    write(output(args, RESULTS), result)
    print(f"machine: {result['machine']}")
    print(f"measured: {result['measured']}")
    print(f"plan: {args.images} two-platform images ({size / 1e6:,.0f} MB) and 2 charts")
    print(f"first run: {first_s:.2f} s ({first_line})")
    print(f"repeat run, median of {args.repeat}: {repeat_s:.3f} s ({repeats[0][1]})")
    print(f"repeat / first: {result['ratio']:.1%} (target <= {TARGET_RATIO:.0%})")


if __name__ == "__main__":
    main()
