"""`ImageRegistry` under mocks: one KMS-encrypted, immutable, scan-on-push repository with
a lifecycle policy per image and per chart of the registry plan, named for its environment."""

from __future__ import annotations

import json

import pytest

from components.registry import ImageRegistry, RegistryArgs
from components.registry_policy import lifecycle_policy
from infra.versions import CHARTS, IMAGES, Image, plan_charts, plan_images
from tests.component.recorder import opts, record

KEY = "arn:aws:kms:me-central-1:111122223333:key/images"
REPOSITORY = "aws:ecr/repository:Repository"
LIFECYCLE = "aws:ecr/lifecyclePolicy:LifecyclePolicy"


@pytest.fixture(scope="module")
def registry():
    return record(lambda provider: ImageRegistry(
        "registry", RegistryArgs(environment="prod", images=IMAGES, charts=CHARTS, kms_key_arn=KEY),
        opts=opts(provider)))


def test_one_repository_per_image_and_chart_of_the_environment(registry):
    names = sorted(r.inputs()["name"] for r in registry.of_type(REPOSITORY))
    assert names == sorted([image.repository("prod") for image in IMAGES.values()]
                           + [f"mlplat/prod/charts/{chart}" for chart in CHARTS])
    assert "mlplat/prod/mirror/aws-efa-k8s-device-plugin" in names and "mlplat/prod/training" in names
    # What `mlplat mirror` pushes to is what the registry creates.
    assert {f"mlplat/prod/charts/{c.name}" for c in CHARTS.values()} == {c.mirror_repository("prod")
                                                                          for c in CHARTS.values()}


def test_repositories_are_encrypted_immutable_scanned_and_protected(registry):
    for repo in registry.of_type(REPOSITORY):
        inputs = repo.inputs()
        assert inputs["encryptionConfigurations"] == [{"encryptionType": "KMS", "kmsKey": KEY}]
        assert inputs["imageTagMutability"] == "IMMUTABLE"
        assert inputs["imageScanningConfiguration"] == {"scanOnPush": True}
        assert inputs["forceDelete"] is False
        assert repo.protect is True


def test_each_repository_has_the_lifecycle_policy(registry):
    policies = {r.name: r for r in registry.of_type(LIFECYCLE)}
    assert len(policies) == len(IMAGES) + len(CHARTS)
    for repo in registry.of_type(REPOSITORY):
        policy = policies[repo.name]
        assert json.loads(policy.inputs()["policy"]) == lifecycle_policy()
        assert policy.property_dependencies["repository"] == [repo.urn]


def test_children_are_parented_and_on_the_provider(registry):
    component = registry.one("mlplat:registry:ImageRegistry")
    [provider] = registry.of_type("pulumi:providers:aws")
    custom = [r for r in registry.registrations if r.custom and not r.is_provider]
    assert len(custom) == 2 * (len(IMAGES) + len(CHARTS))
    assert all(r.parent == component.urn and r.provider_urn == provider.urn for r in custom)


def test_force_delete_only_when_asked_and_then_unprotected():
    images = {"kueue": Image("kueue", "registry.k8s.io/kueue/kueue", "v1")}
    throwaway = record(lambda provider: ImageRegistry(
        "registry", RegistryArgs(environment="dev", images=images, charts={}, kms_key_arn=KEY, force_delete=True),
        opts=opts(provider)))
    [repo] = throwaway.of_type(REPOSITORY)
    assert repo.inputs()["forceDelete"] is True and repo.protect is False


def test_stack_registry_urls_are_in_region(prod_preview):
    repos = [r for r in prod_preview.registrations if r.type == REPOSITORY]
    # The plan of what AWS runs (a customer's bare-metal driver builds and fabric are not in it).
    assert len(repos) == len(plan_images("aws")) + len(plan_charts("aws"))
    for repo in repos:
        [key] = repo.property_dependencies["encryptionConfigurations"]
        assert key.endswith("::keys-images")
