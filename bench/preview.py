"""Offline preview speed, and what rendering the Helm charts costs in it.

Measures, each the median of several fresh processes (as a user runs `mlplat preview`):
- every environment's `mlplat preview --env` wall time (both layers: the cloud layer, then
  the cluster layer reading its outputs) with a warm render cache, and prod's with a cold
  one (an empty cache folder: every chart rendered by Helm);
- rendering alone: every release of every cluster layer in both device-plugin modes, cold
  and warm (what the render check and the previews render);
- for a synthetic prod-like environment with N GPU node pools, the ratio of the full
  preview of both layers (mocks, charts expanded, policy pack, API-server checks, reports)
  to the bare cost of registering the same resources under plain Pulumi mocks (the cloud
  program, then the cluster program reading its outputs, the charts' objects included, as
  the provider registers them).

    .venv/bin/python bench/preview.py [--repeat 3] [--pools 1,10,25,50,100] [--stacks dev,staging,prod,smb]
    .venv/bin/python bench/preview.py --smoke [--output FILE]   # dev, 1 pool, no cold preview (bench/options.py)

What runs is the real program and the real policy pack process on Pulumi's mocks, with
the real Helm engine; no engine or cluster. Targets: ratio <= 1.3 at every N; prod preview
(both layers) warm < 6 s, cold < 15 s (2 cores). The cold preview is prod's, or the first of
--stacks without prod. Results go to bench/results/preview.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import options  # noqa: E402
from bench.machine import describe, finish, record  # noqa: E402

RESULTS = REPO / "bench" / "results" / "preview.json"
STACKS = ("dev", "staging", "prod", "smb")
MODES = ("device-plugin", "gpu-operator")


def synthetic_config(pools: int):
    """prod's config with its training pool repeated `pools` times."""
    from infra.config import PlatformConfig, load_stack

    prod = load_stack("prod")
    gpu = next(p for p in prod.node_pools if p.role == "gpu")
    others = [p for p in prod.node_pools if p.role != "gpu"]
    copies = [gpu.model_copy(update={"name": f"gpu-{i}"}) for i in range(pools)]
    data = prod.model_dump(by_alias=True)
    data["nodePools"] = [p.model_dump(by_alias=True) for p in others + copies]
    return PlatformConfig.model_validate(data)


CLUSTER_STACK = "prod-cluster"


def previewed_layer(stack: str):
    """A cluster layer's config as `mlplat preview` runs it: the platform's own images, which
    CI builds between the layers, stand in by the preview's digest (the layer refuses to run
    without them)."""
    from infra.config import ClusterLayerConfig, load_layer
    from infra.preview.engine import preview_platform_images

    layer = load_layer(stack)
    assert isinstance(layer, ClusterLayerConfig) and layer.cloud_stack
    if not layer.platform_images:
        layer = layer.model_copy(update={"platform_images": preview_platform_images()})
    return layer


def cluster_layer(outputs: dict) -> tuple:
    """prod-cluster's layer config and the StackReference answers its program reads."""
    layer = previewed_layer(CLUSTER_STACK)
    return layer, {layer.cloud_stack: outputs}


def bare_monitor(mocks):
    """Plain Pulumi mocks, plus what the Kubernetes provider does for a helm.v4.Chart:
    each rendered object registered as a resource (through the same mocks)."""
    from pulumi.runtime.mocks import MockMonitor, MockResourceArgs, _resolve_callbacks

    from infra.preview.charts import CHART_TYPE, ChartExpander
    from infra.preview.mocks import Registration

    class BareMonitor(MockMonitor):
        def __init__(self) -> None:
            super().__init__(mocks)
            self.registered: dict[str, Registration] = {}
            self.expander = ChartExpander(self.registered, self.make_urn, self.add)

        def add(self, reg: Registration) -> None:
            mocks.new_resource(MockResourceArgs(reg.type, reg.name, reg.inputs(mask_secrets=False), "", "", True))
            self.registered[reg.urn] = reg

        def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
            response = super().RegisterResource(request)
            if request.type == CHART_TYPE:
                chart = Registration(urn=response.urn, type=request.type, name=request.name, parent=request.parent,
                                     custom=False, provider_ref="", properties=request.object, dependencies=[],
                                     property_dependencies={}, protect=False, retain_on_delete=False,
                                     transforms=_resolve_callbacks(request.transforms))
                self.registered[chart.urn] = chart
                self.expander.on_register(chart)
            return response

        def count(self) -> int:
            return len(self.resources) + sum(1 for r in self.registered.values() if r.custom)

    return BareMonitor()


def bare(config) -> int:
    """Both layers' programs under plain mocks, the cluster layer reading the cloud layer's
    exports; the number of resources registered."""
    from infra.platform import build_platform
    from infra.preview.fixtures import RegionFixture
    from infra.preview.mocks import PreviewMocks, run_program, stack_exports

    mocks = PreviewMocks(RegionFixture(config.region))
    cloud = bare_monitor(mocks)
    run_program(lambda: build_platform(config), mocks, cloud, project="mlplat", stack="prod")
    layer, references = cluster_layer(stack_exports())
    mocks = PreviewMocks(RegionFixture(config.region), references)
    cluster = bare_monitor(mocks)
    run_program(lambda: build_platform(layer), mocks, cluster, project="mlplat", stack=CLUSTER_STACK)
    cluster.expander.finish()
    return cloud.count() + cluster.count()


def worker(mode: str, pools: int) -> dict:
    """Runs in a fresh process; times only the work, after the common imports."""
    config = synthetic_config(pools)
    if mode == "bare":
        started = time.perf_counter()
        resources = bare(config)
        return {"seconds": time.perf_counter() - started, "resources": resources}

    from infra.preview.engine import run_environment
    from infra.preview.report import write_json, write_manifests, write_markdown

    started = time.perf_counter()
    cloud, cluster = run_environment("prod", config=config)  # what `mlplat preview --env prod` runs
    with tempfile.TemporaryDirectory() as out:
        for result in (cloud, cluster):
            write_json(result, Path(out) / f"{result.stack}.json")
            write_markdown(result, Path(out) / f"{result.stack}.md")
            write_manifests(result, Path(out) / f"{result.stack}-m")
    return {"seconds": time.perf_counter() - started,
            "resources": len(cloud.registrations) + len(cluster.registrations),
            "mandatory": len(cloud.verdict.mandatory) + len(cluster.verdict.mandatory)}


def render_worker(stacks: tuple[str, ...] = STACKS) -> dict:
    """Every release of the cluster layers of `stacks` in both device-plugin modes, rendered as the
    preview renders them (the release inputs come from running both layers' programs under
    mocks, untimed)."""
    import copy

    from google.protobuf import json_format
    from pulumi.runtime.mocks import MockMonitor

    from infra.config import CLUSTER_SUFFIX
    from infra.platform import build_platform
    from infra.preview.charts import CHART_TYPE, chart_spec
    from infra.preview.engine import cloud_outputs
    from infra.preview.fixtures import RegionFixture
    from infra.preview.mocks import PreviewMocks, plain, run_program
    from infra.render import relevant_api_versions, render, served_api_versions

    specs = []
    for stack in stacks:
        outputs = cloud_outputs(stack)
        layer = previewed_layer(stack + CLUSTER_SUFFIX)
        for mode in MODES:
            references = {layer.cloud_stack: copy.deepcopy(outputs)}
            references[layer.cloud_stack]["clusterDescriptor"]["settings"]["addons"]["devicePluginMode"] = mode
            mocks = PreviewMocks(RegionFixture(layer.region), references)
            found = []

            class Charts(MockMonitor):
                def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
                    if request.type == CHART_TYPE:
                        found.append(chart_spec(plain(json_format.MessageToDict(request.object), False),
                                                request.name))
                    return super().RegisterResource(request)

            run_program(lambda: build_platform(layer), mocks, Charts(mocks), project="mlplat",
                        stack=stack + CLUSTER_SUFFIX)
            specs.append(found)
    started = time.perf_counter()
    objects = releases = 0
    for found in specs:
        served = served_api_versions(found)
        for spec in found:
            objects += len(render(spec, api_versions=relevant_api_versions(spec, served)).objects)
            releases += 1
    return {"seconds": time.perf_counter() - started, "releases": releases, "objects": objects}


def _fresh(args: list[str], cache: str | None = None) -> dict:
    env = {**os.environ, **({"XDG_CACHE_HOME": cache} if cache else {})}
    done = subprocess.run([sys.executable, __file__, *args], cwd=REPO, capture_output=True, text=True, check=True,
                          env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def stack_wall_time(environment: str, cache: str | None = None) -> float:
    """`mlplat preview --env`: both layers, every report written."""
    env = {**os.environ, **({"XDG_CACHE_HOME": cache} if cache else {})}
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "infra.cli", "preview", "--env", environment, "--quiet", "--out", out],
                       cwd=REPO, capture_output=True, check=True, env=env)
        return time.perf_counter() - started


def cold(measure, repeat: int) -> float:
    """The median of `repeat` runs, each with an empty render cache of its own."""
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache:
            times.append(measure(cache))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pools", default="1,10,25,50,100")
    parser.add_argument("--stacks", default=",".join(STACKS), help="the environments previewed and rendered")
    parser.add_argument("--worker", choices=["bare", "full", "render"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    # Smoke: dev (the smallest environment), one run of each kind, one synthetic size.
    args = options.parse(parser, {"repeat": 1, "pools": "1", "stacks": "dev"})
    stacks = tuple(args.stacks.split(","))
    if args.worker == "render":
        print(json.dumps(render_worker(stacks)))
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args.n)))
        return

    machine = record()
    print(f"Offline preview benchmark on {describe(machine)}, {date.today()}")
    print("Measured: the real program and policy pack process on Pulumi's mocks, the real Helm engine; "
          "no engine, no cluster.")
    cold_stack = "prod" if "prod" in stacks else stacks[0]
    # A smoke run's figures mean nothing, so it spares the run that fills the render cache,
    # and the cold preview (the costliest run; the cold rendering below takes the same
    # empty-cache path).
    if not args.smoke:
        stack_wall_time(cold_stack)  # fills the render cache
    times = {}
    print(f"\nmlplat preview --env (both layers), warm render cache (fresh process, median of {args.repeat}):")
    for stack in stacks:
        seconds = statistics.median(stack_wall_time(stack) for _ in range(args.repeat))
        times[stack] = round(seconds, 2)
        print(f"  {stack:8s} {seconds:6.2f} s")
    cold_times = {}
    if not args.smoke:
        seconds = cold(lambda cache: stack_wall_time(cold_stack, cache), args.repeat)
        cold_times[f"{cold_stack}_cold_s"] = round(seconds, 2)
        print(f"  {cold_stack}, cold render cache: {seconds:.2f} s")

    render = ["--worker", "render", "--stacks", ",".join(stacks)]
    render_cold = cold(lambda cache: _fresh(render, cache)["seconds"], args.repeat)
    warm = [_fresh(render) for _ in range(args.repeat)]
    render_warm = statistics.median(w["seconds"] for w in warm)
    print(f"\nRendering alone: {warm[0]['releases']} releases ({warm[0]['objects']} objects) of "
          f"{len(stacks)} cluster layers x {len(MODES)} modes: cold {render_cold:.2f} s, warm {render_warm:.2f} s")

    print(f"\nSynthetic prod, both layers: N GPU node pools (median of {args.repeat} fresh processes each)")
    print(f"  {'N':>4} {'resources':>9} {'bare s':>8} {'full s':>8} {'ratio':>6} {'full ms/res':>11}  pairs")
    rows = []
    for n in [int(x) for x in args.pools.split(",")]:
        bare, full = [], []
        for _ in range(args.repeat):  # alternately, so a drift in the machine's speed hits both
            bare.append(_fresh(["--worker", "bare", "--n", str(n)]))
            full.append(_fresh(["--worker", "full", "--n", str(n)]))
        bare_s = statistics.median(b["seconds"] for b in bare)
        full_s = statistics.median(f["seconds"] for f in full)
        resources = full[0]["resources"]
        ratios = [f["seconds"] / b["seconds"] for b, f in zip(bare, full)]  # each pair ran back to back
        row = {"pools": n, "resources": resources, "bare_resources": bare[0]["resources"], "bare_s": round(bare_s, 3),
               "full_s": round(full_s, 3), "ratio": round(full_s / bare_s, 3),
               "pair_ratios": [round(r, 2) for r in ratios],
               "full_ms_per_resource": round(1000 * full_s / resources, 2)}
        rows.append(row)
        print(f"  {n:>4} {resources:>9} {bare_s:>8.2f} {full_s:>8.2f} {row['ratio']:>6.2f} "
              f"{row['full_ms_per_resource']:>11.2f}  {' '.join(f'{r:.2f}' for r in ratios)}")
    worst = max(r["ratio"] for r in rows)
    machine = finish(machine)
    cold_figure = f", cold {cold_times[f'{cold_stack}_cold_s']:.2f} s (prod < 15 s)" if cold_times else ""
    print(f"\nworst ratio {worst:.2f} (target <= 1.3); {cold_stack} warm {times[cold_stack]:.2f} s "
          f"(target for prod < 6 s){cold_figure}; load {machine['load_before']} -> {machine['load_after']}")
    options.write(options.output(args, RESULTS), {
        "machine": describe(machine), "cpu": machine, "date": str(date.today()),
        "measured": "real program and policy pack on Pulumi's mocks, real Helm engine; no engine or cluster",
        "stacks_s": times, **cold_times,
        "render": {"releases": warm[0]["releases"], "objects": warm[0]["objects"], "cold_s": round(render_cold, 2),
                   "warm_s": round(render_warm, 2)},
        "synthetic": rows,
    })


if __name__ == "__main__":
    main()
