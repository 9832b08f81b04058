"""The post-deploy acceptance checks, proven on recorded fixtures (tests/fixtures/acceptance).

Node checks run the real collector through testinfra's local backend against a directory
standing in for a node's root; cluster checks read recorded Kubernetes objects and logs.
Healthy fixtures pass every check; each broken one fails with its own message. The last
tests replay whole scenarios through the acceptance suite itself (tests/acceptance).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import testinfra

from infra.acceptance.cluster import (
    CLUSTER_CHECKS,
    ClusterState,
    collective_verdict,
    log_pods,
    quantity,
)
from infra.acceptance.expect import INSTANCE_TYPE_LABEL, POOL_LABEL, stack_expectation
from infra.acceptance.live import debug_pod_manifest, debug_pod_name, mirror_account
from infra.acceptance.node import (
    NODE_CHECKS,
    Command,
    NodeFacts,
    NodeView,
    collect,
    default_runtime_binary,
    listed_gpus,
    node_problems,
    uverbs_devices,
)
from infra.catalog import lookup
from infra.config import load_stack
from tests.unit.acceptance_fixtures import (
    build_node_root,
    build_replay,
    cluster_document,
    cluster_state,
    node_fixture,
)

REPO = Path(__file__).resolve().parents[2]
def _with_p5_capacity(config):
    """prod once its p5 capacity came and the pool was raised to 4 (the stack file starts the
    pool empty: no first deploy waits on GPUs)."""
    pools = [p.model_copy(update={"min_size": 2, "desired_size": 4}) if p.name == "train-p5" else p
             for p in config.node_pools]
    return config.model_copy(update={"node_pools": pools})


PROD = stack_expectation("prod", _with_p5_capacity(load_stack("prod")))
POOLS = {p.name: p for p in PROD.pools}
P5 = POOLS["train-p5"]
NODE = "ip-10-0-41-87.me-central-1.compute.internal"
SUBJECT = f"node {NODE} (p5.48xlarge, pool train-p5)"


def failures(results: dict[str, list[str]]) -> dict[str, list[str]]:
    return {check: problems for check, problems in results.items() if problems}


def read_node(fixture: str, root: Path) -> NodeFacts:
    build_node_root(node_fixture(fixture), root)
    return collect(NODE, NodeView(testinfra.get_host("local://"), root=str(root)))


def run_node_checks(facts: NodeFacts, pool=P5) -> dict[str, list[str]]:
    return {name: check(facts, pool) for name, check in NODE_CHECKS.items()}


@pytest.fixture(scope="module")
def healthy_p5(tmp_path_factory) -> NodeFacts:
    return read_node("p5-healthy.yaml", tmp_path_factory.mktemp("p5-healthy"))


# --- node checks on recorded node roots ------------------------------------------------


def test_healthy_p5_node_passes_every_node_check(healthy_p5):
    assert failures(run_node_checks(healthy_p5)) == {}
    # ...having read the node for real: 8 GPUs, 32 EFA devices, the RAID and the runtime.
    assert len(listed_gpus(healthy_p5.gpu_query)) == lookup("p5.48xlarge").gpus
    assert len(uverbs_devices(healthy_p5.infiniband)) == lookup("p5.48xlarge").efa_interfaces
    assert "/dev/md127 /mnt/k8s-disks/0" in healthy_p5.mounts
    assert healthy_p5.imds_tokenless == Command(0, "401", "")


@pytest.mark.parametrize("fixture, pool", [("m7i-system.yaml", "system"), ("g6e-inference.yaml", "inference")])
def test_healthy_nodes_of_other_pools_pass(fixture, pool, tmp_path):
    facts = read_node(fixture, tmp_path)
    assert failures(run_node_checks(facts, POOLS[pool])) == {}
    assert len(listed_gpus(facts.gpu_query)) == POOLS[pool].gpus


BROKEN_NODES = {
    "p5-missing-efa-devices.yaml": {
        "efa_devices": [f"{SUBJECT}: 16 uverbs devices in /dev/infiniband, expected 32 (one per EFA interface)"],
    },
    "p5-too-few-hugepages.yaml": {
        "hugepages": [
            f"{SUBJECT}: HugePages_Total is 512 pages of 2 MiB, at least 5120 are needed "
            "(EFA's libfabric and the training pods' hugepages-2Mi requests)"
        ],
    },
    "p5-no-driver.yaml": {
        "driver_loaded": [f"{SUBJECT}: NVIDIA driver not loaded: /proc/driver/nvidia/version is missing"],
        "gpus_listed": [
            f"{SUBJECT}: nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with "
            "the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
        ],
    },
}


@pytest.mark.parametrize("fixture", BROKEN_NODES)
def test_broken_node_fails_with_its_own_message(fixture, tmp_path):
    assert failures(run_node_checks(read_node(fixture, tmp_path))) == BROKEN_NODES[fixture]


def test_broken_nodes_fail_different_checks():
    failed = [frozenset(expected) for expected in BROKEN_NODES.values()]
    assert len(set(failed)) == len(failed)


def test_recorded_program_answers_only_its_recorded_arguments(tmp_path):
    root = build_node_root(node_fixture("p5-healthy.yaml"), tmp_path)
    answer = NodeView(testinfra.get_host("local://"), root=str(root)).run("nvidia-smi -L")
    assert answer.rc == 64
    assert "no recording for arguments: -L" in answer.stderr


def test_node_commands_see_only_the_node_root(tmp_path):
    """A recorded node without nvidia-smi must not fall back to the test machine's."""
    root = build_node_root(node_fixture("m7i-system.yaml"), tmp_path)
    answer = NodeView(testinfra.get_host("local://"), root=str(root)).run("nvidia-smi --version")
    assert answer.rc == 127


def test_unreachable_node_fails_every_node_check(healthy_p5):
    facts = {NODE: "debug pod kube-system/mlplat-acceptance-x did not start within 300 s", "other": healthy_p5}
    pools = {NODE: P5, "other": P5}
    for check in NODE_CHECKS:
        assert node_problems(check, facts, pools) == [
            f"{SUBJECT}: not checked: debug pod kube-system/mlplat-acceptance-x did not start within 300 s"
        ]


# --- node checks on single readings ------------------------------------------------------

MEMINFO = "HugePages_Total:    {total}\nHugePages_Free:     {total}\nHugepagesize:       {size} kB\n"


@pytest.mark.parametrize("total, size, expected", [
    (5120, 2048, []),
    (5119, 2048, [f"{SUBJECT}: HugePages_Total is 5119 pages of 2 MiB, at least 5120 are needed "
                  "(EFA's libfabric and the training pods' hugepages-2Mi requests)"]),
    (16, 1048576, [f"{SUBJECT}: huge page size is 1048576 kB, expected 2048 kB"]),
])
def test_hugepages_floor(healthy_p5, total, size, expected):
    facts = dataclasses.replace(healthy_p5, meminfo=MEMINFO.format(total=total, size=size))
    assert NODE_CHECKS["hugepages"](facts, P5) == expected


def test_hugepages_are_not_required_off_efa_pools(healthy_p5):
    facts = dataclasses.replace(healthy_p5, meminfo=MEMINFO.format(total=0, size=2048))
    assert NODE_CHECKS["hugepages"](facts, POOLS["inference"]) == []


def test_missing_infiniband_directory(healthy_p5):
    facts = dataclasses.replace(healthy_p5, infiniband=None)
    assert NODE_CHECKS["efa_devices"](facts, P5) == [
        f"{SUBJECT}: 0 uverbs devices in /dev/infiniband (missing), expected 32 (one per EFA interface)"
    ]


@pytest.mark.parametrize("query, expected", [
    (Command(1, "", "fi_getinfo: -61 (No data available)\n"),
     f"{SUBJECT}: `fi_info -p efa` failed (exit 1): fi_getinfo: -61 (No data available)"),
    (Command(0, "provider: tcp\n    fabric: 10.0.0.0/16\n"), f"{SUBJECT}: `fi_info -p efa` lists no efa provider"),
])
def test_libfabric_without_efa(healthy_p5, query, expected):
    assert NODE_CHECKS["libfabric_efa"](dataclasses.replace(healthy_p5, efa_query=query), P5) == [expected]


def test_wrong_gpus_listed(healthy_p5):
    lines = "".join(f"{i}, NVIDIA A10G, 00000000:{i:02X}:00.0\n" for i in range(7))
    facts = dataclasses.replace(healthy_p5, gpu_query=Command(0, lines))
    assert NODE_CHECKS["gpus_listed"](facts, P5) == [
        f"{SUBJECT}: nvidia-smi lists 7 GPUs, the catalog says 8",
        f"{SUBJECT}: nvidia-smi lists NVIDIA A10G; expected h100 GPUs",
    ]


MDSTAT_RAID1 = "Personalities : [raid1]\nmd0 : active raid1 nvme2n1[1] nvme1n1[0]\n      3750606144 blocks\n"


@pytest.mark.parametrize("mounts, mdstat, expected", [
    ("/dev/nvme0n1p1 / xfs rw 0 0\n", None,
     f"{SUBJECT}: nothing is mounted at /mnt/k8s-disks/0, where the RAID0 of its 8 NVMe disks belongs"),
    ("/dev/nvme1n1 /mnt/k8s-disks/0 xfs rw 0 0\n", None,
     f"{SUBJECT}: /mnt/k8s-disks/0 is mounted from /dev/nvme1n1, not an NVMe RAID0 (no active md array)"),
    ("/dev/md0 /mnt/k8s-disks/0 xfs rw 0 0\n", MDSTAT_RAID1,
     f"{SUBJECT}: /mnt/k8s-disks/0 is mounted from /dev/md0, not an NVMe RAID0 (md0 raid1)"),
])
def test_nvme_raid_not_mounted(healthy_p5, mounts, mdstat, expected):
    facts = dataclasses.replace(healthy_p5, mounts=mounts, mdstat=mdstat)
    assert NODE_CHECKS["local_nvme"](facts, P5) == [expected]


def test_single_nvme_disk_must_be_the_nvme_device(tmp_path):
    facts = read_node("g6e-inference.yaml", tmp_path)
    broken = dataclasses.replace(facts, mounts="/dev/xvdb /mnt/k8s-disks/1 xfs rw 0 0\n")
    subject = f"node {NODE} (g6e.2xlarge, pool inference)"
    assert NODE_CHECKS["local_nvme"](broken, POOLS["inference"]) == [
        f"{subject}: /mnt/k8s-disks/1 is mounted from /dev/xvdb, not an NVMe disk"
    ]


CONTAINERD_V2 = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "{name}"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{name}.options]
BinaryName = "{binary}"
"""


def test_containerd_config_version_2_is_read():
    text = CONTAINERD_V2.format(name="nvidia", binary="/usr/bin/nvidia-container-runtime")
    assert default_runtime_binary(text) == ("nvidia", "/usr/bin/nvidia-container-runtime")


def test_runc_on_a_gpu_node_fails(healthy_p5):
    facts = dataclasses.replace(healthy_p5, containerd_config=CONTAINERD_V2.format(name="runc", binary="/usr/sbin/runc"))
    assert NODE_CHECKS["nvidia_runtime"](facts, P5) == [
        f"{SUBJECT}: containerd's default runtime is runc (/usr/sbin/runc), not the NVIDIA container runtime "
        "(nvidia-container-runtime)"
    ]


@pytest.mark.parametrize("answer, expected", [
    (Command(0, "200"), f"{SUBJECT}: the instance metadata service answers without a token (IMDSv1 is on)"),
    (Command(28, "000"), f"{SUBJECT}: a token-less metadata request got 000 (curl exit 28), expected 401 from IMDSv2"),
])
def test_imdsv1_or_no_metadata_service_fails(healthy_p5, answer, expected):
    assert NODE_CHECKS["imdsv2"](dataclasses.replace(healthy_p5, imds_tokenless=answer), P5) == [expected]


# --- cluster checks -------------------------------------------------------------------


def run_cluster_checks(state: ClusterState, expect=PROD) -> dict[str, list[str]]:
    return {name: check(state, expect) for name, check in CLUSTER_CHECKS.items()}


@pytest.fixture
def healthy_doc() -> dict:
    return cluster_document("prod-healthy.yaml")


def state_of(doc: dict) -> ClusterState:
    return ClusterState.from_document(doc)


def find(doc: dict, kind: str, name: str) -> dict:
    return next(o for o in doc[kind]["items"] if o["metadata"]["name"] == name)


P5_NODES = [
    "ip-10-0-40-11.me-central-1.compute.internal",
    "ip-10-0-41-87.me-central-1.compute.internal",
    "ip-10-0-42-143.me-central-1.compute.internal",
    "ip-10-0-43-201.me-central-1.compute.internal",
]


def test_healthy_cluster_passes_every_cluster_check():
    state = cluster_state("prod-healthy.yaml")
    assert failures(run_cluster_checks(state)) == {}
    # ...having looked at what matters: 6 GPU nodes, a GPU check report from each of the
    # training pool's 4, one collective run.
    gpu_nodes = [n for n in state.nodes if PROD.pool_of(n).gpus]
    assert len(gpu_nodes) == 6
    assert [c for _, c in log_pods(state)] == ["gpu-check"] * 4 + ["allreduce"] * 2
    assert collective_verdict(state.logs[COLLECTIVES_POD])["peak_busbw_gbps"] == 481.07


def test_plugin_not_ready_fails_with_its_own_message():
    node = "ip-10-0-42-143.me-central-1.compute.internal"
    subject = f"node {node} (p5.48xlarge, pool train-p5)"
    assert failures(run_cluster_checks(cluster_state("prod-plugin-not-ready.yaml"))) == {
        "allocatable_devices": [f"{subject}: allocatable vpc.amazonaws.com/efa is 0, the catalog says 32"],
        "device_plugins_ready": [
            f"{subject}: EFA device plugin pod kube-system/aws-efa-k8s-device-plugin-cw8vz (daemon set "
            "aws-efa-k8s-device-plugin) is not Ready (CrashLoopBackOff, 7 restarts)"
        ],
    }


def test_node_not_ready(healthy_doc):
    node = find(healthy_doc, "nodes", P5_NODES[0])
    node["status"] = copy.deepcopy(node["status"])
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                     "message": "Kubelet stopped posting node status."}]
    assert CLUSTER_CHECKS["nodes_ready"](state_of(healthy_doc), PROD) == [
        f"node {P5_NODES[0]} (p5.48xlarge) is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)"
    ]


def test_missing_and_stray_nodes(healthy_doc):
    healthy_doc["nodes"]["items"] = [n for n in healthy_doc["nodes"]["items"] if n["metadata"]["name"] not in P5_NODES[2:]]
    healthy_doc["nodes"]["items"].append(
        {"metadata": {"name": "ip-10-0-99-9", "labels": {INSTANCE_TYPE_LABEL: "c7i.large"}}, "status": {}}
    )
    assert CLUSTER_CHECKS["node_pools"](state_of(healthy_doc), PROD) == [
        "node ip-10-0-99-9 (c7i.large) belongs to no node pool of stack prod",
        "pool train-p5 (p5.48xlarge) has 2 nodes, the stack asks for 4",
    ]


def test_pool_found_by_label_or_instance_type():
    by_label = {"metadata": {"labels": {POOL_LABEL: "inference", INSTANCE_TYPE_LABEL: "g6e.2xlarge"}}}
    by_type = {"metadata": {"labels": {INSTANCE_TYPE_LABEL: "p5.48xlarge"}}}
    unknown = {"metadata": {"labels": {POOL_LABEL: "nope", INSTANCE_TYPE_LABEL: "c7i.large"}}}
    assert PROD.pool_of(by_label).name == "inference"
    assert PROD.pool_of(by_type).name == "train-p5"
    assert PROD.pool_of(unknown) is None


def test_too_few_allocatable_hugepages(healthy_doc):
    node = find(healthy_doc, "nodes", P5_NODES[1])
    node["status"] = copy.deepcopy(node["status"])
    node["status"]["allocatable"]["hugepages-2Mi"] = "1Gi"
    assert CLUSTER_CHECKS["allocatable_devices"](state_of(healthy_doc), PROD) == [
        f"node {P5_NODES[1]} (p5.48xlarge, pool train-p5): allocatable hugepages-2Mi is 512 pages, "
        "at least 5120 are needed"
    ]


def _sharing(**changes):
    return dataclasses.replace(PROD, pools=tuple(dataclasses.replace(p, **changes) for p in PROD.pools))


def test_time_sliced_gpus_are_advertised_once_per_replica(healthy_doc):
    problems = CLUSTER_CHECKS["allocatable_devices"](state_of(healthy_doc), _sharing(time_slicing_replicas=2))
    assert len(problems) == 6  # every GPU node advertises its GPUs only once
    assert problems[0] == (f"node {P5_NODES[0]} (p5.48xlarge, pool train-p5): allocatable nvidia.com/gpu is 8, "
                           "expected 16 (8 GPUs x 2 time-slicing replicas)")


def test_mig_devices_count_towards_the_gpus(healthy_doc):
    node = find(healthy_doc, "nodes", P5_NODES[0])
    node["status"] = copy.deepcopy(node["status"])
    allocatable = node["status"]["allocatable"]
    allocatable["nvidia.com/gpu"] = "0"
    allocatable["nvidia.com/mig-1g.10gb"] = "56"
    mixed = _sharing(mig_strategy="mixed")
    assert CLUSTER_CHECKS["allocatable_devices"](state_of(healthy_doc), mixed) == []
    allocatable["nvidia.com/mig-1g.10gb"] = "4"
    assert CLUSTER_CHECKS["allocatable_devices"](state_of(healthy_doc), mixed) == [
        f"node {P5_NODES[0]} (p5.48xlarge, pool train-p5): allocatable GPUs and MIG devices total 4, fewer than "
        "the 8 GPUs the catalog says"
    ]


def test_no_device_plugin_pod_on_a_gpu_node(healthy_doc):
    healthy_doc["pods"]["items"] = [p for p in healthy_doc["pods"]["items"]
                                    if p["metadata"]["name"] != "nvidia-device-plugin-t3h6c"]
    assert CLUSTER_CHECKS["device_plugins_ready"](state_of(healthy_doc), PROD) == [
        "node ip-10-0-36-52.me-central-1.compute.internal (g6e.2xlarge, pool inference): no NVIDIA device plugin "
        "pod runs there, so nothing advertises nvidia.com/gpu"
    ]


COLLECTIVES_POD = "research/gpt2-smoke-allreduce-allreduce-0-0-x7k2p"


def _report(healthy_doc: dict, pod: str) -> dict:
    return json.loads(healthy_doc["logs"][f"research/{pod}"].splitlines()[-1])


def test_gpu_check_unhealthy_node(healthy_doc):
    report = _report(healthy_doc, "gpu-check-train-p5-fj5tw")
    report["healthy"] = False
    report["findings"] = [
        {"check": "ecc", "severity": "fail", "message": "2 volatile uncorrectable ECC errors since the last driver load",
         "gpu": 3},
        {"check": "temperature", "severity": "warn", "message": "83 C is within 5 C of the slowdown threshold 87 C",
         "gpu": 5},
    ]
    healthy_doc["logs"]["research/gpu-check-train-p5-fj5tw"] += json.dumps(report) + "\n"
    assert CLUSTER_CHECKS["gpu_node_check"](state_of(healthy_doc), PROD) == [
        f"node {P5_NODES[2]} (p5.48xlarge, pool train-p5): the GPU check found the node unhealthy: "
        "GPU 3: 2 volatile uncorrectable ECC errors since the last driver load"
    ]


def test_gpu_check_without_nvml(healthy_doc):
    pod = find(healthy_doc, "pods", "gpu-check-train-p5-lq7rd")
    pod["status"] = {"phase": "Running", "containerStatuses": [{
        "name": "gpu-check", "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}},
    }]}
    healthy_doc["logs"]["research/gpu-check-train-p5-lq7rd"] = (
        "gpucheck: NVML is not available on this node (no NVIDIA driver): NVML Shared Library Not Found\n"
    )
    assert CLUSTER_CHECKS["gpu_node_check"](state_of(healthy_doc), PROD) == [
        f"node {P5_NODES[3]} (p5.48xlarge, pool train-p5): the GPU check printed no report (exit 3: gpucheck: "
        "NVML is not available on this node (no NVIDIA driver): NVML Shared Library Not Found)"
    ]


def test_gpu_check_judged_against_another_instance_type(healthy_doc):
    report = _report(healthy_doc, "gpu-check-train-p5-8mq2s")
    report["expected"] = {"gpus": 1, "model": "l40s", "memory_gib": 48, "instance_type": ""}
    healthy_doc["logs"]["research/gpu-check-train-p5-8mq2s"] = json.dumps(report) + "\n"
    assert CLUSTER_CHECKS["gpu_node_check"](state_of(healthy_doc), PROD) == [
        f"node {P5_NODES[1]} (p5.48xlarge, pool train-p5): the GPU check judged the node as 1 x l40s, "
        "the catalog says 8 x h100"
    ]


def test_gpu_check_missing_on_a_training_node(healthy_doc):
    healthy_doc["pods"]["items"] = [p for p in healthy_doc["pods"]["items"]
                                    if p["metadata"]["name"] != "gpu-check-train-p5-4hxz8"]
    assert CLUSTER_CHECKS["gpu_node_check"](state_of(healthy_doc), PROD) == [
        f"node {P5_NODES[0]} (p5.48xlarge, pool train-p5): the GPU check (workloads.gpucheck) has no pod there"
    ]


def _set_verdict(doc: dict, **verdict) -> None:
    base = {"event": "verdict", "peak_busbw_gbps": 481.07, "avg_busbw_gbps": 227.27, "threshold_gbps": 300.0,
            "all_correct": True, "exit_code": 0}
    doc["logs"][COLLECTIVES_POD] = json.dumps({**base, **verdict}) + "\n"


@pytest.mark.parametrize("verdict, expected", [
    ({"peak_busbw_gbps": 5.2, "exit_code": 1},
     f"the collective check {COLLECTIVES_POD}: peak all-reduce bus bandwidth 5.2 GB/s is below "
     "the 300 GB/s threshold (a few GB/s means NCCL fell back to TCP sockets instead of EFA)"),
    ({"threshold_gbps": 0.0},
     f"the collective check {COLLECTIVES_POD} ran with a 0 GB/s threshold, below the stack's 300 GB/s "
     "(peak 481.1 GB/s)"),
    ({"all_correct": False, "exit_code": 3},
     f"the collective check {COLLECTIVES_POD}: all-reduce returned wrong values"),
])
def test_collective_check_fails(healthy_doc, verdict, expected):
    _set_verdict(healthy_doc, **verdict)
    assert CLUSTER_CHECKS["collective_bandwidth"](state_of(healthy_doc), PROD) == [expected]


def test_collective_check_table_output_is_read():
    log = "# all-reduce, 16 ranks, backend nccl, float32 sum\nPASS: peak bus bandwidth 478.20 GB/s, threshold " \
          "300.00 GB/s (average 231.10 GB/s)\n"
    assert collective_verdict(log) == {"peak_busbw_gbps": 478.2, "threshold_gbps": 300.0, "all_correct": True}


def test_collective_check_missing(healthy_doc):
    healthy_doc["pods"]["items"] = [p for p in healthy_doc["pods"]["items"]
                                    if "allreduce" not in p["metadata"]["name"]]
    assert CLUSTER_CHECKS["collective_bandwidth"](state_of(healthy_doc), PROD) == [
        "no collective bandwidth result: no pod ran workloads.collectives (the training job on pool train-p5 "
        "runs it, threshold 300 GB/s)"
    ]


def test_collective_check_applies_to_multi_node_efa_training_only(healthy_doc):
    dev = stack_expectation("dev", load_stack("dev"))
    assert dev.collective_threshold_gbps is None
    healthy_doc["pods"]["items"] = []
    assert CLUSTER_CHECKS["collective_bandwidth"](state_of(healthy_doc), dev) == []


@pytest.mark.parametrize("text, value", [
    ("8", 8), ("10256Mi", 10256 * 2**20), ("1Gi", 2**30), ("191450m", 191.45), ("2k", 2000), (None, 0),
])
def test_quantity(text, value):
    assert quantity(text) == value


def test_mirror_account_comes_from_a_running_image():
    state = cluster_state("prod-healthy.yaml")
    assert mirror_account(state, "me-central-1") == "111122223333"
    assert mirror_account(state, "eu-west-1") is None


# --- expectations and the debug pod ---------------------------------------------------


def test_expectations_follow_the_serving_config():
    assert PROD.served_model == load_stack("prod").inference.model_name
    assert all(stack_expectation(s, load_stack(s)).served_model is None
               for s in ("dev", "staging", "prod", "smb") if load_stack(s).inference is None)


def test_expectations_follow_the_training_plan():
    from infra.training_plan import resolve_training

    training = resolve_training(load_stack("prod"))
    assert PROD.training_pool == training.pool.name == "train-p5"
    assert PROD.collective_threshold_gbps == training.min_busbw_gbps


def test_expectations_come_from_the_catalog():
    p5 = lookup("p5.48xlarge")
    assert (P5.gpus, P5.efa_interfaces, P5.gpu_model) == (p5.gpus, p5.efa_interfaces, p5.gpu.model)
    assert P5.nodes == 4 and P5.hugepages_2m == 5120
    assert (P5.local_disks.strategy, P5.local_disks.mount_point) == ("RAID0", "/mnt/k8s-disks/0")
    assert (POOLS["inference"].local_disks.strategy, POOLS["inference"].local_disks.mount_point) == (
        "Mount", "/mnt/k8s-disks/1")
    assert POOLS["system"].local_disks is None and POOLS["system"].gpus == 0


@pytest.mark.parametrize("stack", ["dev", "staging", "prod", "smb"])
def test_every_stack_has_an_expectation(stack):
    expect = stack_expectation(stack, load_stack(stack))
    assert [p.name for p in expect.pools] == [p.name for p in load_stack(stack).node_pools]


def test_debug_pod_is_a_valid_pod_for_the_cluster_version():
    import kubernetes_validate

    from infra.versions import KUBERNETES_VERSION

    pod = debug_pod_manifest(P5_NODES[0], debug_pod_name(P5_NODES[0]), "kube-system",
                             "111122223333.dkr.ecr.me-central-1.amazonaws.com/mlplat/mirror/node-debug:1.37.0")
    kubernetes_validate.validate(pod, f"{KUBERNETES_VERSION}.0", strict=True)
    assert pod["spec"]["nodeName"] == P5_NODES[0]
    assert pod["spec"]["activeDeadlineSeconds"] > 0


def test_debug_pod_name_is_a_dns_label():
    import re

    name = debug_pod_name("ip-10-0-42-143.me-central-1.compute.internal")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name)
    assert name.startswith("mlplat-acceptance-ip-10-0-42-143-")


# --- the acceptance suite itself, replayed ---------------------------------------------


def run_suite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "tests/acceptance", "-p", "no:cacheprovider", "-q", "-rfs", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.slow
def test_suite_skips_with_its_reason_without_a_stack():
    done = run_suite()
    assert done.returncode == 0, done.stdout
    assert "16 skipped" in done.stdout
    assert "acceptance suite: not run against a cluster; after `pulumi up` run `pytest tests/acceptance " \
           "--stack <env>` with a kubeconfig" in done.stdout


@pytest.mark.slow
def test_suite_refuses_an_unknown_stack_in_one_line():
    done = run_suite("--stack", "nosuch")
    assert done.returncode == 4
    assert "ERROR: --stack nosuch: unknown stack 'nosuch'" in done.stderr


SCENARIO_FAILURES = {
    "healthy": {},
    "missing-efa-devices": {
        "test_nodes[efa_devices]": "node ip-10-0-41-87.me-central-1.compute.internal (p5.48xlarge, pool train-p5): "
                                   "16 uverbs devices in /dev/infiniband, expected 32 (one per EFA interface)",
    },
    "too-few-hugepages": {
        "test_nodes[hugepages]": "node ip-10-0-43-201.me-central-1.compute.internal (p5.48xlarge, pool train-p5): "
                                 "HugePages_Total is 512 pages of 2 MiB, at least 5120 are needed",
    },
    "no-driver": {
        "test_nodes[driver_loaded]": "node ip-10-0-40-11.me-central-1.compute.internal (p5.48xlarge, pool train-p5): "
                                     "NVIDIA driver not loaded: /proc/driver/nvidia/version is missing",
        "test_nodes[gpus_listed]": "node ip-10-0-40-11.me-central-1.compute.internal (p5.48xlarge, pool train-p5): "
                                   "nvidia-smi failed (exit 9)",
    },
    "plugin-not-ready": {
        "test_cluster[allocatable_devices]": "allocatable vpc.amazonaws.com/efa is 0, the catalog says 32",
        "test_cluster[device_plugins_ready]": "EFA device plugin pod kube-system/aws-efa-k8s-device-plugin-cw8vz "
                                              "(daemon set aws-efa-k8s-device-plugin) is not Ready "
                                              "(CrashLoopBackOff, 7 restarts)",
    },
    "model-not-ready": {
        "test_inference_smoke": "the inference smoke client got no good answer from model 'gpt': model 'gpt' "
                                "version latest is not ready",
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIO_FAILURES)
def test_suite_on_recorded_scenario(scenario, tmp_path):
    stack = build_replay(scenario, tmp_path)
    done = run_suite("--stack", stack, "--replay", str(tmp_path))
    expected = SCENARIO_FAILURES[scenario]
    failed = sorted(line.split("::")[-1].split(" ")[0] for line in done.stdout.splitlines()
                    if line.startswith("FAILED "))
    assert failed == sorted(expected), done.stdout
    assert done.returncode == (1 if expected else 0), done.stdout
    for test, message in expected.items():
        section = done.stdout.split(f"_ {test} _", 1)[1]
        assert message in section.split("\n_", 1)[0], done.stdout
    assert f"stack {stack}, replay of {tmp_path}: 9 nodes" in done.stdout
    assert "node checks on 9 nodes via recorded node roots" in done.stdout


# --- inference smoke --------------------------------------------------------------------


def test_triton_service_is_found_by_its_grpc_port():
    from infra.acceptance.inference import service_grpc_port, triton_service

    state = cluster_state("prod-healthy.yaml")
    service = triton_service(state)
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == ("inference", "triton")
    assert service_grpc_port(service) == 8001


def test_triton_service_without_running_pods_is_not_found(healthy_doc):
    from infra.acceptance.inference import triton_service

    for pod in healthy_doc["pods"]["items"]:
        if pod["metadata"]["name"].startswith("triton-"):
            pod["status"] = {"phase": "Pending"}
    assert triton_service(state_of(healthy_doc)) is None


def test_smoke_result_is_recorded_as_plain_data():
    from infra.acceptance.inference import check_inference_smoke, smoke_outcome
    from workloads.serve.client import SmokeResult

    result = SmokeResult("gpt-small", 4, 16, (4, 16, 50304), (11.8, 12.4), ())
    outcome = smoke_outcome(result)
    assert outcome == {"model": "gpt-small", "batch_size": 4, "sequence": 16, "shape": [4, 16, 50304],
                       "latencies_ms": [11.8, 12.4], "problems": []}
    assert check_inference_smoke(outcome, "gpt-small") == []


@pytest.mark.parametrize("outcome, expected", [
    ({"model": "gpt-small", "latencies_ms": [], "problems": ["model 'gpt-small' version latest is not ready"]},
     "the inference smoke client got no good answer from model 'gpt-small': model 'gpt-small' version latest "
     "is not ready"),
    ({"model": "gpt-small", "latencies_ms": [900.0, 1500.0],
      "problems": ["p50 latency 1200.0 ms is above the 1000 ms budget"]},
     "the inference smoke client got no good answer from model 'gpt-small': p50 latency 1200.0 ms is above the "
     "1000 ms budget"),
    ("no Service in front of Triton's gRPC port 8001 has running pods",
     "the inference smoke client could not ask model 'gpt-small': no Service in front of Triton's gRPC port 8001 "
     "has running pods"),
])
def test_inference_smoke_failures(outcome, expected):
    from infra.acceptance.inference import check_inference_smoke

    assert check_inference_smoke(outcome, "gpt-small") == [expected]


def test_inference_smoke_asks_nothing_of_a_stack_that_serves_nothing():
    from infra.acceptance.inference import check_inference_smoke

    assert check_inference_smoke(None, None) == []


# --- what the platform deploys is what the suite reads ---------------------------------


@pytest.mark.slow
def test_prod_deploys_the_workloads_the_suite_reads():
    """The offline preview of prod's cluster layer (every Kubernetes object): the GPU check
    runs on the training pool, the all-reduce check prints JSON with the stack's threshold,
    and the device plugin charts the suite recognises by their containers are the ones
    installed."""
    from infra.acceptance.cluster import COLLECTIVES_MODULE, GPU_CHECK_MODULE, module_container
    from tests.conftest import preview
    from tests.helpers import of_type

    result = preview("prod-cluster")
    checks = [d.inputs()["spec"]["template"] for d in of_type(result, "kubernetes:apps/v1:DaemonSet")
              if module_container(d.inputs()["spec"]["template"], GPU_CHECK_MODULE)]
    assert len(checks) == 1
    terms = checks[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": POOL_LABEL, "operator": "In", "values": [PROD.training_pool]}]

    commands = []
    for jobset in of_type(result, "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"):
        pod = jobset.inputs()["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        name = module_container(pod, COLLECTIVES_MODULE)
        commands += [c["command"] for c in pod["spec"]["containers"] if name and c["name"] == name]
    assert len(commands) == 1 and "--json" in commands[0]
    threshold = float(commands[0][commands[0].index("--min-busbw-gbps") + 1])
    assert threshold == PROD.collective_threshold_gbps

    charts = {r.inputs()["chart"].rsplit("/", 1)[-1] for r in of_type(result, "kubernetes:helm.sh/v4:Chart")}
    assert "aws-efa-k8s-device-plugin" in charts
    assert charts & {"nvidia-device-plugin", "gpu-operator"}

    # The smoke client's way in: a Service on Triton's gRPC port selecting the Deployment's pods.
    from infra.acceptance.inference import triton_service

    running = [{"metadata": {"namespace": d.inputs()["metadata"]["namespace"],
                             **d.inputs()["spec"]["template"]["metadata"]},
                "status": {"phase": "Running"}} for d in of_type(result, "kubernetes:apps/v1:Deployment")]
    services = tuple(s.inputs() for s in of_type(result, "kubernetes:core/v1:Service"))
    found = triton_service(ClusterState(nodes=(), pods=tuple(running), services=services))
    assert found is not None and found["metadata"]["namespace"] == load_stack("prod").inference.namespace


# --- the live reader, through the real Kubernetes client ---------------------------------


class _RecordedApiServer:
    """Serves a cluster fixture on the Kubernetes API's list and log paths over HTTP, so the
    live reader runs through the official client exactly as against a cluster."""

    LISTS = {"/api/v1/nodes": "nodes", "/apis/apps/v1/daemonsets": "daemonSets", "/api/v1/pods": "pods",
             "/apis/batch/v1/jobs": "jobs", "/api/v1/services": "services"}

    def __init__(self, document: dict):
        import http.server
        import threading
        from urllib.parse import parse_qs, urlparse

        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server hook's name
                url = urlparse(self.path)
                server.requests.append(self.path)
                parts = url.path.strip("/").split("/")
                if url.path in server.LISTS:
                    items = document.get(server.LISTS[url.path], {}).get("items", [])
                    self._send("application/json", json.dumps({"kind": "List", "items": items}))
                elif parts[-1] == "log" and parts[:3] == ["api", "v1", "namespaces"]:
                    key = f"{parts[3]}/{parts[5]}"
                    container = parse_qs(url.query).get("container", [""])[0]
                    self._send("text/plain", document["logs"].get(key, "") + f"# read from {container}\n")
                else:
                    self.send_error(404)

            def _send(self, kind: str, body: str) -> None:
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep the test output clean
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def kubeconfig(self, path: Path) -> Path:
        port = self.httpd.server_address[1]
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "recorded",
            "clusters": [{"name": "recorded", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "reader", "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "reader"}}],
        }))
        return path

    def close(self) -> None:
        self.httpd.shutdown()


def test_live_reader_reads_a_cluster_through_the_kubernetes_client(tmp_path):
    from infra.acceptance.live import LiveCluster

    document = cluster_document("prod-healthy.yaml")
    server = _RecordedApiServer(document)
    try:
        live = LiveCluster(str(server.kubeconfig(tmp_path / "kubeconfig")))
        state = live.read_state(log_pods)
    finally:
        server.close()
    assert [n["metadata"]["name"] for n in state.nodes] == [n["metadata"]["name"] for n in document["nodes"]["items"]]
    assert len(state.pods) == len(document["pods"]["items"]) and len(state.services) == 1
    # Only the check workloads' logs are fetched, each from the container that runs the check.
    assert sorted(state.logs) == sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                                        for p, _ in log_pods(state))
    assert state.logs[COLLECTIVES_POD].endswith("# read from allreduce\n")
    assert failures(run_cluster_checks(state)) == {}
