"""GPU alert rules (a PrometheusRule) from DCGM exporter metrics: utilisation,
temperature, XID errors, ECC errors and NVLink errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Labels the DCGM exporter puts on every GPU series; alerts keep them so a page names the
# node and the GPU.
GPU_LABELS = "Hostname, gpu, UUID, modelName"

NVLINK_ERRORS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
)


@dataclass(frozen=True)
class AlertThresholds:
    temperature_celsius: int = 85  # H100/A100 slow down from about 87 C
    idle_percent: int = 10  # an allocated GPU below this for 30 minutes is wasted money


def _rule(name: str, expr: str, duration: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": duration,
        "labels": {"severity": severity, "component": "gpu"},
        "annotations": {"summary": summary, "description": description},
    }


def gpu_alert_rules(thresholds: AlertThresholds = AlertThresholds()) -> list[dict[str, Any]]:
    t = thresholds
    nvlink = " + ".join(f"increase({m}[10m])" for m in NVLINK_ERRORS)
    return [
        _rule(
            "GpuAllocatedButIdle",
            f'avg by ({GPU_LABELS}, exported_namespace, exported_pod) '
            f'(avg_over_time(DCGM_FI_DEV_GPU_UTIL{{exported_pod!=""}}[30m])) < {t.idle_percent}',
            "30m", "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is allocated but idle",
            f"Pod {{{{ $labels.exported_namespace }}}}/{{{{ $labels.exported_pod }}}} holds a GPU that averaged "
            f"under {t.idle_percent}% utilisation for 30 minutes.",
        ),
        _rule(
            "GpuTemperatureHigh",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_GPU_TEMP) > {t.temperature_celsius}",
            "5m", "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} runs hot",
            f"GPU temperature is {{{{ $value }}}} C, above {t.temperature_celsius} C for 5 minutes; "
            "clocks will be throttled.",
        ),
        _rule(
            "GpuTemperatureCritical",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_GPU_TEMP) > {t.temperature_celsius + 5}",
            "2m", "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is near its shutdown temperature",
            f"GPU temperature is {{{{ $value }}}} C, above {t.temperature_celsius + 5} C; drain the node.",
        ),
        _rule(
            "GpuThermalThrottling",
            f"max by ({GPU_LABELS}) (rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m])) > 0",
            "10m", "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is thermally throttled",
            "The GPU spent time throttled by thermal limits in the last 10 minutes.",
        ),
        _rule(
            "GpuXidError",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_XID_ERRORS) > 0",
            "0m", "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
            "An XID error means a driver or hardware fault (e.g. 48 double-bit ECC, 79 fallen off "
            "the bus); check the XID catalogue and cordon the node if it repeats.",
        ),
        _rule(
            "GpuEccDoubleBitErrors",
            f"max by ({GPU_LABELS}) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m])) > 0",
            "0m", "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} has uncorrectable ECC errors",
            "Double-bit (uncorrectable) ECC errors corrupt results; drain the node and reset the GPU.",
        ),
        _rule(
            "GpuRowRemapFailure",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0",
            "0m", "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} failed to remap memory rows",
            "Row remapping failed: the GPU needs replacement.",
        ),
        _rule(
            "GpuNvlinkErrors",
            f"max by ({GPU_LABELS}) ({nvlink}) > 0",
            "5m", "warning",
            "NVLink errors on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}",
            "NVLink CRC or replay errors in the last 10 minutes slow collectives down; repeated "
            "errors point to a failing link.",
        ),
        _rule(
            "GpuNvlinkRecoveryErrors",
            f"max by ({GPU_LABELS}) (increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[10m])) > 0",
            "0m", "critical",
            "NVLink recovery errors on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}",
            "An NVLink had to be recovered: collectives on this node are unreliable until it is reset.",
        ),
        _rule(
            "GpuTelemetryMissing",
            'up{job=~".*dcgm-exporter.*"} == 0',
            "10m", "warning",
            "DCGM exporter target {{ $labels.instance }} is down",
            "No GPU metrics from this node: the alerts above cannot fire for it.",
        ),
    ]


def gpu_prometheus_rule(namespace: str, thresholds: AlertThresholds = AlertThresholds()) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpu-alerts", "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "mlplat"}},
        "spec": {"groups": [{"name": "gpu.rules", "rules": gpu_alert_rules(thresholds)}]},
    }
