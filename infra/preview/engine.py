"""The offline preview engine behind `mlplat preview`."""

from __future__ import annotations

import importlib.util
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.checks.admission import refusals
from infra.config import (
    CLUSTER_SUFFIX,
    CUSTOMER_ENVIRONMENTS,
    PROJECT,
    REPO_ROOT,
    ClusterLayerConfig,
    ConfigError,
    LayerConfig,
    load_layer,
    load_stack,
)
from infra.preview.charts import CHART_TYPE, ChartExpander
from infra.preview.analyzer import PACK_DIR, PolicyPackProcess, StreamingAnalysis, load_policy_config
from infra.preview.fixtures import RegionFixture
from infra.preview.mocks import PreviewMocks, RecordingMonitor, Registration, run_program, stack_exports
from infra.preview.report import PreviewResult
from infra.versions import IMAGES, UNBUILT

Program = Callable[[LayerConfig], Any]
Progress = Callable[[str], None]


def environment_of(stack: str) -> str:
    """`prod-cluster` -> `prod`: both layers of an environment share its policy config."""
    return stack.removesuffix(CLUSTER_SUFFIX)


def policy_config_path(stack: str) -> Path:
    return REPO_ROOT / "policies" / "config" / f"{environment_of(stack)}.json"


def cloud_outputs(cloud_stack: str) -> dict[str, Any]:
    """The stack outputs a cloud layer's program exports, run under mocks (no pack, no
    reports): what a cluster layer's StackReference reads in the offline preview."""
    from infra.platform import build_platform

    stack = cloud_stack.rsplit("/", 1)[-1]  # `<organization>/mlplat/prod` names stack prod
    config = load_stack(stack)
    mocks = PreviewMocks(RegionFixture(config.region))
    run_program(lambda: build_platform(config), mocks, RecordingMonitor(mocks), project=PROJECT, stack=stack)
    return stack_exports()


def preview_platform_images() -> dict[str, str]:
    """The platform's own images as the offline preview references them: CI builds them
    between the layers, so the preview stands in a digest no build produces."""
    return {name: UNBUILT for name, image in IMAGES.items() if image.built_here}


def load_program(path: Path) -> Program:
    """A fixture program: a Python file with `def program(config)`."""
    spec = importlib.util.spec_from_file_location(f"_mlplat_program_{path.stem}", path)
    if spec is None or spec.loader is None or not path.exists():
        raise ConfigError(f"{path}: no such program file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "program", None)):
        raise ConfigError(f"{path}: defines no `program(config)` function")
    return module.program


def engine_errors(monitor: RecordingMonitor) -> list[str]:
    """What the real engine would refuse that mocks let through."""
    errors = [f"duplicate URN {urn}: the engine registers each URN once" for urn in monitor.duplicates]
    for reg in monitor.registrations.values():
        if reg.custom and not reg.is_provider and _package(reg.type) and not reg.provider_ref:
            errors.append(
                f"{reg.urn} uses a default {_package(reg.type)} provider, which the stack disables; "
                "pass the explicit provider"
            )
    return errors


def kubernetes_objects(registrations: list[Registration]) -> list[tuple[str, dict]]:
    """(owner, object) for every Kubernetes object, ours and the charts', as it will be
    applied; the owner is `release <name>` or `program`."""
    charts = {r.urn: r.name for r in registrations if r.type == CHART_TYPE}
    objects = []
    for reg in registrations:
        if reg.custom and reg.type.startswith("kubernetes:") and not reg.is_provider:
            body = reg.inputs(mask_secrets=False)
            if "kind" in body:
                owner = f"release {charts[reg.parent]}" if reg.parent in charts else "program"
                objects.append((owner, body))
    return objects


def kubernetes_refusals(registrations: list[Registration]) -> list[str]:
    """What the API server would refuse among the Kubernetes objects (infra/checks/admission.py),
    each line naming its release or `program`."""
    return [f"the API server would refuse {line}" for line in refusals(kubernetes_objects(registrations))]


def _package(resource_type: str) -> str:
    return resource_type.split(":", 1)[0] if not resource_type.startswith("pulumi:") else ""


def run_preview(
    stack: str,
    *,
    program: Program | None = None,
    config: LayerConfig | None = None,
    stack_references: dict[str, dict[str, Any]] | None = None,
    fixture: RegionFixture | None = None,
    policy_config: Path | None = None,
    pack_dir: Path = PACK_DIR,
    pack: PolicyPackProcess | None = None,
    progress: Progress = lambda _msg: None,
) -> PreviewResult:
    """One stack's offline preview. A cluster layer's StackReference reads
    `stack_references` (stack name -> outputs), or the outputs of its cloud layer's program
    run under mocks first. `pack`: a running policy pack to analyze with (the caller closes
    it); otherwise one is started from `pack_dir` and closed here."""
    started = time.perf_counter()
    if config is None:
        progress(f"reading stacks/Pulumi.{stack}.yaml")
        config = load_layer(stack)
    if isinstance(config, ClusterLayerConfig) and not config.platform_images:
        progress(f"platform images are not built in a preview: referenced as {UNBUILT[:20]}...")
        config = config.model_copy(update={"platform_images": preview_platform_images()})
    if isinstance(config, ClusterLayerConfig) and config.cloud_stack and stack_references is None:
        progress(f"running the cloud layer {config.cloud_stack} under mocks for its descriptor")
        stack_references = {config.cloud_stack: cloud_outputs(config.cloud_stack)}
    policy_file = policy_config if policy_config is not None else policy_config_path(stack)
    pack_settings = load_policy_config(policy_file)
    if program is None:
        from infra.platform import build_platform

        program = build_platform

    own_pack = pack is None
    if pack is None:
        # Start the pack first: its start-up overlaps with the program's run.
        progress(f"starting the policy pack (python -m pulumi.policy), config {_display(policy_file)}")
        pack = PolicyPackProcess(pack_dir)
    analysis: StreamingAnalysis | None = None
    try:
        providers: dict[str, Registration] = {}

        def configure() -> list:
            policies = pack.info()
            pack.configure(policies, pack_settings, _display(policy_file))
            return policies

        analysis = StreamingAnalysis(pack, providers, configure)

        def on_register(reg: Registration) -> None:
            if reg.is_provider:
                providers[reg.urn] = reg
            analysis.submit(reg)
            expander.on_register(reg)  # a helm.v4.Chart: its objects, as the provider registers them

        mocks = PreviewMocks(fixture or RegionFixture(config.region), stack_references)
        monitor = RecordingMonitor(mocks, on_register=on_register)
        expander = ChartExpander(monitor.registrations, monitor.make_urn, monitor.add)
        progress("running the program under mocks, rendering its Helm charts")
        run_program(lambda: program(config), mocks, monitor, project=PROJECT, stack=stack)
        exports = stack_exports()
        renders = expander.finish()
        registrations = list(monitor.registrations.values())
        progress(f"analyzing {len(registrations)} resources")
        # The API server's rules run while this thread mostly waits on the pack's answers.
        with ThreadPoolExecutor(max_workers=1) as pool:
            refused = pool.submit(kubernetes_refusals, registrations)
            verdict = analysis.finish(registrations)
            refusal_lines = refused.result()
    finally:
        try:
            if analysis is not None:
                analysis.close()
        finally:
            if own_pack:
                pack.close()  # whatever happened above: never leave the pack process running
    return PreviewResult(
        stack=stack,
        region=config.region,
        registrations=registrations,
        verdict=verdict,
        engine_errors=engine_errors(monitor) + refusal_lines,
        component_outputs=dict(monitor.outputs),
        stack_outputs=exports,
        charts=renders,
        seconds=time.perf_counter() - started,
    )


def environment_stacks(environment: str) -> list[str]:
    """The stacks of an environment, in the order they apply: its cloud layer and its
    cluster layer, or, on a customer's own cluster, its one cluster-layer stack."""
    if environment in CUSTOMER_ENVIRONMENTS:
        return [environment]
    return [environment, f"{environment}{CLUSTER_SUFFIX}"]


def run_environment(environment: str, config: LayerConfig | None = None,
                    progress: Progress = lambda _msg: None) -> list[PreviewResult]:
    """Both layers of an environment: the cloud layer's preview (of `config`, or its stack
    file), then the cluster layer's with its StackReference answered from the cloud layer's
    outputs (as `pulumi up` of the cloud layer and then of the cluster layer would).

    Both layers share one policy config, so they share one pack process: each layer is
    still its own Analyze and AnalyzeStack session, as each `pulumi up` would be, and the
    second start-up is saved. A customer's environment (onprem) is one stack, a cluster
    layer whose descriptor is in its own stack file: it is previewed alone."""
    if environment_stacks(environment) == [environment]:
        return [run_preview(environment, config=config, progress=progress)]
    stack = f"{environment}{CLUSTER_SUFFIX}"
    cluster_config = load_layer(stack)
    if not isinstance(cluster_config, ClusterLayerConfig) or cluster_config.cloud_stack is None:
        raise ConfigError(f"stacks/Pulumi.{stack}.yaml: not a cluster layer that reads the cloud layer "
                          f"{environment} (mlplat:layer: cluster, mlplat:cloudStack: {environment})")
    if cluster_config.cloud_stack.rsplit("/", 1)[-1] != environment:
        raise ConfigError(f"stacks/Pulumi.{stack}.yaml: mlplat:cloudStack: {cluster_config.cloud_stack!r} is not "
                          f"the environment's cloud layer {environment!r}")
    progress(f"starting the policy pack (python -m pulumi.policy), config "
             f"{_display(policy_config_path(environment))}")
    pack = PolicyPackProcess(PACK_DIR)
    try:
        cloud = run_preview(environment, config=config, pack=pack, progress=progress)
        cluster = run_preview(stack, config=cluster_config, pack=pack, progress=progress,
                              stack_references={cluster_config.cloud_stack: cloud.stack_outputs})
    finally:
        pack.close()
    return [cloud, cluster]


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
