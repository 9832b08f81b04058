"""`InferenceService`: Triton serving the stack's model from the models bucket, autoscaled,
rolled out by Argo Rollouts behind Envoy Gateway (see components/inference_spec.py and
components/rollout_spec.py for what each object holds and why)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components.addons.charts import helm_chart
from components.addons.objects import create, create_fenced
from components.addons.values import MirrorImage
from components.inference_spec import (
    ADAPTER_RELEASE,
    ENVOY_GATEWAY_NAMESPACE,
    adapter_values,
    autoscaler,
    customer_objects,
    deployment,
    disruption_budget,
    load_balancer_service,
    namespace,
    network_policies,
    pod_monitor,
    service_account,
)
from components.drift_spec import DriftPlan, drift_rules, pushgateway_objects
from components.drift_spec import objects as drift_objects
from components.request_log_spec import objects as request_log_objects
from components.rollout_spec import (
    RolloutPlan,
    analysis_template,
    auth_rules,
    canary_rules,
    client_headers,
    envoy_proxy,
    gateway,
    gateway_class,
    gateway_clients,
    gateway_monitor,
    grpc_route,
    http_route,
    outputs_policy,
    rollout,
    security_policy,
    variant_services,
)
from components.rollout_values import (
    ARGO_ROLLOUTS_CHART,
    ARGO_ROLLOUTS_NAMESPACE,
    ENVOY_GATEWAY_CHART,
    argo_rollouts_values,
    certgen_objects,
    envoy_gateway_values,
)
from components.system_network_spec import ingress_policies
from components.tenancy_spec import MONITORING_NAMESPACE, SYSTEM_NAMESPACES, system_namespace

@dataclass(frozen=True)
class MetricsAdapter:
    """prometheus-adapter, from the in-region mirror."""

    image_repository: str
    image_tag: str
    resource_metrics: bool  # also serve the resource metrics API (CPU autoscaling)
    chart_mirror: str = field(kw_only=True)  # the in-region chart repository (oci://...)


@dataclass(frozen=True)
class RolloutControllers:
    """Envoy Gateway and Argo Rollouts, from the in-region mirrors."""

    envoy_gateway: MirrorImage
    envoy: str  # the proxies' image (image_uri)
    pushgateway: str  # where the drift checks push (image_uri)
    argo_rollouts: MirrorImage
    plugin: str  # the platform's image holding Argo's Gateway API plugin (image_uri)
    chart_mirror: str = field(kw_only=True)


@dataclass(frozen=True)
class InferenceServiceArgs:
    plan: RolloutPlan
    controllers: RolloutControllers
    drift: DriftPlan | None = None  # the scheduled drift check of the served version
    adapter: MetricsAdapter | None = None  # None: the cluster already serves the metric APIs
    # The Prometheus stack (its CRDs and its Prometheus), the device plugins, the nodes.
    depends_on: tuple[pulumi.Resource, ...] = ()


class InferenceService(pulumi.ComponentResource):
    """Triton's Deployment (the template) with its namespace, network policies and
    ServiceAccount; Argo Rollouts' Rollout that runs its pods as a stable and a canary
    version, with the AnalysisTemplate that aborts a failing canary; Envoy Gateway's
    Gateway, the only way in, with the SecurityPolicy that authenticates and authorizes
    every request and the weighted routes to the two versions' Services (and the internal
    TLS NLB in front of the gateway where asked for); the HorizontalPodAutoscaler with
    prometheus-adapter, the PodDisruptionBudget, the PodMonitors and the per-variant and
    gateway rules. The Pod Identity role the ServiceAccount gets is the cloud layer's
    (`serving_identity`, infra/inference.py)."""

    deployment: pulumi.CustomResource
    rollout: pulumi.CustomResource

    def __init__(self, name: str, args: InferenceServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("mlplat:inference:InferenceService", name, None, opts)
        rollout_plan = args.plan
        plan = rollout_plan.serving
        tools = args.controllers
        after = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        # The controllers first: their CRDs (Gateway API, Envoy Gateway, Argo Rollouts) must
        # exist before anything of their kinds.
        controller_namespaces = {ns: create_fenced(system_namespace(SYSTEM_NAMESPACES[ns]), ingress_policies(ns), after)
                                 for ns in (ENVOY_GATEWAY_NAMESPACE, ARGO_ROLLOUTS_NAMESPACE)}
        in_gateway_ns = pulumi.ResourceOptions(parent=self, depends_on=controller_namespaces[ENVOY_GATEWAY_NAMESPACE])
        # Envoy Gateway's certificates: its chart makes them in a hook the provider drops.
        certgen = [create(obj, in_gateway_ns) for obj in certgen_objects(tools.envoy_gateway.uri)]
        envoy_gateway = helm_chart(
            ENVOY_GATEWAY_CHART, envoy_gateway_values(tools.envoy_gateway), tools.chart_mirror,
            pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *certgen]),
            namespace=ENVOY_GATEWAY_NAMESPACE)
        argo = helm_chart(
            ARGO_ROLLOUTS_CHART, argo_rollouts_values(tools.argo_rollouts, tools.plugin), tools.chart_mirror,
            pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on,
                                                            *controller_namespaces[ARGO_ROLLOUTS_NAMESPACE]]),
            namespace=ARGO_ROLLOUTS_NAMESPACE)

        ns = create(namespace(plan), after)
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        sa = create(service_account(plan), in_ns)
        # Deny-all first, so no pod ever runs without its fences.
        fences = [create(policy, in_ns) for policy in network_policies(plan)]
        fences += [create(obj, in_ns) for obj in customer_objects(plan)]  # a customer's CA

        # The Pod Identity association is the cloud layer's, applied before this layer, so
        # pods started here get credentials; the repository is fetched only at start.
        ready: list[pulumi.Resource] = [sa, *fences]
        # The template the Rollout runs, at zero replicas for good (inference_spec.deployment).
        run = pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *ready],
                                     ignore_changes=["spec.replicas"])
        self.deployment = create(deployment(plan), run)
        backends = [create(svc, in_ns) for svc in variant_services(rollout_plan)]
        if rollout_plan.request_log is not None:
            # The logger's Service, where the routes mirror their sample, exists before them.
            backends += [create(obj, in_ns) for obj in request_log_objects(rollout_plan.request_log)]
        create(disruption_budget(plan), in_ns)

        # The gateway: its class and proxies (cluster-wide and Envoy Gateway's namespace),
        # the Gateway, who may pass, and the weighted routes.
        with_gateway = pulumi.ResourceOptions(parent=self, depends_on=[ns, envoy_gateway])
        # The proxies' listener ports, before a proxy exists, in a namespace that denies ingress.
        clients = create(gateway_clients(rollout_plan), pulumi.ResourceOptions(
            parent=self, depends_on=controller_namespaces[ENVOY_GATEWAY_NAMESPACE]))
        proxy = create(envoy_proxy(rollout_plan, tools.envoy), pulumi.ResourceOptions(
            parent=self, depends_on=[ns, envoy_gateway, clients]))
        klass = create(gateway_class(), pulumi.ResourceOptions(parent=self, depends_on=[envoy_gateway, proxy]))
        entry = create(gateway(rollout_plan), pulumi.ResourceOptions(parent=self, depends_on=[ns, klass]))
        policy = security_policy(rollout_plan)
        guarded = [entry, create(client_headers(rollout_plan), pulumi.ResourceOptions(parent=self, depends_on=[entry])),
                   *([create(policy, pulumi.ResourceOptions(parent=self, depends_on=[entry]))] if policy else [])]
        # Argo's plugin moves the routes' weights during a rollout; a later `pulumi up`
        # must not move them back in the middle of one. A route's rules are one atomic list
        # to the API server, so they are ignored whole: a change to them (the mirror's
        # sample) is applied with `pulumi up --target` on the route between rollouts.
        routed = pulumi.ResourceOptions(parent=self, depends_on=[*guarded, *backends],
                                        ignore_changes=["spec.rules"])
        routes = [create(grpc_route(rollout_plan), routed), create(http_route(rollout_plan), routed)]
        outputs = outputs_policy(rollout_plan)
        if outputs is not None:
            create(outputs, pulumi.ResourceOptions(parent=self, depends_on=routes))
        balancer = load_balancer_service(plan)
        self.load_balancer = create(balancer, with_gateway) if balancer is not None else None

        # The Rollout runs the pods once every route, backend and its analysis exist.
        with_argo = pulumi.ResourceOptions(parent=self, depends_on=[ns, argo])
        analysis = create(analysis_template(rollout_plan), with_argo)
        self.rollout = create(rollout(rollout_plan), pulumi.ResourceOptions(
            parent=self, depends_on=[argo, self.deployment, analysis, *routes], ignore_changes=["spec.replicas"]))

        # Monitoring: the Prometheus stack's CRDs exist once the stack is in.
        scraped = pulumi.ResourceOptions(parent=self, depends_on=[ns, *args.depends_on])
        create(pod_monitor(plan), scraped)
        create(canary_rules(rollout_plan), scraped)
        create(auth_rules(rollout_plan), scraped)
        if args.drift is not None:
            # The Pushgateway the check pushes to, the alert on what it pushes, and the
            # check itself in this namespace, inside its fences.
            for obj in pushgateway_objects(tools.pushgateway, args.drift):
                create(obj, scraped)
            create(drift_rules(args.drift), scraped)
            *before, job = drift_objects(args.drift)  # its ServiceAccount and egress, then the CronJob
            check = [create(obj, pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *fences]))
                     for obj in before]
            create(job, pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *fences, *check]))
        create(gateway_monitor(rollout_plan), pulumi.ResourceOptions(parent=self, depends_on=[
            *controller_namespaces[ENVOY_GATEWAY_NAMESPACE], *args.depends_on]))
        metrics_ready: list[pulumi.Resource] = [self.rollout]
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
            "rollout": plan.name,
            "model": plan.model,
        })
