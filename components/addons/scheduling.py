"""Scheduling: JobSet for multi-node training and Kueue with a queue per tenant."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.addons.charts import helm_chart
from components.addons.objects import create
from components.addons.queues import FlavorCapacity, cluster_queue, local_queue, resource_flavors
from components.addons.values import AddonContext, jobset_values, kueue_values
from components.tenancy_spec import Tenant


@dataclass(frozen=True)
class SchedulingArgs:
    context: AddonContext
    capacities: tuple[FlavorCapacity, ...]  # one per GPU instance type
    tenants: tuple[Tenant, ...]
    tenant_namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    chart_mirror: str = field(kw_only=True)  # the in-region chart repository (oci://...)
    depends_on: tuple[pulumi.Resource, ...] = ()  # the system namespaces; Prometheus CRDs


class Scheduling(pulumi.ComponentResource):
    """JobSet, then Kueue, then its flavors and ClusterQueues, then a LocalQueue named
    `default` in each tenant namespace."""

    local_queues: dict[str, pulumi.CustomResource]
    jobset: k8s.helm.v4.Chart
    kueue: k8s.helm.v4.Chart

    def __init__(self, name: str, args: SchedulingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:addons:Scheduling", name, None, opts)
        ctx = args.context
        base = list(args.depends_on)
        self.jobset = helm_chart("jobset", jobset_values(ctx), args.chart_mirror,
                                   pulumi.ResourceOptions(parent=self, depends_on=base))
        # Kueue after JobSet: it manages JobSets only if their CRD exists when it starts.
        self.kueue = helm_chart("kueue", kueue_values(ctx), args.chart_mirror,
                                  pulumi.ResourceOptions(parent=self, depends_on=[*base, self.jobset]))
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=[self.kueue])
        flavors = [create(f, after_kueue) for f in resource_flavors(args.capacities)]
        self.local_queues = {}
        for tenant in args.tenants:
            queue = create(cluster_queue(tenant, args.capacities),
                           pulumi.ResourceOptions(parent=self, depends_on=[self.kueue, *flavors]))
            namespace = args.tenant_namespaces.get(tenant.name)
            self.local_queues[tenant.name] = create(
                local_queue(tenant),
                pulumi.ResourceOptions(parent=self, depends_on=[queue, *([namespace] if namespace else [])]),
            )
        self.register_outputs({"localQueues": list(self.local_queues)})
