"""Read everything the check judges from NVML into plain JSON-able data.

The decision logic (checks.py) never touches NVML: it judges these readings, so it is tested
on recorded readings, healthy and broken, on machines without GPUs. A reading the GPU does
not support (row remapping before Ampere, NVLink on PCIe cards) is recorded as None.
"""

from __future__ import annotations

from typing import Any


def _optional(nvml: Any, call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except nvml.NVMLError_NotSupported:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_gpu(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    ecc_mode = _optional(nvml, nvml.nvmlDeviceGetEccMode, handle)  # (current, pending)
    ecc_enabled = None if ecc_mode is None else bool(ecc_mode[0])
    ecc_uncorrected = None
    if ecc_enabled:
        ecc_uncorrected = _optional(nvml, nvml.nvmlDeviceGetTotalEccErrors, handle,
                                    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
    rows = _optional(nvml, nvml.nvmlDeviceGetRemappedRows, handle)
    remapped = None if rows is None else {
        "correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])
    }
    links = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            links.append(nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
            break  # past the GPU's last link (or no NVLink at all)
    return {
        "index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "memory_total_bytes": int(memory.total),
        "ecc_enabled": ecc_enabled,
        "ecc_volatile_uncorrected": ecc_uncorrected,
        "remapped_rows": remapped,
        "temperature_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        "slowdown_temperature_c": _optional(nvml, nvml.nvmlDeviceGetTemperatureThreshold, handle,
                                            nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "nvlinks_active": links,
        "clocks_event_reasons": int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
    }


def read_node(nvml: Any) -> dict[str, Any]:
    """All GPUs of this node. The caller has called nvmlInit."""
    return {
        "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
        "gpus": [read_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())],
    }


# --- recorded readings (--readings) -------------------------------------------------------
#
# A file of readings is judged as live ones are, so it must have their shape: every value
# a rule reads, of the type read_gpu gives it (None where the GPU may not support it).
# bool is tested before int: JSON's true is not a count.

MAX_RECORDED_GPUS = 64
_GPU_FIELDS: dict[str, tuple[str, bool]] = {  # name -> (kind, may be None)
    "index": ("int", False),
    "name": ("str", False),
    "memory_total_bytes": ("int", False),
    "ecc_enabled": ("bool", True),
    "ecc_volatile_uncorrected": ("int", True),
    "temperature_c": ("number", False),
    "slowdown_temperature_c": ("number", True),
    "clocks_event_reasons": ("int", False),
}
_ROW_FIELDS = {"correctable": "int", "uncorrectable": "int", "pending": "bool", "failure": "bool"}


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "bool"
    return {"int": isinstance(value, int), "str": isinstance(value, str),
            "number": isinstance(value, (int, float))}.get(kind, False)


def _gpu_problem(gpu: Any) -> str:
    if not isinstance(gpu, dict):
        return "is not an object"
    for name, (kind, optional) in _GPU_FIELDS.items():
        value = gpu.get(name)
        if not (_is(value, kind) or (optional and value is None)):
            return f"{name} is missing" if name not in gpu else f"{name} is {type(value).__name__}, not {kind}"
    links = gpu.get("nvlinks_active")
    if not isinstance(links, list) or not all(isinstance(link, bool) for link in links):
        return "nvlinks_active is not a list of true/false"
    rows = gpu.get("remapped_rows")
    if rows is not None and not (isinstance(rows, dict) and all(_is(rows.get(k), t) for k, t in _ROW_FIELDS.items())):
        return "remapped_rows is not null or {correctable, uncorrectable, pending, failure}"
    return ""


def check_recorded(node: Any, source: str) -> dict[str, Any]:
    """`node` if it has the shape of read_node's readings (plus rdma_ports); otherwise
    ValueError, one line naming `source` and the first value that is wrong."""
    if not isinstance(node, dict) or not isinstance(node.get("gpus"), list):
        raise ValueError(f"{source}: is not recorded readings (an object with a list of gpus)")
    if len(node["gpus"]) > MAX_RECORDED_GPUS:
        raise ValueError(f"{source}: lists {len(node['gpus']):,} GPUs; a node has at most {MAX_RECORDED_GPUS}")
    for position, gpu in enumerate(node["gpus"]):
        problem = _gpu_problem(gpu)
        if problem:
            raise ValueError(f"{source}: gpus[{position}]: {problem}")
    ports = node.get("rdma_ports")
    if ports is not None and not (isinstance(ports, dict) and all(
            port is None or (isinstance(port, dict) and all(isinstance(v, str) for v in port.values()))
            for port in ports.values())):
        raise ValueError(f"{source}: rdma_ports is not an object of ports, each null or of text attributes")
    return node
