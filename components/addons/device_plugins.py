"""Device plugins: the NVIDIA device plugin (or the GPU Operator) and the EFA plugin."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.addons.charts import helm_chart
from components.addons.objects import create
from components.addons.values import (
    AddonContext,
    efa_device_plugin_values,
    gpu_operator_values,
    network_operator_values,
    nic_cluster_policy,
    nvidia_nic_rule,
    nvidia_device_plugin_values,
)


@dataclass(frozen=True)
class DevicePluginsArgs:
    context: AddonContext
    chart_mirror: str = field(kw_only=True)  # the in-region chart repository (oci://...)
    depends_on: tuple[pulumi.Resource, ...] = ()  # the namespaces, the GPU node pools


class DevicePlugins(pulumi.ComponentResource):
    """Advertises `nvidia.com/gpu` on GPU nodes and `vpc.amazonaws.com/efa` on EFA nodes.
    Exactly one of the NVIDIA device plugin and the GPU Operator is installed. On a
    customer's RDMA fabric, the Network Operator and its NicClusterPolicy advertise each
    fabric's RDMA resource, after the GPU Operator (whose NFD CRDs its NodeFeatureRule
    needs, and whose driver loads nvidia-peermem once the DOCA driver is in)."""

    releases: list[k8s.helm.v4.Chart]
    nic_cluster_policy: pulumi.CustomResource | None  # a customer's RDMA fabric

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:addons:DevicePlugins", name, None, opts)
        ctx = args.context
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.releases = []
        self.nic_cluster_policy = None
        if ctx.gpu_instance_types:
            if ctx.device_plugin_mode == "gpu-operator":
                self.releases.append(helm_chart("gpu-operator", gpu_operator_values(ctx), args.chart_mirror, child))
            else:
                self.releases.append(
                    helm_chart("nvidia-device-plugin", nvidia_device_plugin_values(ctx), args.chart_mirror, child)
                )
        if ctx.fabrics:
            gpu_operator = self.releases[-1]
            network = helm_chart("network-operator", network_operator_values(ctx), args.chart_mirror,
                                 pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[gpu_operator])))
            self.releases.append(network)
            # NFD's NodeFeatureRule kind comes with the GPU Operator's NFD.
            create(nvidia_nic_rule(), pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[gpu_operator])))
            # The operator's CRD comes with its chart: the policy once the chart is in.
            self.nic_cluster_policy = create(nic_cluster_policy(ctx), pulumi.ResourceOptions(
                parent=self, depends_on=[*args.depends_on, network]))
        if ctx.efa_instance_types:
            self.releases.append(
                helm_chart("aws-efa-k8s-device-plugin", efa_device_plugin_values(ctx), args.chart_mirror, child)
            )
        self.register_outputs({"releases": [r.name for r in self.releases]})
