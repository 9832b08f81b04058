"""GPU telemetry: the Prometheus stack on encrypted volumes, the DCGM exporter, GPU alerts."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.addons.alerts import AlertThresholds, gpu_prometheus_rule
from components.addons.charts import helm_chart
from components.addons.objects import create
from components.addons.values import NAMESPACES, AddonContext, dcgm_exporter_values, kube_prometheus_stack_values


@dataclass(frozen=True)
class GpuTelemetryArgs:
    context: AddonContext
    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    chart_mirror: str = field(kw_only=True)  # the in-region chart repository (oci://...)
    depends_on: tuple[pulumi.Resource, ...] = ()  # the monitoring namespace, the StorageClass


class GpuTelemetry(pulumi.ComponentResource):
    stack: k8s.helm.v4.Chart

    def __init__(self, name: str, args: GpuTelemetryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:addons:GpuTelemetry", name, None, opts)
        ctx = args.context
        self.stack = helm_chart(
            "kube-prometheus-stack", kube_prometheus_stack_values(ctx), args.chart_mirror,
            pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        # ServiceMonitor and PrometheusRule are the stack's CRDs: they exist once it is in.
        after_stack = pulumi.ResourceOptions(parent=self, depends_on=[self.stack, *args.depends_on])
        if ctx.gpu_instance_types:
            # With the GPU Operator, its own DCGM exporter is on (gpu_operator_values).
            if ctx.device_plugin_mode == "device-plugin":
                helm_chart("dcgm-exporter", dcgm_exporter_values(ctx), args.chart_mirror, after_stack)
            create(gpu_prometheus_rule(NAMESPACES["kube-prometheus-stack"], args.thresholds), after_stack)
        self.register_outputs({"release": self.stack.name})
