"""Every real stack, of both layers, previews offline with zero mandatory violations;
every AWS resource (all in the cloud layer) is on the explicit region-pinned provider, and
the cluster layer declares no AWS resource at all."""

from __future__ import annotations

from collections import Counter

from infra.catalog import lookup
from infra.config import load_stack
from tests.helpers import of_type


def test_zero_mandatory_violations(stack_preview):
    assert stack_preview.engine_errors == []
    assert [v.message for v in stack_preview.verdict.mandatory] == []
    assert stack_preview.exit_code == 0


def test_cluster_layer_zero_mandatory_violations(cluster_stack_preview):
    assert cluster_stack_preview.engine_errors == []
    assert [v.message for v in cluster_stack_preview.verdict.mandatory] == []
    assert cluster_stack_preview.exit_code == 0


def test_cluster_layer_declares_no_aws_resource(cluster_stack_preview):
    assert [r.urn for r in cluster_stack_preview.registrations
            if r.type.startswith("aws:") or r.type == "pulumi:providers:aws"] == []
    assert of_type(cluster_stack_preview, "pulumi:providers:kubernetes")


def test_every_aws_resource_uses_the_explicit_provider(stack_preview):
    [provider] = of_type(stack_preview, "pulumi:providers:aws")
    assert provider.inputs()["region"] == "me-central-1"
    aws_resources = [r for r in stack_preview.registrations if r.custom and r.type.startswith("aws:")]
    assert aws_resources
    for reg in aws_resources:
        assert reg.provider_urn == provider.urn, f"{reg.urn} uses {reg.provider_ref or 'a default provider'}"
        assert "default_" not in reg.provider_ref


def test_provider_carries_default_tags(stack_preview):
    import json

    [provider] = of_type(stack_preview, "pulumi:providers:aws")
    tags = json.loads(provider.inputs()["defaultTags"])["tags"]
    assert {"environment", "owner", "data-classification", "cost-center"} <= tags.keys()
    assert tags["environment"] == stack_preview.stack


def test_urns_are_unique(stack_preview):
    counts = Counter(r.urn for r in stack_preview.registrations)
    assert [u for u, n in counts.items() if n > 1] == []


def test_cluster_layer_urns_are_unique(cluster_stack_preview):
    counts = Counter(r.urn for r in cluster_stack_preview.registrations)
    assert [u for u, n in counts.items() if n > 1] == []


def test_no_launch_template_names_a_public_ip_beside_a_second_interface(stack_preview):
    """EC2 refuses associatePublicIpAddress, even "false", on a launch with more than one
    network interface: every multi-interface template (the EFA pools') leaves it out."""
    templates = of_type(stack_preview, "aws:ec2/launchTemplate:LaunchTemplate")
    multi = [t for t in templates if len(t.inputs().get("networkInterfaces") or []) > 1]
    if any(pool.role in ("gpu", "inference") for pool in load_stack(stack_preview.stack).node_pools
           if lookup(pool.instance_type).has_efa):
        assert multi  # the EFA pools' templates are what this is about
    for template in multi:
        named = [i for i, nic in enumerate(template.inputs()["networkInterfaces"]) if "associatePublicIpAddress" in nic]
        assert named == [], f"{template.name}: interfaces {named} set associatePublicIpAddress"
