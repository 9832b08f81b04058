"""The cluster descriptor each stack exports: what the Kubernetes half will read about the
cloud it runs in, checked against what the program creates, and refused with one line
when a field is missing or it describes another region or environment."""

from __future__ import annotations

import copy

import pytest

from infra.config import ConfigError
from infra.descriptor import OUTPUT, parse_descriptor
from infra.platform import DATA_CLASSES
from tests.conftest import STACKS, preview

SOURCE = "stack reference mlplat/prod, output clusterDescriptor"


def exported(stack: str) -> dict:
    return preview(stack).stack_outputs[OUTPUT]


def _inputs(result, type_: str) -> list[dict]:
    return [r.inputs(mask_secrets=False) for r in result.registrations if r.type == type_]


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_exports_a_complete_descriptor_of_what_it_creates(stack):
    result = preview(stack)
    descriptor = parse_descriptor(exported(stack), layer=f"{stack}-cluster", source=SOURCE, environment=stack,
                                  region=result.region)
    [cluster] = _inputs(result, "aws:eks/cluster:Cluster")
    assert descriptor.cluster_name == cluster["name"]
    assert descriptor.endpoint.startswith("https://") and descriptor.certificate_authority
    assert descriptor.buckets == {name: b["bucket"] for name, b in _buckets(result).items()}
    assert set(descriptor.keys) == set(DATA_CLASSES)
    assert all(arn.startswith(f"arn:aws:kms:{result.region}:{descriptor.account_id}:key/")
               for arn in descriptor.keys.values())
    assert descriptor.registry_host == f"{descriptor.account_id}.dkr.ecr.{result.region}.amazonaws.com"
    assert (descriptor.lustre is not None) == bool(_inputs(result, "aws:fsx/lustreFileSystem:LustreFileSystem"))


def _buckets(result) -> dict[str, dict]:
    return {r.name: r.inputs(mask_secrets=False) for r in result.registrations if r.type == "aws:s3/bucket:Bucket"}


def _refusal(data, **overrides) -> str:
    args = {"layer": "prod-cluster", "source": SOURCE, "environment": "prod", "region": "me-central-1", **overrides}
    with pytest.raises(ConfigError) as raised:
        parse_descriptor(data, **args)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_a_missing_field_is_one_line_naming_the_field_and_the_layer():
    data = copy.deepcopy(exported("prod"))
    del data["endpoint"]
    assert _refusal(data) == (f"cluster layer prod-cluster: {SOURCE} lacks `endpoint`; re-run the cloud layer's "
                              "`pulumi up` so it exports it, or set it in the descriptor")
    data = copy.deepcopy(exported("prod"))
    del data["lustre"]["dnsName"]
    assert "lacks `lustre.dnsName`" in _refusal(data)
    assert _refusal("mlplat-prod").endswith("expected the cloud layer's `clusterDescriptor` object, got str")


def test_a_descriptor_of_another_region_or_environment_is_refused():
    data = exported("prod")
    assert _refusal(data, region="eu-west-1") == (
        f"cluster layer prod-cluster: {SOURCE} describes region me-central-1, but this layer deploys to "
        "eu-west-1; point it at the cloud layer of its own region")
    assert _refusal(data, environment="staging") == (
        f"cluster layer prod-cluster: {SOURCE} describes environment 'prod', but this layer is 'staging'; "
        "point it at the cloud layer of its own environment")
    bad = {**copy.deepcopy(data), "endpoint": "http://10.0.0.1"}
    assert _refusal(bad).startswith(f"cluster layer prod-cluster: {SOURCE}: `endpoint`: String should match")


def test_a_field_a_newer_cloud_layer_adds_is_ignored():
    data = {**copy.deepcopy(exported("prod")), "oidcIssuer": "https://oidc.example"}
    assert parse_descriptor(data, layer="prod-cluster", source=SOURCE, environment="prod",
                            region="me-central-1").cluster_name == "mlplat-prod"
