"""A customer's node fabric (components/fabric_spec.py) as pure data: what is refused, in one
line; NCCL's settings for InfiniBand and RoCE; the pod's resources and the collective check's
floor on such a node."""

from __future__ import annotations

from dataclasses import replace

import pytest

from components.fabric_spec import (
    FABRICS,
    HCA_PORT,
    LINK_LAYERS,
    RDMA_SHARED_RESOURCE,
    NodeFabric,
    fabric_problem,
    nccl_env,
    nccl_ib_hca,
)
from components.training_spec import (
    EFA_RESOURCE,
    HUGEPAGES_RESOURCE,
    TrainingPlan,
    default_min_busbw_gbps,
    pod_resources,
)
from infra.catalog import lookup
from workloads.gpucheck import rdma

HCAS = tuple(f"mlx5_{i}" for i in range(8))
NDR = NodeFabric("infiniband", HCAS, 400)
P5 = lookup("p5.48xlarge")


def test_an_ndr_node_of_eight_hcas_runs_at_3200_gbps():
    assert NDR.line_rate_gbps == 3200
    assert NDR.rdma_resource == RDMA_SHARED_RESOURCE == "rdma/rdma_shared_device_a"
    assert (NDR.link_layer, NodeFabric("roce", HCAS[:2], 200, gid_index=3).link_layer) == ("InfiniBand", "Ethernet")


@pytest.mark.parametrize("changes, message", [
    (dict(kind="roce"), "roce fabric: gid_index is required: the GID table index of each port's RoCE v2 address, "
                        "which NCCL uses (NCCL_IB_GID_INDEX); `show_gids` on a node lists it, often 3"),
    (dict(kind="roce", gid_index=-1), "roce fabric: gid_index -1 is not a GID table index (0 or more)"),
    (dict(gid_index=3), "infiniband fabric: gid_index 3 is RoCE's (InfiniBand addresses ports by LID); leave it out"),
    (dict(kind="efa"), "'efa' is AWS's fabric; a customer's cluster runs infiniband or roce"),
    (dict(kind="omnipath"), "'omnipath' is not a fabric in the catalog; known: infiniband, roce (efa is AWS's own)"),
    (dict(hcas=()), "infiniband fabric: hcas must list the node's RDMA devices as the kernel names them, "
                    "e.g. (\"mlx5_0\", \"mlx5_1\") (ls /sys/class/infiniband); got ()"),
    (dict(hcas="mlx5_0"), "infiniband fabric: hcas must list the node's RDMA devices as the kernel names them, "
                          "e.g. (\"mlx5_0\", \"mlx5_1\") (ls /sys/class/infiniband); got 'mlx5_0'"),
    (dict(hcas=("mlx5_0:1",)), "infiniband fabric: HCA 'mlx5_0:1' is not an RDMA device name (letters, digits and _, "
                               "e.g. mlx5_0; the port is always 1)"),
    (dict(hcas=("mlx5_0", "mlx5_1", "mlx5_0")), "infiniband fabric: HCA mlx5_0 is listed more than once"),
    (dict(port_rate_gbps=300), "infiniband fabric: port rate 300 Gb/s is not one of 100, 200, 400, 800 "
                               "(InfiniBand (EDR 100, HDR 200, NDR 400, XDR 800 Gb/s per port))"),
    (dict(kind="roce", gid_index=3, port_rate_gbps=800), "roce fabric: port rate 800 Gb/s is not one of 100, 200, 400 "
                                                         "(RDMA over Converged Ethernet v2)"),
    (dict(rdma_resource="rdma_shared_device_a"), "infiniband fabric: rdma_resource 'rdma_shared_device_a' is not an "
                                                 "extended resource name like rdma/rdma_shared_device_a (the RDMA "
                                                 "shared device plugin's <prefix>/<resourceName>)"),
])
def test_a_fabric_nccl_could_not_use_is_refused_in_one_line(changes, message):
    fields = {"kind": "infiniband", "hcas": HCAS, "port_rate_gbps": 400, **changes}
    with pytest.raises(ValueError) as err:
        NodeFabric(**fields)
    assert str(err.value) == message
    assert "\n" not in message


def test_a_list_of_hcas_is_taken_as_a_tuple():
    fabric = NodeFabric("infiniband", ["mlx5_0", "mlx5_1"], 400)
    assert fabric.hcas == ("mlx5_0", "mlx5_1") and hash(fabric)


def test_the_catalog_names_the_rdma_fabrics():
    assert [name for name, kind in FABRICS.items() if kind.rdma] == sorted(LINK_LAYERS) == ["infiniband", "roce"]
    assert fabric_problem("infiniband") is None and fabric_problem("roce") is None


# --- NCCL's settings ---------------------------------------------------------------------


def test_nccl_ib_hca_names_each_hca_exactly_at_its_port():
    """`=` makes every name exact: without it NCCL takes mlx5_1 as a prefix of mlx5_10 up."""
    assert nccl_ib_hca(NDR) == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"
    assert HCA_PORT == rdma.PORT == 1  # one port number for NCCL and for the port checks


def test_infiniband_settings():
    assert dict(nccl_env(NDR)) == {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": nccl_ib_hca(NDR)}


def test_roce_settings_add_the_gid_index():
    roce = NodeFabric("roce", ("mlx5_0", "mlx5_1"), 200, gid_index=3)
    assert dict(nccl_env(roce)) == {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
                                    "NCCL_IB_GID_INDEX": "3"}
    assert dict(nccl_env(replace(roce, gid_index=0)))["NCCL_IB_GID_INDEX"] == "0"


def test_neither_sets_what_nccl_decides_better_or_efa_needs():
    for fabric in (NDR, NodeFabric("roce", HCAS, 400, gid_index=3)):
        names = {name for name, _ in nccl_env(fabric)}
        assert not names & {"NCCL_NET_GDR_LEVEL", "NCCL_SOCKET_IFNAME", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"}


# --- the pod and the collective check ------------------------------------------------------


def test_an_rdma_pod_takes_one_shared_device_and_no_huge_pages():
    resources = pod_resources(P5, efa=False, fabric=NDR)
    assert resources["requests"] == resources["limits"] == {
        "cpu": "153", "memory": "1536Gi", "nvidia.com/gpu": "8", RDMA_SHARED_RESOURCE: "1"}
    custom = replace(NDR, rdma_resource="rdma/ib_ndr")
    assert pod_resources(P5, efa=False, fabric=custom)["limits"]["rdma/ib_ndr"] == "1"


def test_without_a_fabric_the_pod_is_as_before():
    assert pod_resources(P5, efa=True, fabric=None) == pod_resources(P5, efa=True)
    assert {EFA_RESOURCE, HUGEPAGES_RESOURCE} <= set(pod_resources(P5, efa=True)["limits"])
    assert pod_resources(lookup("g5.2xlarge"), efa=False)["limits"] == {"cpu": "6", "memory": "24Gi",
                                                                         "nvidia.com/gpu": "1"}


@pytest.mark.parametrize("fabric, floor", [
    (NDR, 300.0),  # 8 x 400 = 3200 Gb/s: the same floor as p5's 3200 Gb/s of EFA
    (NodeFabric("infiniband", HCAS[:4], 200), 75.0),  # 4 x HDR 200 = 800 Gb/s
    (NodeFabric("infiniband", HCAS, 800), 600.0),  # 8 x XDR 800
    (NodeFabric("roce", HCAS[:2], 100, gid_index=3), 18.8),  # 2 x 100 = 200 Gb/s: 18.75 rounded
])
def test_the_collective_floor_is_three_quarters_of_the_fabrics_line_rate(fabric, floor):
    assert default_min_busbw_gbps(P5, fabric) == floor
    assert default_min_busbw_gbps(P5) == 300.0  # the instance's own network without a fabric


def test_a_plan_has_efa_or_a_fabric_not_both():
    plan = dict(name="gpt2", namespace="research", queue="default", pool="gpu", instance=P5, nodes=2, min_nodes=2,
                image="i", checks_image="c", service_account="gpt2", lustre_claim=None)
    assert TrainingPlan(**plan, efa=False, fabric=NDR).fabric == NDR
    with pytest.raises(ValueError, match="^training plan 'gpt2': a node has EFA \\(AWS\\) or an RDMA fabric "
                                         "\\(infiniband\\), not both; set efa=False with a fabric$"):
        TrainingPlan(**plan, efa=True, fabric=NDR)
