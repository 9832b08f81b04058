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
