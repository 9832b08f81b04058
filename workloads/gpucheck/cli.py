"""`python -m workloads.gpucheck`: check this node's GPUs, print JSON, exit with a verdict.

Exit codes: 0 healthy, 1 unhealthy (the JSON says why), 2 bad usage, 3 NVML absent (no
NVIDIA driver on this node: one line on stderr), 4 another NVML error.

On an RDMA node, --expect-hcas (with --expect-port-rate-gbps and --expect-link-layer) also
checks each HCA's port in sysfs (rdma.py). With --watch SECONDS it checks forever and keeps --status-file present only while the node
is healthy, for a readiness probe: the DaemonSet then shows at a glance which nodes fail.

Bad usage is one line and exit 2. Numbers are bounded as they are read
(workloads/arguments.py): --expect-gpus 1 to 64, --expect-memory-gib 1 to 1,024 (GiB per
GPU), --expect-port-rate-gbps 1 to 3,200, --watch 0 to 86,400 seconds; HCA names are the
kernel's (mlx5_0). --readings is read bounded (workloads/inputs.py: a regular file of at
most 1 MiB of JSON) and checked for the shape the rules judge (readings.check_recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from workloads.arguments import printable, quoted, real, whole
from workloads.gpucheck.checks import Expected, evaluate
from workloads.gpucheck.rdma import HCA_NAME, read_ports
from workloads.gpucheck.readings import check_recorded, read_node

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2
EXIT_NO_NVML = 3
EXIT_NVML_ERROR = 4

MAX_GPUS = 64  # per node: the largest have 8 (16 on a few)
MAX_MEMORY_GIB = 1024  # per GPU: the largest has 192
MAX_PORT_RATE_GBPS = 3200  # per HCA port: NDR is 400, XDR 800
MAX_WATCH_S = 86400.0  # a day between checks
READINGS_LIMIT = 1 << 20  # recorded readings of a node are a few kilobytes


class _Parser(argparse.ArgumentParser):
    """argparse's refusals as the check's own usage errors: one line, exit 2."""

    def error(self, message: str) -> None:
        self.exit(EXIT_USAGE, f"gpucheck: {message}\n")


def _hcas(text: str) -> tuple[str, ...]:
    """mlx5_0,mlx5_1 -> the names, each a kernel's RDMA device name (it becomes a sysfs path)."""
    names = tuple(h for h in text.split(",") if h)
    for name in names:
        if not HCA_NAME.fullmatch(name):
            raise argparse.ArgumentTypeError(f"{quoted(name)} is not an RDMA device name as the kernel gives it "
                                             "(e.g. mlx5_0)")
    return names


def expected_from_catalog(instance_type: str) -> Expected:
    """What an instance type should have, from the instance catalog (no Pulumi inside)."""
    from infra.catalog import UnknownInstanceType, lookup, unknown_type_message

    try:
        it = lookup(instance_type)
    except UnknownInstanceType:
        raise ValueError(unknown_type_message(instance_type)) from None
    if not it.has_gpu or it.gpu is None:
        raise ValueError(f"{instance_type} has no GPUs")
    return Expected(gpus=it.gpus, model=it.gpu.model, memory_gib=it.gpu.memory_gib, instance_type=it.name)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m workloads.gpucheck", description=__doc__.split("\n\n")[0])
    p.add_argument("--instance-type", help="look the expectations up in the instance catalog, e.g. p5.48xlarge")
    p.add_argument("--expect-gpus", type=whole(1, MAX_GPUS), metavar="N",
                   help="GPUs the node must have, 1 to 64 (overrides the catalog)")
    p.add_argument("--expect-model", type=printable(64), help="catalog GPU model, e.g. h100 (overrides the catalog)")
    p.add_argument("--expect-memory-gib", type=whole(1, MAX_MEMORY_GIB), metavar="GIB",
                   help="marketed memory per GPU, 1 to 1024 (overrides the catalog)")
    p.add_argument("--expect-hcas", type=_hcas, default=(),
                   help="RDMA devices whose port must be up, comma-separated: mlx5_0,mlx5_1")
    p.add_argument("--expect-port-rate-gbps", type=whole(1, MAX_PORT_RATE_GBPS), metavar="GBPS",
                   help="with --expect-hcas: each port's rate, e.g. 400 (1 to 3200)")
    p.add_argument("--expect-link-layer", choices=("InfiniBand", "Ethernet"),
                   help="with --expect-hcas: each port's link layer (Ethernet: RoCE)")
    p.add_argument("--sysfs", default="/sys", help="where sysfs is mounted (default /sys)")
    p.add_argument("--readings", help="judge recorded readings (JSON) instead of reading NVML and sysfs")
    p.add_argument("--watch", type=real(0, MAX_WATCH_S), metavar="SECONDS",
                   help="check every this many seconds (0 to 86400), forever")
    p.add_argument("--status-file", help="with --watch: present while healthy, removed otherwise")
    p.add_argument("--heartbeat-file", help="with --watch: touched after every check, healthy or not")
    return p


def expectations(args: argparse.Namespace) -> Expected:
    base = expected_from_catalog(args.instance_type) if args.instance_type else None
    gpus = args.expect_gpus if args.expect_gpus is not None else (base.gpus if base else None)
    model = args.expect_model or (base.model if base else None)
    memory = args.expect_memory_gib if args.expect_memory_gib is not None else (base.memory_gib if base else None)
    if gpus is None or model is None or memory is None:
        raise ValueError("give --instance-type, or all of --expect-gpus, --expect-model and --expect-memory-gib")
    hcas = tuple(args.expect_hcas)
    if (args.expect_port_rate_gbps is not None or args.expect_link_layer) and not hcas:
        raise ValueError("--expect-port-rate-gbps and --expect-link-layer need --expect-hcas")
    return Expected(gpus, model.lower(), memory, base.instance_type if base else "", hcas=hcas,
                    port_rate_gbps=args.expect_port_rate_gbps or 0, link_layer=args.expect_link_layer or "")


def read_live(exp: Expected, sysfs: str = "/sys") -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        node = read_node(pynvml)
    finally:
        pynvml.nvmlShutdown()
    if exp.hcas:
        node["rdma_ports"] = read_ports(exp.hcas, sysfs)
    return node


def read_recorded(path: str) -> dict:
    """Recorded readings, read bounded and checked for the shape the rules judge."""
    # Here, not at the top: the checks image judges live readings and carries no YAML
    # library, which workloads.inputs loads.
    from workloads import inputs

    return check_recorded(inputs.read_json(path, "readings file", READINGS_LIMIT), path)


def check_once(args: argparse.Namespace, exp: Expected) -> int:
    import pynvml

    if args.readings:
        try:
            node = read_recorded(args.readings)
        except ValueError as err:  # readings that cannot be judged (inputs.InputError among them)
            print(f"gpucheck: {err}", file=sys.stderr)
            return EXIT_USAGE
        return judge(node, exp)
    try:
        node = read_live(exp, args.sysfs)
    except (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded) as err:
        print(f"gpucheck: NVML is not available on this node (no NVIDIA driver): {err}", file=sys.stderr)
        return EXIT_NO_NVML
    except pynvml.NVMLError as err:
        print(f"gpucheck: NVML error: {err}", file=sys.stderr)
        return EXIT_NVML_ERROR
    return judge(node, exp)


def judge(node: dict, exp: Expected) -> int:
    """Print the report of `node`'s readings; its exit code."""
    report = evaluate(node, exp)
    print(json.dumps(report.to_dict(node), sort_keys=True), flush=True)
    return EXIT_HEALTHY if report.healthy else EXIT_UNHEALTHY


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        exp = expectations(args)
    except (ValueError, KeyError) as err:
        print(f"gpucheck: {err.args[0] if err.args else err}", file=sys.stderr)
        return EXIT_USAGE
    if args.watch is None:
        return check_once(args, exp)
    problem = _unwritable(args)
    if problem:
        print(f"gpucheck: {problem}", file=sys.stderr)
        return EXIT_USAGE
    watch(args, exp)
    return EXIT_HEALTHY


def _unwritable(args: argparse.Namespace) -> str:
    """Why --status-file or --heartbeat-file cannot be kept, or "": each must be a regular
    file (or absent) in a directory this user can write; a directory or a FIFO there would
    fail the loop on its first round."""
    for flag, value in (("--status-file", args.status_file), ("--heartbeat-file", args.heartbeat_file)):
        if value is None:
            continue
        path = Path(value)
        if path.exists() and not path.is_file():
            return f"{flag} {value}: is not a regular file; name a file the check may create and remove"
        if not os.access(path.parent, os.W_OK | os.X_OK) or not path.parent.is_dir():
            return f"{flag} {value}: its directory {path.parent} is missing or cannot be written"
    return ""


def watch(args: argparse.Namespace, exp: Expected, rounds: int | None = None) -> None:
    """Check every --watch seconds (`rounds` times, or forever), keeping --status-file
    present exactly while the last check passed and touching --heartbeat-file each round
    (a liveness probe tells a stuck loop from a failing node by it)."""
    status = Path(args.status_file) if args.status_file else None
    heartbeat = Path(args.heartbeat_file) if args.heartbeat_file else None
    done = 0
    while rounds is None or done < rounds:
        code = check_once(args, exp)
        if status is not None:
            if code == EXIT_HEALTHY:
                status.touch()
            else:
                status.unlink(missing_ok=True)
        if heartbeat is not None:
            heartbeat.touch()
        done += 1
        if rounds is None or done < rounds:
            time.sleep(args.watch)
