"""Node pool specs: EFA interfaces for every EFA type, nodeadm user data, labels, taints."""

from __future__ import annotations

import dataclasses
import email

import pytest
import yaml

from components.specs import nodepool as spec
from infra import catalog

EFA_TYPES = catalog.efa_types()


@pytest.mark.parametrize("it", EFA_TYPES, ids=lambda it: it.name)
def test_efa_interfaces_one_per_card(it):
    interfaces = spec.efa_interfaces(it, ["sg-cluster", "sg-efa"])
    assert len(interfaces) == it.efa_interfaces
    assert [nic["network_card_index"] for nic in interfaces] == list(range(it.efa_interfaces))
    first, rest = interfaces[0], interfaces[1:]
    assert (first["interface_type"], first["device_index"]) == ("efa", 0)
    assert all((nic["interface_type"], nic["device_index"]) == ("efa-only", 1) for nic in rest)
    for nic in interfaces:
        assert nic["security_groups"] == ["sg-cluster", "sg-efa"]
        assert "associate_public_ip_address" not in nic  # EC2 refuses it with more than one interface
        assert nic["delete_on_termination"] == "true"


def test_p5_gets_32_interfaces():
    interfaces = spec.efa_interfaces(catalog.lookup("p5.48xlarge"), ["sg"])
    assert len(interfaces) == 32
    assert sum(nic["interface_type"] == "efa-only" for nic in interfaces) == 31


def test_efa_interfaces_refused_without_efa():
    with pytest.raises(ValueError, match="g5.2xlarge has no EFA interfaces"):
        spec.efa_interfaces(catalog.lookup("g5.2xlarge"), ["sg"])


def _parse(user_data: str) -> list[tuple[str, object]]:
    message = email.message_from_string(user_data)
    assert message.is_multipart() and message.get_content_type() == "multipart/mixed"
    return [(part.get_content_type(), part.get_payload()) for part in message.get_payload()]


@pytest.mark.parametrize(
    ("name", "strategy"),
    [("p5.48xlarge", "RAID0"), ("p4d.24xlarge", "RAID0"), ("g6e.48xlarge", "RAID0"), ("g5.2xlarge", "Mount")],
)
def test_nodeadm_user_data_is_mime_with_a_node_config(name, strategy):
    [(content_type, payload)] = _parse(spec.nodeadm_user_data(catalog.lookup(name)))
    assert content_type == "application/node.eks.aws"
    config = yaml.safe_load(payload)
    assert config["apiVersion"] == "node.eks.aws/v1alpha1" and config["kind"] == "NodeConfig"
    assert config["spec"] == {"instance": {"localStorage": {"strategy": strategy}}}


@pytest.mark.parametrize("name", ["p5.48xlarge", "p4d.24xlarge"])
def test_efa_pools_reserve_huge_pages_before_kubelet(name):
    parts = _parse(spec.nodeadm_user_data(catalog.lookup(name), efa=True))
    assert [content_type for content_type, _ in parts] == ["application/node.eks.aws", "text/x-shellscript"]
    script = parts[1][1]
    assert script.startswith("#!/bin/bash\n")
    assert "vm.nr_hugepages = 5120" in script and "sysctl --load" in script


def test_huge_pages_without_local_disks_still_make_user_data():
    # An EFA type without instance storage still needs the huge pages.
    bare = dataclasses.replace(catalog.lookup("p5.48xlarge"), nvme_disks=0)
    [(content_type, payload)] = _parse(spec.nodeadm_user_data(bare, efa=True))
    assert content_type == "text/x-shellscript" and "vm.nr_hugepages = 5120" in payload


def test_no_huge_pages_without_efa():
    parts = _parse(spec.nodeadm_user_data(catalog.lookup("g5.2xlarge")))
    assert [content_type for content_type, _ in parts] == ["application/node.eks.aws"]


def test_user_data_is_stable_between_runs():
    it = catalog.lookup("p5.48xlarge")
    assert spec.nodeadm_user_data(it) == spec.nodeadm_user_data(it)
    assert spec.MIME_BOUNDARY in spec.nodeadm_user_data(it)


def test_no_user_data_without_instance_storage():
    assert spec.nodeadm_user_data(catalog.lookup("m7i.xlarge")) is None


def test_gpu_labels_and_taint():
    p5 = catalog.lookup("p5.48xlarge")
    labels = spec.node_labels("train-p5", "gpu", p5, efa=True)
    assert labels == {
        "mlplat.io/pool": "train-p5",
        "mlplat.io/role": "gpu",
        "mlplat.io/instance-type": "p5.48xlarge",
        "mlplat.io/efa-count": "32",
        "mlplat.io/gpu-model": "h100",
        "mlplat.io/gpu-count": "8",
        "nvidia.com/gpu.present": "true",
        "vpc.amazonaws.com/efa.present": "true",
    }
    assert spec.node_taints(p5) == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert spec.ami_type(p5) == "AL2023_x86_64_NVIDIA"


def test_gpu_without_efa_says_zero():
    labels = spec.node_labels("gpu", "gpu", catalog.lookup("g5.48xlarge"), efa=False)
    assert labels["mlplat.io/efa-count"] == "0" and "vpc.amazonaws.com/efa.present" not in labels


def test_cpu_pool_has_no_gpu_labels_or_taint():
    m7i = catalog.lookup("m7i.large")
    labels = spec.node_labels("system", "system", m7i, efa=False)
    assert not any("gpu" in key for key in labels)
    assert spec.node_taints(m7i) == []
    assert spec.ami_type(m7i) == "AL2023_x86_64_STANDARD"
