"""The customer's descriptor (infra/descriptor.py) against hostile input: any value, and any
change to the onprem example's descriptor, is a descriptor or one ConfigError line, never
another exception; the policy config it is checked against is read bounded; numbers and
Kubernetes labels have their bounds."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import infra.descriptor as descriptor_module
from infra.catalog import CATALOG
from infra.config import ConfigError, load_layer
from infra.descriptor import CustomerClusterDescriptor, descriptor_config, parse_descriptor, policy_config
from tests.isolation import isolated

WHERE = "cluster layer onprem: mlplat:descriptor"
EXAMPLE = load_layer("onprem").descriptor
MAX_LINE = 650  # characters of an error line: values in it are quoted short


def read(data: Any) -> Any:
    """The descriptor and its settings, as the cluster layer reads a customer's
    (infra/cluster_layer.py read_descriptor). The node classes it registers are taken out
    of the catalog again, so no other test sees them."""
    saved = dict(CATALOG)
    try:
        descriptor = parse_descriptor(data, layer="onprem", source="mlplat:descriptor", environment="onprem",
                                      region="ae-auh-dc1")
        return descriptor, descriptor_config(descriptor, WHERE)
    finally:
        CATALOG.clear()
        CATALOG.update(saved)


def one_line(data: Any) -> str:
    """The refusal of `data`: one printable line of ConfigError (anything else fails)."""
    with pytest.raises(ConfigError) as raised:
        read(data)
    message = str(raised.value)
    assert message.isprintable() and len(message) <= MAX_LINE, message[:MAX_LINE + 50]
    return message


def changed(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(EXAMPLE)
    target = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return data


# --- numbers, labels, text --------------------------------------------------------------------

@pytest.mark.parametrize(("path", "value", "says"), [
    (("nodes", 0, "count"), 10**30, "`nodes[0].count`: Input should be less than or equal to 10000"),
    (("nodes", 1, "gpus"), 65, "`nodes[1].gpus`: Input should be less than or equal to 64"),
    (("nodes", 0, "cpus"), 10**6, "`nodes[0].cpus`: Input should be less than or equal to 4096"),
    (("nodes", 0, "memoryGiB"), 10**7, "`nodes[0].memoryGiB`: Input should be less than or equal to 65536"),
    (("storageClasses", "scratchGiB"), 10**9, "`storageClasses.scratchGiB`: Input should be less than or equal to "
                                              "1048576"),
    (("nodes", 1, "fabric", "portRateGbps"), 10**40, "`nodes[1].fabric.portRateGbps`: "),
    (("nodes", 0, "count"), float("nan"), "`nodes[0].count`: "),
    (("nodes", 1, "labels"), {"topology.mlplat.io/fabric": "a" * 64},
     "`nodes[1].labels`: topology.mlplat.io/fabric: its value is 64 characters; a Kubernetes label's value has at "
     "most 63"),
    (("nodes", 1, "labels"), {"x" * 64: "a"}, "is 64 characters; a Kubernetes label's name has at most 63"),
    (("nodes", 1, "labels"), {"fabric\nx": "a"}, "`nodes[1].labels`: 'fabric\\nx': 'a' is not a Kubernetes label"),
    (("nodes", 1, "labels"), {"topology.mlplat.io/fabric": "ib\x1b[31m"},
     "`nodes[1].labels`: topology.mlplat.io/fabric: 'ib\\x1b[31m' is not a Kubernetes label"),
    (("objectStorage", "buckets"), {"datasets": "d-bucket", "models": "m-bucket", "checkpoints": "c-bucket",
                                    "new\nline": "x\ny"}, "`objectStorage.buckets`: 'new\\nline': "),
    (("objectStorage", "encryptionAtRest"), "x" * 5000, None),  # long, printable: accepted
], ids=["count", "gpus", "cpus", "memory", "scratch", "port-rate", "count-nan", "label-value-long", "label-name-long",
        "label-key-newline", "label-value-escape", "bucket-key-newline", "long-text-accepted"])
def test_numbers_and_labels_are_bounded_in_one_line(path, value, says):
    data = changed(path, value)
    if says is None:
        read(data)
        return
    message = one_line(data)
    assert message.startswith(WHERE) and says in message, message


def test_the_largest_legal_numbers_and_labels_are_read():
    data = changed(("nodes", 0, "count"), 10000)
    data["nodes"][0].update(cpus=4096, memoryGiB=65536, instanceType="largest-cpu")
    data["storageClasses"]["scratchGiB"] = 1048576
    data["nodes"][1]["labels"] = {f"{'p' * 200}.example/{'n' * 63}": "v" * 63}
    data["nodes"][2].update(gpus=64, instanceType="largest-gpu")  # a class of its own: the catalog is global
    descriptor, _ = read(data)
    assert isinstance(descriptor, CustomerClusterDescriptor)
    assert descriptor.nodes[0].count == 10000 and descriptor.nodes[2].gpus == 64


def test_an_unknown_key_with_a_newline_is_quoted_on_one_line():
    data = changed(("objectStorage", "end\npoint"), "https://x")
    assert one_line(data) == f"{WHERE}: `objectStorage.'end\\npoint'`: unknown key; did you mean `endpoint`?"


def test_a_cloud_descriptors_region_is_quoted():
    with pytest.raises(ConfigError) as raised:
        parse_descriptor({"environment": "prod", "region": "me-central-1\n\x1b[2J", "accountId": "123456789012",
                          "clusterName": "c", "endpoint": "https://e", "certificateAuthority": "x",
                          "clusterSecurityGroupId": "sg", "vpcCidr": "10.0.0.0/16", "endpointCidrs": ["10.0.0.0/16"],
                          "registryHost": "r", "buckets": {"a": "b"}, "keys": {"a": "k"}, "settings": {"a": 1}},
                         layer="prod-cluster", source="mlplat:descriptor", environment="prod", region="me-central-1")
    assert str(raised.value).isprintable()
    assert "describes region 'me-central-1\\n\\x1b[2J', but this layer deploys to me-central-1" in str(raised.value)


# --- the policy config, read bounded ------------------------------------------------------------

@pytest.fixture
def policies(tmp_path, monkeypatch):
    """A repository root whose policies/config/onprem.json the test writes."""
    folder = tmp_path / "policies" / "config"
    folder.mkdir(parents=True)
    monkeypatch.setattr(descriptor_module, "REPO_ROOT", tmp_path)
    return folder / "onprem.json"


@pytest.mark.parametrize(("make", "says"), [
    (lambda p: os.mkfifo(p), "policies/config/onprem.json: cannot be read (is a FIFO (named pipe), not a policy "
                             "config; name the file itself)"),
    (lambda p: p.symlink_to("/dev/zero"), "policies/config/onprem.json: cannot be read (is a character device, not "
                                          "a policy config; name the file itself)"),
    (lambda p: (p.with_name("a").symlink_to(p.with_name("b")), p.with_name("b").symlink_to(p.with_name("a")),
                p.symlink_to(p.with_name("a"))), "is a symbolic link that loops"),
    (lambda p: p.write_bytes(b" " * ((1 << 20) + 1)), "is 1,048,577 bytes; a policy config may be at most 1,048,576"),
    (lambda p: p.write_text("[" * 100 + "]" * 100), "nested more than 64 deep"),
    (lambda p: p.write_text('{"a": ' + "9" * 5000 + "}"), "an integer of 5,000 digits"),
    (lambda p: p.write_text("[1, 2]"), "a policy config is a JSON object of rules, not list"),
    (lambda p: p.write_text('{"k8s-images-from-allowed-registries": {"allowedRegistries": "harbor"}}'),
     "policies/config/onprem.json: k8s-images-from-allowed-registries.allowedRegistries is not a list of registries"),
    (lambda p: None, "policies/config/onprem.json: missing; the environment's policy config names the registries"),
], ids=["fifo", "dev-zero", "loop", "big", "deep", "digits", "list", "allow-list", "missing"])
def test_a_hostile_policy_config_is_one_line_in_seconds(policies, make, says):
    """Read in a child held to 10 s and 1 GB more memory (tests/isolation.py)."""
    make(policies)
    with pytest.raises(ConfigError) as raised:
        isolated(lambda: read(copy.deepcopy(EXAMPLE)) and None)
    message = str(raised.value)
    assert message.isprintable() and says in message, message


def test_a_policy_config_through_a_symlink_to_a_regular_file_is_read(policies, tmp_path):
    real = tmp_path / "real.json"
    real.write_text('{"k8s-images-from-allowed-registries": {"allowedRegistries": ["harbor.dc1.example.ae/x"]}}')
    policies.symlink_to(real)
    assert policy_config("onprem")["k8s-images-from-allowed-registries"]["allowedRegistries"] == [
        "harbor.dc1.example.ae/x"]
    descriptor, _ = read(copy.deepcopy(EXAMPLE))
    assert descriptor.registry_host == "harbor.dc1.example.ae"


# --- property-based -----------------------------------------------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**100, max_value=10**100) | st.floats()
    | st.text(max_size=30) | st.sampled_from(["", "\n", "\x1b[31m", "a" * 300, "10.0.0.0/8", "mlx5_0", "h100"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in the example a value sits (mapping keys and list positions)."""
    found = [here] if here else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*here, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*here, index))
    return found


PATHS = _paths(EXAMPLE)


def _mutated(path: tuple[Any, ...], value: Any, how: str) -> dict[str, Any]:
    data = copy.deepcopy(EXAMPLE)
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    key = path[-1]
    if how == "replace":
        parent[key] = value
    elif how == "delete":
        del parent[key]
    elif isinstance(parent, dict):  # "beside": a stray key next to it
        parent[f"{key}x" if isinstance(value, (dict, list)) else str(value)[:40]] = value
    else:
        parent.append(value)
    return data


def _descriptor_or_one_line(data: Any) -> None:
    try:
        read(data)
    except ConfigError as err:
        message = str(err)
        assert message.isprintable() and len(message) <= MAX_LINE, message[:MAX_LINE + 50]


@pytest.mark.fuzz
@given(JSONISH)
@example({"cluster": {}})
@example({"cluster": {"context": "c"}, "nodes": [{"labels": {"\n": "x"}}]})
def test_any_value_is_a_descriptor_or_one_line(value):
    _descriptor_or_one_line(value)


@pytest.mark.fuzz
@given(st.sampled_from(PATHS), JSONISH, st.sampled_from(["replace", "delete", "beside"]))
@example(("nodes", 0, "count"), 10**100, "replace")
@example(("nodes", 1, "labels"), {"k\n": "v"}, "replace")
@example(("settings",), {"\x1b": None}, "beside")
@example(("objectStorage", "buckets"), {"\x1f": None}, "replace")  # found: a raw key in the field's path
def test_any_change_to_a_real_descriptor_is_a_descriptor_or_one_line(path, value, how):
    _descriptor_or_one_line(_mutated(path, value, how))
