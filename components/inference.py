"""`InferenceService`: Triton serving the stack's model from the models bucket, autoscaled
(see components/inference_spec.py for what each object holds and why)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components.addons.charts import helm_chart
from components.addons.objects import create
from components.inference_spec import (
    ADAPTER_RELEASE,
    ServingPlan,
    adapter_values,
    autoscaler,
    deployment,
    disruption_budget,
    load_balancer_service,
    namespace,
    network_policies,
    pod_monitor,
    service,
    service_account,
)
from components.tenancy_spec import MONITORING_NAMESPACE

@dataclass(frozen=True)
class MetricsAdapter:
    """prometheus-adapter, from the in-region mirror."""

    image_repository: str
    image_tag: str
    resource_metrics: bool  # also serve the resource metrics API (CPU autoscaling)
    chart_mirror: str = field(kw_only=True)  # the in-region chart repository (oci://...)


@dataclass(frozen=True)
class InferenceServiceArgs:
    plan: ServingPlan
    adapter: MetricsAdapter | None = None  # None: the cluster already serves the metric APIs
    # The Prometheus stack (its CRDs and its Prometheus), the device plugins, the nodes.
    depends_on: tuple[pulumi.Resource, ...] = ()


class InferenceService(pulumi.ComponentResource):
    """Triton's Deployment with its namespace, network policies and ServiceAccount, the
    ClusterIP Service (and the internal TLS NLB where asked for), the
    HorizontalPodAutoscaler with prometheus-adapter, the PodDisruptionBudget and the
    PodMonitor. The Pod Identity role the ServiceAccount gets is the cloud layer's
    (`serving_identity`, infra/inference.py)."""

    deployment: pulumi.CustomResource
    service: pulumi.CustomResource

    def __init__(self, name: str, args: InferenceServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:inference:InferenceService", name, None, opts)
        plan = args.plan
        after = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        ns = create(namespace(plan), after)
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        account = service_account(plan)
        sa = create(account, in_ns)
        # Deny-all first, so no pod ever runs without its fences.
        fences = [create(policy, in_ns) for policy in network_policies(plan)]

        # The Pod Identity association is the cloud layer's, applied before this layer, so
        # pods started here get credentials; the repository is fetched only at start.
        ready: list[pulumi.Resource] = [sa, *fences]
        # Created with no replicas (inference_spec.deployment says why); after that the publish
        # step and the HorizontalPodAutoscaler own the count, so the program never sends it
        # again: with server-side apply the provider leaves an ignored field to its other
        # managers (pulumi-kubernetes #2491, #2258).
        run = pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *ready],
                                     ignore_changes=["spec.replicas"])
        self.deployment = create(deployment(plan), run)
        self.service = create(service(plan), in_ns)
        balancer = load_balancer_service(plan)
        self.load_balancer = create(balancer, in_ns) if balancer is not None else None
        create(disruption_budget(plan), in_ns)

        # The PodMonitor is the Prometheus stack's CRD: it exists once the stack is in.
        scraped = pulumi.ResourceOptions(parent=self, depends_on=[ns, *args.depends_on])
        create(pod_monitor(plan), scraped)
        metrics_ready: list[pulumi.Resource] = [self.deployment]
        if args.adapter is not None:
            adapter = args.adapter
            metrics_ready.append(helm_chart(
                ADAPTER_RELEASE,
                adapter_values(adapter.image_repository, adapter.image_tag, adapter.resource_metrics),
                adapter.chart_mirror, scraped, namespace=MONITORING_NAMESPACE,
            ))
        create(autoscaler(plan), pulumi.ResourceOptions(parent=self, depends_on=metrics_ready))
        self.register_outputs({
            "namespace": plan.namespace,
            "service": plan.name,
            "model": plan.model,
        })
