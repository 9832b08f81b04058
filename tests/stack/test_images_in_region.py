"""No pod pulls from outside the stack's region: every image reference the program
declares, in any resource's inputs (Kubernetes objects, Helm release values, anything
else), is an ECR URI of the stack's account and region, from the registry plan, whose
repository the environment's cloud layer creates. Pods run only in the cluster layer; the
cloud layer's one image outside the plan is the deploy runner's CodeBuild-curated build
image (components/specs/deploy_runner.py), which CodeBuild itself serves in-region."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from components.specs import deploy_runner
from infra.preview.fixtures import ACCOUNT_ID
from infra.preview.report import awaiting_pin
from infra.versions import CHARTS, IMAGES, UNBUILT, plan_charts, plan_images, registry_host, unpinned
from tests.conftest import DESCRIPTOR, STACKS, both_layers

# `image`, `initImage`, `configReloaderImage`, ...
IMAGE_KEY = re.compile(r"(^i|I)mage$")
# host.with.dots[:port]/path[:tag][@sha256:digest], with a tag or a digest: how an image
# reference looks wherever it hides (env values, args, annotations).
IMAGE_REF = re.compile(
    r"^[a-z0-9-]+(\.[a-z0-9-]+)+(:\d+)?/[a-z0-9._/-]+(:[\w.-]+(@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})$"
)
# Objects that run pods (their images live in the pod template).
POD_KINDS = {"Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob", "JobSet"}
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def _compose(parts: dict) -> str:
    """Helm charts split references: {registry, repository, tag} or, in the GPU Operator,
    {repository, image, version}."""
    ref = str(parts["repository"])
    if isinstance(parts.get("image"), str):
        ref = f"{ref}/{parts['image']}"
    if parts.get("registry"):
        ref = f"{parts['registry']}/{ref}"
    tag = parts.get("tag") or parts.get("version")
    ref = f"{ref}:{tag}" if tag else ref
    digest = str(parts.get("digest") or parts.get("sha") or "")  # kube-prometheus-stack: `sha` without sha256:
    if digest:
        return f"{ref}@{digest if digest.startswith('sha256:') else 'sha256:' + digest}"
    return ref


def image_references(value: Any, path: str = "", key: str = "") -> Iterator[tuple[str, str]]:
    """(where, reference) for every image reference inside `value`."""
    if isinstance(value, dict):
        split = isinstance(value.get("repository"), str) and (
            IMAGE_KEY.search(key) or isinstance(value.get("image"), str))
        if split:
            yield path, _compose(value)
        for child_key, child in value.items():
            if split and child_key in ("repository", "image", "registry", "tag", "version", "digest", "sha"):
                continue
            yield from image_references(child, f"{path}.{child_key}" if path else str(child_key), str(child_key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from image_references(child, f"{path}[{index}]", key)
    elif isinstance(value, str) and value:
        if IMAGE_KEY.search(key) or IMAGE_REF.match(value):
            yield path, value


def out_of_plan(references: list[tuple[str, str]], account: str, region: str, environment: str) -> list[str]:
    """Every reference that is not `<account>.dkr.ecr.<region>.amazonaws.com/mlplat/<env>/<plan
    repo>:<plan tag>@<pin>` (the platform's own images at the preview's stand-in build)."""
    host = registry_host(account, region)
    allowed = {f"{host}/{image.repository(environment)}:{UNBUILT if image.built_here else image.tag}"
               + (f"@{image.digest}" if image.digest else "") for image in IMAGES.values()}
    return [f"{where}: {ref}" for where, ref in references if ref not in allowed]


def stack_references(result) -> list[tuple[str, str]]:
    refs = []
    for reg in result.registrations:
        if reg.custom and not reg.is_provider:
            refs += [(f"{reg.urn}::{where}", ref) for where, ref in image_references(reg.inputs())]
    return refs


def runs_pods(result) -> bool:
    return any(r.type == HELM_RELEASE or (r.type.startswith("kubernetes:") and r.inputs().get("kind") in POD_KINDS)
               for r in result.registrations)


# --- the walker itself -----------------------------------------------------------------

HOST = registry_host(ACCOUNT_ID, "me-central-1")


def test_walker_finds_every_shape_of_reference():
    values = {
        "image": {"repository": f"{HOST}/mlplat/mirror/kueue", "tag": IMAGES["kueue"].tag},
        "prometheus": {"prometheusSpec": {"image": {"registry": "quay.io", "repository": "prometheus/prometheus",
                                                    "tag": "v3.13.0"}}},
        "operator": {"repository": "nvcr.io/nvidia", "image": "gpu-operator", "version": "v26.3.3"},
        "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/pytorch:26.01-py3",
                                 "env": [{"name": "SIDECAR", "value": "public.ecr.aws/eks/x:v1"}]}]},
        "configReloaderImage": "ghcr.io/example/reloader:1.0",
        "labels": {"nvidia.com/gpu.present": "true", "endpoint": "https://nvidia.github.io/k8s-device-plugin"},
    }
    found = dict((ref, where) for where, ref in image_references(values))
    assert set(found) == {
        f"{HOST}/mlplat/mirror/kueue:{IMAGES['kueue'].tag}", "quay.io/prometheus/prometheus:v3.13.0",
        "nvcr.io/nvidia/gpu-operator:v26.3.3", "nvcr.io/nvidia/pytorch:26.01-py3", "public.ecr.aws/eks/x:v1",
        "ghcr.io/example/reloader:1.0",
    }
    assert found["public.ecr.aws/eks/x:v1"] == "spec.containers[0].env[0].value"


def test_walker_flags_other_regions_accounts_environments_tags_and_digests():
    kueue = IMAGES["kueue"]
    repository = kueue.repository("prod")
    refs = [
        ("ok", f"{HOST}/{repository}:{kueue.tag}@{kueue.digest}"),
        ("region", f"{registry_host(ACCOUNT_ID, 'us-west-2')}/{repository}:{kueue.tag}@{kueue.digest}"),
        ("account", f"{registry_host('999999999999', 'me-central-1')}/{repository}:{kueue.tag}@{kueue.digest}"),
        ("environment", f"{HOST}/{kueue.repository('dev')}:{kueue.tag}@{kueue.digest}"),
        ("tag", f"{HOST}/{repository}:latest"),
        ("tag-alone", f"{HOST}/{repository}:{kueue.tag}"),
        ("digest", f"{HOST}/{repository}:{kueue.tag}@sha256:{'0' * 64}"),
        ("upstream", f"{kueue.source}:{kueue.tag}"),
    ]
    assert [line.split(":", 1)[0] for line in out_of_plan(refs, ACCOUNT_ID, "me-central-1", "prod")] == [
        "region", "account", "environment", "tag", "tag-alone", "digest", "upstream"]


# --- every stack, both layers ------------------------------------------------------------

CODEBUILD_PROJECT = "aws:codebuild/project:Project"


def codebuild_curated(result) -> set[str]:
    """Where the cloud layer names the deploy runner's build image: only the CodeBuild
    project's `environment.image`, only the curated image the spec pins, pulled with
    CodeBuild's own credentials."""
    allowed = set()
    for reg in result.registrations:
        if reg.type == CODEBUILD_PROJECT:
            environment = reg.inputs()["environment"]
            assert environment["image"] == deploy_runner.IMAGE
            assert environment["imagePullCredentialsType"] == "CODEBUILD"
            assert deploy_runner.IMAGE.startswith("aws/codebuild/")
            allowed.add(f"{reg.urn}::environment.image: {deploy_runner.IMAGE}")
    return allowed


@pytest.mark.parametrize("environment", STACKS)
def test_every_image_is_an_in_region_mirror_from_the_plan(environment):
    cloud, cluster = both_layers(environment)
    assert not runs_pods(cloud), "the cloud layer declares Kubernetes workloads"
    curated = codebuild_curated(cloud)
    assert len(curated) == 1, "the deploy runner's build image"
    assert set(out_of_plan(stack_references(cloud), ACCOUNT_ID, cloud.region, environment)) == curated
    refs = stack_references(cluster)
    assert runs_pods(cluster)
    assert refs, "the stack runs pods but no image reference was found in what it declares"
    assert out_of_plan(refs, ACCOUNT_ID, cluster.region, environment) == []


@pytest.mark.parametrize("environment", STACKS)
def test_no_image_is_referenced_by_tag_alone_but_the_mirrors_awaiting_their_pin(environment):
    """What the cluster layer declares and what its charts render, as it will be applied
    (tests/conftest.py `preview` expands every chart): by digest, except the mirrors the
    plan has not pinned yet, which `pulumi up` and `mlplat mirror` refuse."""
    _, cluster = both_layers(environment)
    awaiting = {f"{registry_host(ACCOUNT_ID, cluster.region)}/{IMAGES[name].repository(environment)}"
                for kind, name in (entry.split(" ", 1) for entry in unpinned()) if kind == "image"}
    tag_alone = {ref for _, ref in stack_references(cluster) if "@sha256:" not in ref}
    assert {ref.rsplit(":", 1)[0] for ref in tag_alone} <= awaiting, sorted(tag_alone)
    assert awaiting_pin(cluster) == sorted(tag_alone)  # what the preview's report lists
    charts = [r for r in cluster.registrations if r.type == "kubernetes:helm.sh/v4:Chart"]
    assert charts
    for chart in charts:
        assert chart.inputs()["chart"] == (f"oci://{registry_host(ACCOUNT_ID, cluster.region)}/"
                                           f"{CHARTS[chart.name].mirror_repository(environment)}")
        assert "repositoryOpts" not in chart.inputs()


@pytest.mark.parametrize("environment", STACKS)
def test_every_referenced_repository_exists_in_the_stack(environment):
    cloud, cluster = both_layers(environment)
    host = registry_host(ACCOUNT_ID, cluster.region)
    assert cloud.stack_outputs[DESCRIPTOR]["registryHost"] == host
    created = {r.inputs()["name"] for r in cloud.registrations if r.type == "aws:ecr/repository:Repository"}
    # The plan of what AWS runs: no copy of a customer's bare-metal driver builds or fabric.
    assert created == {image.repository(environment) for image in plan_images("aws").values()} | {
        chart.mirror_repository(environment) for chart in plan_charts("aws").values()}
    assert [r.urn for r in cluster.registrations if r.type == "aws:ecr/repository:Repository"] == []
    for _, ref in stack_references(cluster):
        repository = ref.removeprefix(f"{host}/").split("@")[0].rsplit(":", 1)[0]
        assert repository in created, ref

