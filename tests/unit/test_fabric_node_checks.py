"""The acceptance suite's node checks on a customer's InfiniBand node, proven on recorded node
roots (tests/fixtures/acceptance/nodes/onprem-ib-*.yaml) through testinfra's local backend,
as tests/unit/test_acceptance_checks.py does for the AWS nodes: the healthy node passes
every node check; a node with a port down fails the port check alone, naming the HCA, the
port and its state. Then the port judgement on single readings, and the RDMA resource among
a node's allocatable devices."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import testinfra

from components.fabric_spec import NodeFabric
from infra.acceptance.cluster import ClusterState, check_allocatable
from infra.acceptance.expect import StackExpectation, onprem_pool_expectation
from infra.acceptance.node import NODE_CHECKS, NodeFacts, NodeView, collect, listed_gpus
from tests.unit.acceptance_fixtures import build_node_root, node_fixture

NODE = "gpu-07.dc1.customer.example"
HCAS = tuple(f"mlx5_{i}" for i in range(8))
NDR = NodeFabric("infiniband", HCAS, 400)
HARDWARE = "8x H100 SXM, 8x ConnectX-7 NDR"
POOL = onprem_pool_expectation("gpu", nodes=8, gpus=8, gpu_model="h100", fabric=NDR, hardware=HARDWARE)
SUBJECT = f"node {NODE} ({HARDWARE}, pool gpu)"


def read_node(fixture: str, root: Path) -> NodeFacts:
    build_node_root(node_fixture(fixture), root)
    return collect(NODE, NodeView(testinfra.get_host("local://"), root=str(root)))


def failures(facts: NodeFacts, pool=POOL) -> dict[str, list[str]]:
    results = {name: check(facts, pool) for name, check in NODE_CHECKS.items()}
    return {name: problems for name, problems in results.items() if problems}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> NodeFacts:
    return read_node("onprem-ib-healthy.yaml", tmp_path_factory.mktemp("onprem-ib-healthy"))


def test_healthy_infiniband_node_passes_every_node_check(healthy):
    assert failures(healthy) == {}
    # ...having read the node for real: 8 GPUs through the driver container's nvidia-smi,
    # and every HCA's port (the storage port mlx5_8 too, which the fabric does not use).
    assert len(listed_gpus(healthy.gpu_query)) == 8
    assert sorted(healthy.rdma_ports) == [f"mlx5_{i}/1" for i in range(9)]
    assert healthy.rdma_ports["mlx5_3/1"] == {"state": "4: ACTIVE", "phys_state": "5: LinkUp",
                                              "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}


def test_a_port_down_is_found_naming_the_hca_the_port_and_its_state(tmp_path):
    facts = read_node("onprem-ib-port-down.yaml", tmp_path)
    assert failures(facts) == {"rdma_ports": [
        f"{SUBJECT}: mlx5_5 port 1 is 1: DOWN (phys_state 3: Disabled), expected 4: ACTIVE and 5: LinkUp"
    ]}


def test_the_aws_nodes_have_no_fabric_to_judge(tmp_path):
    """A p5 (EFA) node has no RDMA fabric in its pool expectation: the port check passes it."""
    from infra.acceptance.expect import stack_expectation
    from infra.config import load_stack

    p5 = next(p for p in stack_expectation("prod", load_stack("prod")).pools if p.name == "train-p5")
    facts = read_node("p5-healthy.yaml", tmp_path)
    assert p5.fabric is None and facts.rdma_ports is None
    assert NODE_CHECKS["rdma_ports"](facts, p5) == []


def test_an_onprem_pool_expects_no_efa_huge_pages_disks_or_metadata_service(healthy):
    assert (POOL.efa_interfaces, POOL.hugepages_2m, POOL.local_disks, POOL.imds) == (0, 0, None, False)
    # Nothing answers the metadata service's address on a customer's node: not judged there.
    assert healthy.imds_tokenless.rc != 0
    assert NODE_CHECKS["imdsv2"](healthy, POOL) == []


# --- the port judgement on single readings ------------------------------------------------


def with_port(facts: NodeFacts, hca: str, **attributes: str) -> NodeFacts:
    ports = {key: dict(value) for key, value in facts.rdma_ports.items()}
    ports[f"{hca}/1"].update(attributes)
    return dataclasses.replace(facts, rdma_ports=ports)


@pytest.mark.parametrize("attributes, message", [
    ({"state": "2: INIT", "phys_state": "5: LinkUp"},
     "mlx5_2 port 1 is 2: INIT (phys_state 5: LinkUp), expected 4: ACTIVE and 5: LinkUp"),
    ({"state": "1: DOWN", "phys_state": "2: Polling"},
     "mlx5_2 port 1 is 1: DOWN (phys_state 2: Polling), expected 4: ACTIVE and 5: LinkUp"),
    ({"rate": "200 Gb/sec (4X HDR)"}, "mlx5_2 port 1 runs at 200 Gb/sec (4X HDR), expected 400 Gb/sec"),
    ({"rate": "100 Gb/sec (1X NDR)"}, "mlx5_2 port 1 runs at 100 Gb/sec (1X NDR), expected 400 Gb/sec"),
    ({"link_layer": "Ethernet"}, "mlx5_2 port 1: link layer is Ethernet, expected InfiniBand"),
])
def test_each_port_problem_is_named(healthy, attributes, message):
    assert NODE_CHECKS["rdma_ports"](with_port(healthy, "mlx5_2", **attributes), POOL) == [f"{SUBJECT}: {message}"]


def test_a_missing_hca_is_named(healthy):
    ports = {k: v for k, v in healthy.rdma_ports.items() if k != "mlx5_7/1"}
    assert NODE_CHECKS["rdma_ports"](dataclasses.replace(healthy, rdma_ports=ports), POOL) == [
        f"{SUBJECT}: mlx5_7 port 1: no such port (/sys/class/infiniband/mlx5_7/ports/1 is missing: HCA absent or "
        "its driver not loaded)"
    ]


def test_no_rdma_at_all_is_one_line(healthy):
    assert NODE_CHECKS["rdma_ports"](dataclasses.replace(healthy, rdma_ports=None), POOL) == [
        f"{SUBJECT}: none of the 8 HCAs (mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7) has a port "
        "under /sys/class/infiniband: the RDMA driver (DOCA/MOFED) is not loaded, or the HCAs have other names"
    ]


def test_a_roce_pool_expects_ethernet_ports(healthy):
    roce = dataclasses.replace(POOL, fabric=NodeFabric("roce", ("mlx5_8",), 100, gid_index=3))
    assert NODE_CHECKS["rdma_ports"](healthy, roce) == []  # mlx5_8 is a 100G Ethernet port
    assert NODE_CHECKS["rdma_ports"](healthy, dataclasses.replace(roce, fabric=NDR)) == []
    assert NODE_CHECKS["rdma_ports"](healthy, dataclasses.replace(POOL, fabric=NodeFabric("roce", HCAS[:1], 400,
                                                                                           gid_index=3))) == [
        f"{SUBJECT}: mlx5_0 port 1: link layer is InfiniBand, expected Ethernet"
    ]


# --- the cluster's view: the RDMA shared device plugin's resource -------------------------


def node_object(allocatable: dict[str, str]) -> dict:
    return {"metadata": {"name": NODE, "labels": {"mlplat.io/pool": "gpu"}},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}}


def test_a_node_without_the_rdma_resource_is_found():
    expect = StackExpectation("onprem", (POOL,))
    good = {"cpu": "190", "memory": "2000Gi", "nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "63"}
    assert check_allocatable(ClusterState((node_object(good),)), expect) == []
    missing = {k: v for k, v in good.items() if not k.startswith("rdma/")}
    assert check_allocatable(ClusterState((node_object(missing),)), expect) == [
        f"node {NODE} (unknown type, pool gpu): allocatable rdma/rdma_shared_device_a is 0; every training pod takes "
        "one (the Network Operator's RDMA shared device plugin advertises them)"
    ]


def test_a_customer_node_is_placed_in_its_pool_by_the_descriptors_labels():
    labelled = onprem_pool_expectation("gpu", 8, 8, "h100", NDR, node_labels={"nvidia.com/gpu.present": "true",
                                                                              "customer.example/rack": "a"})
    cpu = onprem_pool_expectation("system", 3, 0, None, None, role="system", node_labels={"node-role/infra": ""})
    expect = StackExpectation("onprem", (labelled, cpu))
    gpu_node = {"metadata": {"labels": {"nvidia.com/gpu.present": "true", "customer.example/rack": "a", "x": "y"}}}
    assert expect.pool_of(gpu_node) is labelled
    assert expect.pool_of({"metadata": {"labels": {"node-role/infra": ""}}}) is cpu
    assert expect.pool_of({"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}) is None  # rack missing
