"""The instance catalog: complete for the families the platform runs, internally
consistent, and matching the EFA facts every pool depends on."""

from __future__ import annotations

import pytest

from infra import catalog

REQUIRED_FAMILIES = {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "g5", "g6", "g6e", "m7i", "c7i"}

# From the EC2 EFA guide: interfaces per type (one per network card on the training types).
EFA_INTERFACES = {
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "g6e.24xlarge": 2,
    "g6e.48xlarge": 4,
    "g5.8xlarge": 1,
    "g5.48xlarge": 1,
    "g6.48xlarge": 1,
    "g5.2xlarge": 0,
    "g6e.2xlarge": 0,
    "m7i.xlarge": 0,
}


def test_required_families_present():
    assert REQUIRED_FAMILIES <= set(catalog.FAMILIES)


@pytest.mark.parametrize(("name", "interfaces"), sorted(EFA_INTERFACES.items()))
def test_efa_interface_counts(name, interfaces):
    assert catalog.lookup(name).efa_interfaces == interfaces


def test_p5_is_the_3200_gbps_h100_node():
    p5 = catalog.lookup("p5.48xlarge")
    assert (p5.gpus, p5.gpu.model, p5.gpu.memory_gib) == (8, "h100", 80)
    assert (p5.network_gbps, p5.network_cards, p5.vcpus, p5.memory_gib) == (3200, 32, 192, 2048)
    assert p5.nvme_disks == 8 and p5.nvme_gb == 8 * 3840
    assert p5.gpudirect_rdma
    assert p5.peak_bf16_tflops == pytest.approx(8 * 989.0)


@pytest.mark.parametrize("it", catalog.CATALOG.values(), ids=lambda it: it.name)
def test_entries_are_consistent(it):
    assert it.name == f"{it.family}.{it.name.split('.', 1)[1]}" and it.name == it.name.lower()
    assert it.vcpus > 0 and it.memory_gib > 0 and it.network_gbps > 0
    # EFA: at most one interface per network card.
    assert 0 <= it.efa_interfaces <= it.network_cards
    assert (it.gpu is None) == (it.gpus == 0)
    if it.gpu is not None:
        assert it.gpu.bf16_tflops > 0 and it.gpu.memory_gib > 0
    assert (it.nvme_disks == 0) == (it.nvme_gb_each == 0)
    # GPUDirect RDMA is only claimed where EFA carries it.
    if it.gpudirect_rdma:
        assert it.has_efa and it.family.startswith("p")


def test_training_types_reach_full_bandwidth_over_efa():
    for it in catalog.efa_types():
        if it.family.startswith("p"):
            assert it.efa_interfaces == it.network_cards, it.name
            assert it.gpus == 8 and it.gpudirect_rdma, it.name


def test_lookup_is_case_insensitive():
    assert catalog.lookup(" P5.48XLARGE ").name == "p5.48xlarge"


def test_unknown_type_message_suggests_and_lists_families():
    with pytest.raises(catalog.UnknownInstanceType):
        catalog.lookup("p5.48xlarg")
    message = catalog.unknown_type_message("p5.48xlarg")
    assert message.startswith("'p5.48xlarg' is not in the instance catalog (infra/catalog.py); did you mean 'p5.48xlarge'?")
    assert "known families: c7i, g5, g6, g6e, m7i, p4d, p4de, p5, p5e, p5en, p6-b200" in message
    assert "did you mean" not in catalog.unknown_type_message("z9.nano")
