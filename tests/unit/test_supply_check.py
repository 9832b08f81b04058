"""The cluster layer refuses, before anything is registered, to update with an image that
is not referenced by digest: a mirror the plan has not pinned, or a platform image CI has
not recorded. A preview names the unpinned mirrors by tag instead."""

from __future__ import annotations

import pytest

from infra import cluster_layer
from infra.config import ClusterLayerConfig, ConfigError
from infra.versions import UNBUILT, unpinned

BUILT = {"training": UNBUILT, "serving": UNBUILT, "checks": UNBUILT, "tracking": UNBUILT, "features": UNBUILT,
         "rollouts-gatewayapi-plugin": UNBUILT, "pipelines": UNBUILT}


def layer(**platform_images: str) -> ClusterLayerConfig:
    return ClusterLayerConfig(layer="cluster", environment="prod", region="me-central-1", cloud_stack="prod",
                              platform_images=platform_images)


def test_an_update_refuses_mirrors_without_a_digest(monkeypatch):
    monkeypatch.setattr(cluster_layer.pulumi.runtime, "is_dry_run", lambda: False)
    assert unpinned(), "every mirror is pinned: this test has nothing left to refuse"
    with pytest.raises(ConfigError) as refused:
        cluster_layer.check_supply(layer(**BUILT), "prod-cluster")
    assert str(refused.value).startswith(f"cluster layer prod-cluster: {unpinned()[0]}, ")
    assert "without a digest" in str(refused.value)


def test_a_preview_names_them_by_tag_but_still_needs_the_platform_images(monkeypatch):
    monkeypatch.setattr(cluster_layer.pulumi.runtime, "is_dry_run", lambda: True)
    cluster_layer.check_supply(layer(**BUILT), "prod-cluster")  # no error
    with pytest.raises(ConfigError, match=r"mlplat:platformImages lacks serving, checks, tracking, features, pipelines, rollouts-gatewayapi-plugin: the "
                                          r"digests CI records"):
        cluster_layer.check_supply(layer(training=UNBUILT), "prod-cluster")


def test_platform_images_are_tag_at_digest_of_a_known_image():
    with pytest.raises(ValueError, match="platform_images"):
        layer(training="0.1.0")  # a tag alone
    with pytest.raises(ValueError, match="not a platform image"):
        layer(triton=UNBUILT)
