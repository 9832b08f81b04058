"""The cluster layer on its own: from a descriptor in its stack config (a cluster the
customer runs, no cloud layer), and refused with one line, before anything is
registered, when its descriptor lacks a field or describes another environment or region."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError, load_layer
from infra.preview.engine import run_preview
from tests.conftest import DESCRIPTOR, preview

MLPLAT = [sys.executable, "-m", "infra.cli"]


def _descriptor(environment: str = "prod") -> dict:
    return copy.deepcopy(preview(environment).stack_outputs[DESCRIPTOR])


def _stack_file(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": {"pulumi:disable-default-providers": ["*"], **config}}))
    return tmp_path


def test_a_cluster_layer_with_its_descriptor_in_config_previews_clean(tmp_path):
    stacks = _stack_file(tmp_path, "prod-cluster", {
        "mlplat:layer": "cluster", "mlplat:environment": "prod", "mlplat:region": "me-central-1",
        "mlplat:descriptor": _descriptor()})
    result = run_preview("prod-cluster", config=load_layer("prod-cluster", stacks))
    assert result.exit_code == 0, result.engine_errors
    assert not [r for r in result.registrations if r.type.startswith("aws:") or r.type == "pulumi:pulumi:StackReference"]
    # The same objects as the layer that reads the cloud layer's output.
    assert sorted(r.urn for r in result.registrations) == sorted(r.urn for r in preview("prod-cluster").registrations)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("endpoint"), "cluster layer prod-cluster: StackReference prod lacks `endpoint`; re-run the cloud "
                                  "layer's `pulumi up` so it exports it, or set it in the descriptor"),
    (lambda d: d.pop("settings"), "cluster layer prod-cluster: StackReference prod lacks `settings`; re-run the cloud "
                                  "layer's `pulumi up` so it exports it, or set it in the descriptor"),
    (lambda d: d.update(environment="staging"), "cluster layer prod-cluster: StackReference prod describes "
                                                "environment 'staging', but this layer is 'prod'; point it at the "
                                                "cloud layer of its own environment"),
    (lambda d: d.update(region="me-south-1"), "cluster layer prod-cluster: StackReference prod describes region "
                                              "me-south-1, but this layer deploys to me-central-1; point it at the "
                                              "cloud layer of its own region"),
])
def test_a_bad_descriptor_is_one_line_and_nothing_is_registered(change, message):
    outputs = copy.deepcopy(preview("prod").stack_outputs)
    change(outputs[DESCRIPTOR])
    with pytest.raises(ConfigError) as raised:
        run_preview("prod-cluster", stack_references={"prod": outputs})
    assert str(raised.value) == message


def test_a_cloud_layer_never_deployed_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"^cluster layer prod-cluster: StackReference prod has no "
                                          r"`clusterDescriptor` output; run the cloud layer's `pulumi up --stack prod` first$"):
        run_preview("prod-cluster", stack_references={"prod": {}})


def test_the_command_exits_2_with_one_line(tmp_path):
    descriptor = _descriptor()
    del descriptor["registryHost"]
    stacks = _stack_file(tmp_path, "prod-cluster", {
        "mlplat:layer": "cluster", "mlplat:environment": "prod", "mlplat:region": "me-central-1",
        "mlplat:descriptor": descriptor})
    done = subprocess.run([*MLPLAT, "preview", "--stack", "prod-cluster", "--stacks-dir", str(stacks), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "mlplat: error: cluster layer prod-cluster: mlplat:descriptor lacks `registryHost`; re-run the cloud layer's "
        "`pulumi up` so it exports it, or set it in the descriptor")


def test_a_cluster_layer_names_one_descriptor_source(tmp_path):
    stacks = _stack_file(tmp_path, "prod-cluster", {
        "mlplat:layer": "cluster", "mlplat:environment": "prod", "mlplat:region": "me-central-1"})
    with pytest.raises(ConfigError, match="mlplat:cloudStack: set exactly one of cloudStack"):
        load_layer("prod-cluster", stacks)
