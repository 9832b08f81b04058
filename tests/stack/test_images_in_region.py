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
from infra.versions import IMAGES, registry_host
from tests.conftest import DESCRIPTOR, STACKS, both_layers, preview

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
    if parts.get("digest"):
        return f"{ref}@{parts['digest']}"
    return f"{ref}:{tag}" if tag else ref


def image_references(value: Any, path: str = "", key: str = "") -> Iterator[tuple[str, str]]:
    """(where, reference) for every image reference inside `value`."""
    if isinstance(value, dict):
        split = isinstance(value.get("repository"), str) and (
            IMAGE_KEY.search(key) or isinstance(value.get("image"), str))
        if split:
            yield path, _compose(value)
        for child_key, child in value.items():
            if split and child_key in ("repository", "image", "registry", "tag", "version", "digest"):
                continue
            yield from image_references(child, f"{path}.{child_key}" if path else str(child_key), str(child_key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from image_references(child, f"{path}[{index}]", key)
    elif isinstance(value, str) and value:
        if IMAGE_KEY.search(key) or IMAGE_REF.match(value):
            yield path, value


def out_of_plan(references: list[tuple[str, str]], account: str, region: str) -> list[str]:
    """Every reference that is not `<account>.dkr.ecr.<region>.amazonaws.com/<plan repo>:<plan tag>`."""
    host = registry_host(account, region)
    allowed = {f"{host}/{image.repository}:{image.tag}" for image in IMAGES.values()}
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


def test_walker_flags_other_regions_accounts_and_unplanned_tags():
    kueue = IMAGES["kueue"]
    refs = [
        ("ok", f"{HOST}/{kueue.repository}:{kueue.tag}"),
        ("region", f"{registry_host(ACCOUNT_ID, 'us-west-2')}/{kueue.repository}:{kueue.tag}"),
        ("account", f"{registry_host('999999999999', 'me-central-1')}/{kueue.repository}:{kueue.tag}"),
        ("tag", f"{HOST}/{kueue.repository}:latest"),
        ("upstream", f"{kueue.source}:{kueue.tag}"),
    ]
    assert [line.split(":", 1)[0] for line in out_of_plan(refs, ACCOUNT_ID, "me-central-1")] == [
        "region", "account", "tag", "upstream"]


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
    assert set(out_of_plan(stack_references(cloud), ACCOUNT_ID, cloud.region)) == curated
    refs = stack_references(cluster)
    assert runs_pods(cluster)
    assert refs, "the stack runs pods but no image reference was found in what it declares"
    assert out_of_plan(refs, ACCOUNT_ID, cluster.region) == []


@pytest.mark.parametrize("environment", STACKS)
def test_every_referenced_repository_exists_in_the_stack(environment):
    cloud, cluster = both_layers(environment)
    host = registry_host(ACCOUNT_ID, cluster.region)
    assert cloud.stack_outputs[DESCRIPTOR]["registryHost"] == host
    created = {r.inputs()["name"] for r in cloud.registrations if r.type == "aws:ecr/repository:Repository"}
    assert created == {image.repository for image in IMAGES.values()}
    assert [r.urn for r in cluster.registrations if r.type == "aws:ecr/repository:Repository"] == []
    for _, ref in stack_references(cluster):
        repository = ref.removeprefix(f"{host}/").rsplit(":", 1)[0]
        assert repository in created, ref

