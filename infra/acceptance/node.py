"""Node checks: what one node must show after a deploy, read through pytest-testinfra.

`NodeView` reads a node's files and runs its commands through any testinfra host: a
privileged debug pod with the node's root at /host (commands run under `chroot /host`),
SSH to the node (root "/"), or a directory standing in for a node's root (the recorded
fixtures in CI). `collect` gathers everything the checks need in one pass; the checks are
plain functions over the gathered `NodeFacts` and the node's pool expectation.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from infra.acceptance.expect import PoolExpectation
from workloads.gpucheck import rdma

# Where the EKS NVIDIA AMI keeps the tools the checks run (fi_info lives with the EFA
# installer, not on the default PATH).
NODE_PATH = ("/opt/amazon/efa/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
INFINIBAND_DIR = "/dev/infiniband"
MEMINFO_FILE = "/proc/meminfo"
MDSTAT_FILE = "/proc/mdstat"
# PID 1's view: /proc/mounts is /proc/self/mounts, which from a debug pod would show the
# pod's own mount namespace instead of the node's.
MOUNTS_FILE = "/proc/1/mounts"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# One directory per RDMA device (HCA), its ports under ports/<n>/ (workloads/gpucheck/rdma.py).
RDMA_SYSFS_DIR = rdma.SYSFS_DIR

GPU_QUERY = "nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader"
# On a customer's node the GPU Operator's driver container keeps nvidia-smi and its libraries
# under its own root on the host (the host's PATH has none): the query runs there instead.
DRIVER_CONTAINER_ROOT = "/run/nvidia/driver"
EFA_QUERY = "fi_info -p efa"
# A request without a session token: IMDSv2 alone answers 401, IMDSv1 would answer 200.
IMDS_TOKENLESS = "curl -s -o /dev/null -w '%{http_code}' --max-time 5 http://169.254.169.254/latest/meta-data/"

NVIDIA_RUNTIME_BINARY = "nvidia-container-runtime"


@dataclass(frozen=True)
class Command:
    rc: int
    stdout: str
    stderr: str = ""

    def brief(self) -> str:
        """The first line the command printed, for a message."""
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return text[0] if text else "no output"


@dataclass(frozen=True)
class NodeView:
    """One node seen through a testinfra host.

    `root` is where the node's root file system appears on that host. With `chroot`, the
    node's own commands run inside `root` (a debug pod); without it they run on the host
    with `root`'s bin directories as the only PATH (SSH, where root is "/", or a recorded
    node directory, where nothing of the machine running the tests may leak in).
    """

    host: Any
    root: str = "/"
    chroot: bool = False

    def path(self, path: str) -> str:
        return posixpath.join(self.root, path.lstrip("/"))

    # One round trip per read (each is a `kubectl exec` from a debug pod), with commands
    # the debug image's busybox has as well as a full node does.
    def read(self, path: str) -> str | None:
        result = self.host.run("cat %s", self.path(path))
        return result.stdout if result.rc == 0 else None

    def listdir(self, path: str) -> tuple[str, ...] | None:
        result = self.host.run("ls -1 %s", self.path(path))
        return tuple(sorted(result.stdout.split())) if result.rc == 0 else None

    def read_rdma_ports(self) -> dict[str, dict[str, str]] | None:
        """Every RDMA port's attributes (rdma.ATTRIBUTES), keyed "<hca>/<port>", in one round
        trip: `grep -H .` prints each file's one line after its path. None: no RDMA port at all."""
        base = self.path(RDMA_SYSFS_DIR)
        files = " ".join(f"%s/*/ports/*/{attribute}" for attribute in rdma.ATTRIBUTES)
        result = self.host.run(f"grep -H . {files}", *([base] * len(rdma.ATTRIBUTES)))
        ports: dict[str, dict[str, str]] = {}
        for line in result.stdout.splitlines():
            path, sep, value = line.removeprefix(f"{base}/").partition(":")
            parts = path.split("/")
            if not sep or len(parts) != 4 or parts[1] != "ports" or not parts[2].isdigit():
                continue
            hca, _, port, attribute = parts
            ports.setdefault(rdma.port_key(hca, int(port)), {})[attribute] = value.strip()
        return ports or None

    def run(self, command: str) -> Command:
        if self.chroot:
            inner = f"PATH={':'.join(NODE_PATH)} {command}"
            result = self.host.run("chroot %s /bin/sh -c %s", self.root, inner)
        else:
            search = ":".join(self.path(d) for d in NODE_PATH)
            result = self.host.run(f"env PATH={shlex.quote(search)} /bin/sh -c %s", command)
        return Command(result.rc, result.stdout, result.stderr)


@dataclass(frozen=True)
class NodeFacts:
    """Everything the node checks read, gathered once per node."""

    name: str
    driver_version: str | None
    gpu_query: Command
    infiniband: tuple[str, ...] | None
    efa_query: Command
    meminfo: str | None
    mdstat: str | None
    mounts: str | None
    containerd_config: str | None
    imds_tokenless: Command
    # RDMA ports from sysfs, {"mlx5_0/1": {"state": "4: ACTIVE", ...}}; None: none at all.
    rdma_ports: dict[str, dict[str, str]] | None = None


def gpu_query(view: NodeView) -> Command:
    """nvidia-smi's GPU list: the node's own, else the GPU Operator's driver container's. A
    node with neither keeps the first answer (exit 127, not found)."""
    own = view.run(GPU_QUERY)
    if own.rc != 127:
        return own
    # chroot exits 125 where the directory is missing, 127 where nvidia-smi is.
    in_driver = view.run(f"chroot {DRIVER_CONTAINER_ROOT} {GPU_QUERY}")
    return own if in_driver.rc in (125, 127) else in_driver


def collect(name: str, view: NodeView) -> NodeFacts:
    return NodeFacts(
        name=name,
        driver_version=view.read(DRIVER_VERSION_FILE),
        gpu_query=gpu_query(view),
        infiniband=view.listdir(INFINIBAND_DIR),
        efa_query=view.run(EFA_QUERY),
        meminfo=view.read(MEMINFO_FILE),
        mdstat=view.read(MDSTAT_FILE),
        mounts=view.read(MOUNTS_FILE),
        containerd_config=view.read(CONTAINERD_CONFIG),
        imds_tokenless=view.run(IMDS_TOKENLESS),
        rdma_ports=view.read_rdma_ports(),
    )


# --- checks ----------------------------------------------------------------------------
# Each takes the node's facts and its pool's expectation and returns problem lines.

NodeCheck = Callable[[NodeFacts, PoolExpectation], list[str]]


def _subject(facts: NodeFacts, pool: PoolExpectation) -> str:
    return f"node {facts.name} ({pool.instance_type}, pool {pool.name})"


def check_driver_loaded(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    if not pool.gpus:
        return []
    if facts.driver_version is None:
        return [f"{_subject(facts, pool)}: NVIDIA driver not loaded: {DRIVER_VERSION_FILE} is missing"]
    if "NVRM version" not in facts.driver_version:
        return [f"{_subject(facts, pool)}: {DRIVER_VERSION_FILE} does not name an NVRM version"]
    return []


def listed_gpus(query: Command) -> list[str]:
    """GPU names from `nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader`."""
    names = []
    for line in query.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3 and fields[0].isdigit():
            names.append(fields[1])
    return names


def check_gpus_listed(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    if not pool.gpus:
        return []
    subject = _subject(facts, pool)
    if facts.gpu_query.rc != 0:
        return [f"{subject}: nvidia-smi failed (exit {facts.gpu_query.rc}): {facts.gpu_query.brief()}"]
    names = listed_gpus(facts.gpu_query)
    problems = []
    if len(names) != pool.gpus:
        problems.append(f"{subject}: nvidia-smi lists {len(names)} GPUs, the catalog says {pool.gpus}")
    if pool.gpu_model:
        # The catalog's short model ("h100", "a100-80gb") starts with the family nvidia-smi names.
        family = pool.gpu_model.split("-")[0].lower()
        wrong = sorted({n for n in names if family not in n.lower()})
        if wrong:
            problems.append(f"{subject}: nvidia-smi lists {', '.join(wrong)}; expected {pool.gpu_model} GPUs")
    return problems


def uverbs_devices(listing: tuple[str, ...] | None) -> list[str]:
    return [n for n in listing or () if re.fullmatch(r"uverbs\d+", n)]


def check_efa_devices(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    if not pool.efa_interfaces:
        return []
    found = len(uverbs_devices(facts.infiniband))
    if found == pool.efa_interfaces:
        return []
    where = INFINIBAND_DIR if facts.infiniband is not None else f"{INFINIBAND_DIR} (missing)"
    return [
        f"{_subject(facts, pool)}: {found} uverbs devices in {where}, expected {pool.efa_interfaces} "
        "(one per EFA interface)"
    ]


def check_libfabric_efa(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    if not pool.efa_interfaces:
        return []
    query = facts.efa_query
    if query.rc != 0:
        return [f"{_subject(facts, pool)}: `{EFA_QUERY}` failed (exit {query.rc}): {query.brief()}"]
    if not re.search(r"^provider:\s*efa\s*$", query.stdout, re.MULTILINE):
        return [f"{_subject(facts, pool)}: `{EFA_QUERY}` lists no efa provider"]
    return []


def meminfo_value(meminfo: str, key: str) -> str | None:
    match = re.search(rf"^{re.escape(key)}:\s*(.+?)\s*$", meminfo, re.MULTILINE)
    return match.group(1) if match else None


def check_hugepages(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    if not pool.hugepages_2m:
        return []
    subject = _subject(facts, pool)
    if facts.meminfo is None:
        return [f"{subject}: cannot read {MEMINFO_FILE}"]
    total = meminfo_value(facts.meminfo, "HugePages_Total")
    size = meminfo_value(facts.meminfo, "Hugepagesize")
    if size != "2048 kB":
        return [f"{subject}: huge page size is {size or 'unknown'}, expected 2048 kB"]
    pages = int(total) if total and total.isdigit() else 0
    if pages < pool.hugepages_2m:
        return [
            f"{subject}: HugePages_Total is {pages} pages of 2 MiB, at least {pool.hugepages_2m} "
            "are needed (EFA's libfabric and the training pods' hugepages-2Mi requests)"
        ]
    return []


def md_devices(mdstat: str | None) -> dict[str, str]:
    """Active md arrays from /proc/mdstat: {"md127": "raid0"}."""
    found = {}
    for match in re.finditer(r"^(md\d+)\s*:\s*active\s+(?:\(\w+\)\s+)?(raid\d+)", mdstat or "", re.MULTILINE):
        found[match.group(1)] = match.group(2)
    return found


def mount_source(mounts: str | None, mount_point: str) -> str | None:
    """The device mounted at `mount_point` in a /proc/<pid>/mounts table, the last one wins."""
    source = None
    for line in (mounts or "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1] == mount_point:
            source = fields[0]
    return source


def check_local_nvme(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    disks = pool.local_disks
    if disks is None:
        return []
    subject = _subject(facts, pool)
    source = mount_source(facts.mounts, disks.mount_point)
    if disks.strategy == "RAID0":
        if source is None:
            return [
                f"{subject}: nothing is mounted at {disks.mount_point}, where the RAID0 of its "
                f"{disks.disks} NVMe disks belongs"
            ]
        arrays = md_devices(facts.mdstat)
        if arrays.get(posixpath.basename(source)) != "raid0":
            found = ", ".join(f"{d} {level}" for d, level in sorted(arrays.items())) or "no active md array"
            return [f"{subject}: {disks.mount_point} is mounted from {source}, not an NVMe RAID0 ({found})"]
        return []
    if source is None:
        return [f"{subject}: nothing is mounted at {disks.mount_point}, where its NVMe disk belongs"]
    if not re.fullmatch(r"/dev/nvme\d+n\d+", source):
        return [f"{subject}: {disks.mount_point} is mounted from {source}, not an NVMe disk"]
    return []


def default_runtime_binary(config_text: str) -> tuple[str | None, str | None]:
    """(default runtime name, its BinaryName) from a containerd config, version 2 or 3.

    Version 2 keeps the CRI settings under plugins."io.containerd.grpc.v1.cri".containerd,
    version 3 under plugins."io.containerd.cri.v1.runtime".containerd: look in every plugin.
    """
    config = tomllib.loads(config_text)
    for plugin in (config.get("plugins") or {}).values():
        containerd = plugin.get("containerd") if isinstance(plugin, dict) else None
        if isinstance(containerd, dict) and containerd.get("default_runtime_name"):
            name = containerd["default_runtime_name"]
            runtime = (containerd.get("runtimes") or {}).get(name) or {}
            return name, (runtime.get("options") or {}).get("BinaryName")
    return None, None


def check_nvidia_runtime(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    if not pool.gpus:
        return []
    subject = _subject(facts, pool)
    if facts.containerd_config is None:
        return [f"{subject}: {CONTAINERD_CONFIG} is missing"]
    try:
        name, binary = default_runtime_binary(facts.containerd_config)
    except tomllib.TOMLDecodeError as err:
        return [f"{subject}: {CONTAINERD_CONFIG} is not valid TOML: {err}"]
    if not binary or posixpath.basename(binary) != NVIDIA_RUNTIME_BINARY:
        return [
            f"{subject}: containerd's default runtime is {name or 'not set'} ({binary or 'no BinaryName'}), "
            f"not the NVIDIA container runtime ({NVIDIA_RUNTIME_BINARY})"
        ]
    return []


def check_rdma_ports(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    """On a customer's RDMA node: each of the fabric's HCAs has its port ACTIVE and LinkUp,
    at the fabric's rate and link layer (the GPU check in pods judges the same way)."""
    fabric = pool.fabric
    if fabric is None:
        return []
    problems = rdma.ports_problems(facts.rdma_ports or {}, fabric.hcas, fabric.port_rate_gbps, fabric.link_layer)
    return [f"{_subject(facts, pool)}: {problem}" for problem in problems]


def check_imdsv2(facts: NodeFacts, pool: PoolExpectation) -> list[str]:
    if not pool.imds:
        return []
    answer = facts.imds_tokenless
    code = answer.stdout.strip()
    if answer.rc == 0 and code == "401":
        return []
    subject = _subject(facts, pool)
    if code == "200":
        return [f"{subject}: the instance metadata service answers without a token (IMDSv1 is on)"]
    return [
        f"{subject}: a token-less metadata request got {code or 'no answer'} (curl exit {answer.rc}), "
        "expected 401 from IMDSv2"
    ]


# The order is the order of the tests in tests/acceptance/test_nodes.py.
NODE_CHECKS: dict[str, NodeCheck] = {
    "driver_loaded": check_driver_loaded,
    "gpus_listed": check_gpus_listed,
    "efa_devices": check_efa_devices,
    "libfabric_efa": check_libfabric_efa,
    "hugepages": check_hugepages,
    "local_nvme": check_local_nvme,
    "rdma_ports": check_rdma_ports,
    "nvidia_runtime": check_nvidia_runtime,
    "imdsv2": check_imdsv2,
}


def node_problems(
    check: str,
    facts: Mapping[str, NodeFacts | str],
    pools: Mapping[str, PoolExpectation],
) -> list[str]:
    """One node check over every node: `facts` maps a node to what was read from it, or
    to why it could not be read (which then fails every node check, never passes one)."""
    problems = []
    for node, found in sorted(facts.items()):
        pool = pools[node]
        if isinstance(found, str):
            problems.append(f"node {node} ({pool.instance_type}, pool {pool.name}): not checked: {found}")
        else:
            problems.extend(NODE_CHECKS[check](found, pool))
    return problems


def collect_nodes(views: Mapping[str, NodeView | str], workers: int = 8) -> dict[str, NodeFacts | str]:
    """`collect` on many nodes at once (each read is a round trip to its node). A node
    that cannot be read keeps the reason instead of its facts."""
    from concurrent.futures import ThreadPoolExecutor

    def one(node: str, view: NodeView | str) -> NodeFacts | str:
        if isinstance(view, str):
            return view
        try:
            return collect(node, view)
        except Exception as err:  # noqa: BLE001 - a transport failure is a finding about the node
            return f"reading the node failed: {type(err).__name__}: {err}"

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {node: pool.submit(one, node, view) for node, view in views.items()}
        return {node: future.result() for node, future in futures.items()}
