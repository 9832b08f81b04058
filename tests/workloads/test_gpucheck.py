"""GPU node check: the decision logic on NVML readings (healthy and each failure), the
reader against a stand-in NVML, and the command's exit codes, NVML absent included; on an
RDMA node, its HCAs' ports read from a stand-in sysfs and judged."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from workloads.gpucheck import cli
from workloads.gpucheck.checks import Expected, evaluate
from workloads.gpucheck.rdma import read_ports
from workloads.gpucheck.readings import read_node

FIXTURES = Path(__file__).parent / "fixtures" / "gpucheck"
P5 = Expected(gpus=8, model="h100", memory_gib=80, instance_type="p5.48xlarge")
G5 = Expected(gpus=1, model="a10g", memory_gib=24, instance_type="g5.2xlarge")


def reading(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.mark.parametrize("name, expected", [("p5.48xlarge-healthy", P5), ("g5.2xlarge-healthy", G5)])
def test_healthy_nodes_pass(name, expected):
    report = evaluate(reading(name), expected)
    assert report.healthy and report.findings == []


def gpu3(**changes):
    def mutate(node):
        node["gpus"][3].update(changes)
    return mutate


def drop_gpu(node):
    node["gpus"].pop()


def link_down(node):
    node["gpus"][3]["nvlinks_active"][7] = False


FAILURES = [
    (drop_gpu, "gpu_count", None, "7 GPUs visible, p5.48xlarge has 8"),
    (gpu3(name="NVIDIA A100-SXM4-80GB"), "gpu_model", 3, "'NVIDIA A100-SXM4-80GB' is not a H100"),
    (gpu3(memory_total_bytes=40 * 2**30), "memory", 3, "40.0 GiB of memory, expected about 80 GiB"),
    (gpu3(ecc_volatile_uncorrected=2), "ecc", 3, "2 volatile uncorrectable ECC errors since the last driver load"),
    (gpu3(remapped_rows={"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}), "row_remap", 3,
     "a row remap is pending: reset the GPU (or reboot the node)"),
    (gpu3(remapped_rows={"correctable": 0, "uncorrectable": 9, "pending": False, "failure": True}), "row_remap", 3,
     "row remapping failed: the GPU needs replacing"),
    (gpu3(temperature_c=88), "temperature", 3, "88 C is at or above the slowdown threshold 87 C"),
    (link_down, "nvlink", 3, "17 of 18 NVLink links up"),
    (gpu3(clocks_event_reasons=0x40 | 0x04), "throttle", 3, "clocks held down by hardware thermal slowdown (reasons 0x44)"),
    (gpu3(clocks_event_reasons=0x08), "throttle", 3, "clocks held down by hardware slowdown (reasons 0x8)"),
    (gpu3(clocks_event_reasons=0x80), "throttle", 3, "clocks held down by power brake slowdown (reasons 0x80)"),
]


@pytest.mark.parametrize("mutate, check, gpu, message", FAILURES, ids=[f[1] + "-" + f[3][:20] for f in FAILURES])
def test_each_failure_is_named(mutate, check, gpu, message):
    node = reading("p5.48xlarge-healthy")
    mutate(node)
    report = evaluate(node, P5)
    assert not report.healthy
    assert [(f.check, f.severity, f.gpu, f.message) for f in report.findings] == [(check, "fail", gpu, message)]


@pytest.mark.parametrize("changes, message", [
    ({"temperature_c": 83}, "83 C is within 5 C of the slowdown threshold 87 C"),
    ({"ecc_enabled": False, "ecc_volatile_uncorrected": None}, "ECC is disabled: memory errors go undetected"),
])
def test_warnings_leave_the_node_healthy(changes, message):
    node = reading("p5.48xlarge-healthy")
    node["gpus"][0].update(changes)
    report = evaluate(node, P5)
    assert report.healthy
    assert [(f.severity, f.message) for f in report.findings] == [("warn", message)]


def test_software_power_cap_under_load_is_normal():
    node = reading("p5.48xlarge-healthy")
    node["gpus"][0]["clocks_event_reasons"] = 0x04 | 0x10  # power cap, sync boost
    assert evaluate(node, P5).healthy


def test_l4_is_not_mistaken_for_l40s():
    node = reading("g5.2xlarge-healthy")
    node["gpus"][0]["name"] = "NVIDIA L40S"
    report = evaluate(node, Expected(1, "l4", 24))
    assert [f.check for f in report.findings] == ["gpu_model"]


# --- the reader, against a stand-in for pynvml -----------------------------------------


class FakeNvml:
    """pynvml's functions and constants, answering from a table. Errors are pynvml's own."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_InvalidArgument = pynvml.NVMLError_InvalidArgument
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN

    def __init__(self, gpus: list[dict]) -> None:
        self.gpus = gpus

    def _unsupported(self):
        return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlSystemGetDriverVersion(self):
        return "570.172.08"

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetName(self, h):
        return h["name"].encode()  # older bindings return bytes

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=h["memory"], used=0, free=h["memory"])

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        assert (error_type, counter) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        return h["ecc"]

    def nvmlDeviceGetRemappedRows(self, h):
        if h["rows"] is None:
            raise self._unsupported()
        return h["rows"]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 40

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        assert kind == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return 87

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= len(h["links"]):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT if h["links"] else pynvml.NVML_ERROR_NOT_SUPPORTED)
        return h["links"][link]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return h["reasons"]


def fake_gpu(**overrides):
    gpu = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "memory": 81559 * 2**20, "ecc": 0,
           "rows": (0, 0, 0, 0), "links": [1] * 18, "reasons": 1}
    return {**gpu, **overrides}


def test_reader_records_what_nvml_reports():
    nvml = FakeNvml([fake_gpu(), fake_gpu(uuid="GPU-2", ecc=3, rows=(0, 2, 1, 0), links=[1] * 17 + [0], reasons=0x40)])
    node = read_node(nvml)
    assert node["driver_version"] == "570.172.08"
    first, second = node["gpus"]
    assert first["name"] == "NVIDIA H100 80GB HBM3" and first["memory_total_bytes"] == 81559 * 2**20
    assert first["nvlinks_active"] == [True] * 18
    assert second["ecc_volatile_uncorrected"] == 3
    assert second["remapped_rows"] == {"correctable": 0, "uncorrectable": 2, "pending": True, "failure": False}
    report = evaluate(node, Expected(2, "h100", 80))
    assert sorted(f.check for f in report.findings) == ["ecc", "nvlink", "row_remap", "throttle"]


def test_reader_tolerates_features_a_gpu_lacks():
    node = read_node(FakeNvml([fake_gpu(name="NVIDIA A10G", memory=23028 * 2**20, rows=None, links=[])]))
    gpu = node["gpus"][0]
    assert gpu["remapped_rows"] is None and gpu["nvlinks_active"] == []
    assert evaluate(node, G5).healthy


# --- the command ------------------------------------------------------------------------


def test_expectations_come_from_the_catalog():
    assert cli.expected_from_catalog("p5.48xlarge") == P5
    assert cli.expected_from_catalog("P4DE.24xlarge") == Expected(8, "a100-80gb", 80, "p4de.24xlarge")


def test_recorded_healthy_readings_exit_0(capsys):
    assert cli.main(["--instance-type", "p5.48xlarge", "--readings", str(FIXTURES / "p5.48xlarge-healthy.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["healthy"] is True and out["expected"]["gpus"] == 8 and len(out["readings"]["gpus"]) == 8


def test_unhealthy_readings_exit_1_with_findings(tmp_path, capsys):
    node = reading("p5.48xlarge-healthy")
    node["gpus"][5]["ecc_volatile_uncorrected"] = 1
    path = tmp_path / "r.json"
    path.write_text(json.dumps(node))
    assert cli.main(["--instance-type", "p5.48xlarge", "--readings", str(path)]) == cli.EXIT_UNHEALTHY
    out = json.loads(capsys.readouterr().out)
    assert out["healthy"] is False and [f["gpu"] for f in out["findings"]] == [5]


def test_without_nvml_one_line_and_its_own_exit_code(monkeypatch, capsys):
    def no_library():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)  # what nvmlInit raises without a driver

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    assert cli.main(["--instance-type", "p5.48xlarge"]) == cli.EXIT_NO_NVML == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("gpucheck: NVML is not available on this node (no NVIDIA driver): "
                            "NVML Shared Library Not Found\n")


def test_other_nvml_errors_have_another_code(monkeypatch, capsys):
    def no_permission():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    monkeypatch.setattr(pynvml, "nvmlInit", no_permission)
    assert cli.main(["--instance-type", "p5.48xlarge"]) == cli.EXIT_NVML_ERROR
    assert capsys.readouterr().err.startswith("gpucheck: NVML error: ")


@pytest.mark.parametrize("argv, message", [
    ([], "gpucheck: give --instance-type, or all of --expect-gpus, --expect-model and --expect-memory-gib\n"),
    (["--instance-type", "m7i.large"], "gpucheck: m7i.large has no GPUs\n"),
])
def test_usage_errors_exit_2(argv, message, capsys):
    assert cli.main(argv) == cli.EXIT_USAGE
    assert capsys.readouterr().err == message


def test_unknown_instance_type_gets_the_catalog_line(capsys):
    from infra.catalog import unknown_type_message

    assert cli.main(["--instance-type", "p5.48xlarg"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == f"gpucheck: {unknown_type_message('p5.48xlarg')}\n"


def test_explicit_expectations_override_the_catalog(capsys):
    argv = ["--instance-type", "p5.48xlarge", "--expect-gpus", "1", "--readings", str(FIXTURES / "g5.2xlarge-healthy.json"),
            "--expect-model", "A10G", "--expect-memory-gib", "24"]
    assert cli.main(argv) == 0


def test_watch_keeps_the_status_file_only_while_healthy(tmp_path, capsys):
    status, heartbeat = tmp_path / "healthy", tmp_path / "heartbeat"
    readings = tmp_path / "r.json"
    readings.write_text((FIXTURES / "p5.48xlarge-healthy.json").read_text())
    args = cli.build_parser().parse_args(["--instance-type", "p5.48xlarge", "--readings", str(readings),
                                          "--watch", "0", "--status-file", str(status),
                                          "--heartbeat-file", str(heartbeat)])
    cli.watch(args, P5, rounds=1)
    assert status.exists() and heartbeat.exists()
    broken = reading("p5.48xlarge-healthy")
    broken["gpus"][0]["temperature_c"] = 99
    readings.write_text(json.dumps(broken))
    heartbeat.unlink()
    cli.watch(args, P5, rounds=2)
    assert not status.exists()
    assert heartbeat.exists()  # the loop still turns: liveness holds while readiness fails
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["healthy"] for r in reports] == [True, False, False]


# --- an RDMA node's HCA ports (InfiniBand, RoCE), read from sysfs ---------------------------

HCAS = tuple(f"mlx5_{i}" for i in range(8))
IB_NODE = Expected(8, "h100", 80, hcas=HCAS, port_rate_gbps=400, link_layer="InfiniBand")
UP = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}


def fake_sysfs(root: Path, ports: dict[str, dict[str, str]]) -> Path:
    """/sys/class/infiniband/<hca>/ports/1/<attribute> as the kernel writes them (one line)."""
    for hca, attributes in ports.items():
        port = root / "class" / "infiniband" / hca / "ports" / "1"
        port.mkdir(parents=True)
        for name, value in attributes.items():
            (port / name).write_text(value + "\n")
    return root


def test_ports_are_read_from_sysfs(tmp_path):
    sysfs = fake_sysfs(tmp_path, {"mlx5_0": UP, "mlx5_1": {**UP, "state": "1: DOWN"}})
    assert read_ports(("mlx5_0", "mlx5_1", "mlx5_2"), str(sysfs)) == {
        "mlx5_0/1": UP, "mlx5_1/1": {**UP, "state": "1: DOWN"}, "mlx5_2/1": None}


def ib_node(**port_changes: dict) -> dict:
    node = reading("p5.48xlarge-healthy")
    node["rdma_ports"] = {f"{hca}/1": {**UP, **port_changes.get(hca, {})} for hca in HCAS}
    return node


def test_an_rdma_node_with_every_port_up_is_healthy():
    report = evaluate(ib_node(), IB_NODE)
    assert report.healthy and report.findings == []


@pytest.mark.parametrize("changes, message", [
    ({"mlx5_4": {"state": "1: DOWN", "phys_state": "2: Polling"}},
     "mlx5_4 port 1 is 1: DOWN (phys_state 2: Polling), expected 4: ACTIVE and 5: LinkUp"),
    ({"mlx5_4": {"rate": "200 Gb/sec (4X HDR)"}}, "mlx5_4 port 1 runs at 200 Gb/sec (4X HDR), expected 400 Gb/sec"),
    ({"mlx5_4": {"link_layer": "Ethernet"}}, "mlx5_4 port 1: link layer is Ethernet, expected InfiniBand"),
])
def test_each_port_problem_fails_the_node(changes, message):
    report = evaluate(ib_node(**changes), IB_NODE)
    assert [(f.check, f.severity, f.gpu, f.message) for f in report.findings] == [("rdma_port", "fail", None, message)]


def test_ports_are_not_judged_without_expected_hcas():
    node = ib_node(mlx5_0={"state": "1: DOWN"})
    assert evaluate(node, P5).healthy  # an EFA node: no HCAs expected


def test_the_command_reads_the_ports_from_sysfs(tmp_path, monkeypatch, capsys):
    """Live mode: NVML (stood in for) and sysfs, judged together; the report records both."""
    gpus = reading("p5.48xlarge-healthy")
    monkeypatch.setattr(cli, "read_node", lambda nvml: json.loads(json.dumps(gpus)))
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    sysfs = fake_sysfs(tmp_path, {hca: UP if hca != "mlx5_6" else {**UP, "state": "1: DOWN", "phys_state": "3: Disabled"}
                                  for hca in HCAS})
    argv = ["--expect-gpus", "8", "--expect-model", "h100", "--expect-memory-gib", "80", "--expect-hcas", ",".join(HCAS),
            "--expect-port-rate-gbps", "400", "--expect-link-layer", "InfiniBand", "--sysfs", str(sysfs)]
    assert cli.main(argv) == cli.EXIT_UNHEALTHY
    out = json.loads(capsys.readouterr().out)
    assert [f["message"] for f in out["findings"]] == [
        "mlx5_6 port 1 is 1: DOWN (phys_state 3: Disabled), expected 4: ACTIVE and 5: LinkUp"]
    assert out["readings"]["rdma_ports"]["mlx5_0/1"] == UP
    assert out["expected"]["hcas"] == list(HCAS)


def test_recorded_readings_carry_the_ports(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(ib_node()))
    argv = ["--instance-type", "p5.48xlarge", "--expect-hcas", ",".join(HCAS), "--expect-port-rate-gbps", "400",
            "--expect-link-layer", "InfiniBand", "--readings", str(path)]
    assert cli.main(argv) == cli.EXIT_HEALTHY
    path.write_text(json.dumps(ib_node(mlx5_1={"state": "1: DOWN"})))
    assert cli.main(argv) == cli.EXIT_UNHEALTHY


def test_port_expectations_need_the_hcas(capsys):
    argv = ["--instance-type", "p5.48xlarge", "--expect-port-rate-gbps", "400"]
    assert cli.main(argv) == cli.EXIT_USAGE
    assert capsys.readouterr().err == "gpucheck: --expect-port-rate-gbps and --expect-link-layer need --expect-hcas\n"
