"""One Helm chart of a pinned version, from upstream or the stack's OCI mirror.

`kubernetes.helm.v4.Chart`, not `helm.v3.Release`: the provider renders the chart
client-side and registers every object as its own resource, so `pulumi preview --diff`
shows each object that changes and the policy pack judges each object that will exist,
chart internals included. What that gives up, and how each chart copes, is in the README
("Helm charts: rendered and applied object by object"):
- Helm hooks do not run. Every hook a chart has is listed in `DROPPED_HOOKS` with why that
  is fine; kube-prometheus-stack's admission webhook, whose certificate only hooks make,
  is off (components/addons/values.py).
- No atomic rollback: a failed update stops at the object that failed, and the next
  `pulumi up` (or the previous commit) converges. Each object is awaited on its own.
- CRDs (the chart's crds/ folder) are ordinary resources: created before the objects that
  use them, and updated when the chart updates them, which Helm never does.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.addons.defaults import (with_default_resources, with_stated_token_use,
                                        with_unawaited_gpu_daemonsets)
from components.addons.values import NAMESPACES, chart_source

# Every Helm hook a chart of the platform has (rendered with the platform's values), which a
# helm.v4.Chart does not run, and why that is fine. The render check (tests/rendered) fails
# on a hook missing here and on an entry no chart renders any more.
_NFD_PRUNE = ("NFD's post-delete cleanup: removes NFD's node labels when the chart is uninstalled. Without it the "
              "labels stay on the nodes after an uninstall; they are only NFD's and GPU feature discovery's own, and "
              "a new install rewrites them.")
_GPU_OPERATOR_CRDS = ("Applies the chart's CRDs before an upgrade, because Helm never updates CRDs. A helm.v4.Chart "
                      "applies the CRDs as ordinary resources on every update, before the objects that use them.")
_EG_CERTGEN = ("Envoy Gateway's certgen writes the TLS secrets its controller and proxies authenticate each other "
               "with; without them the controller never starts. The platform applies the same Job and its "
               "account as ordinary objects before the chart (components/rollout_values.py certgen_objects).")
_KEEP_NCP = ("Marks a NicClusterPolicy that older charts deployed themselves with helm.sh/resource-policy: keep, so "
             "a chart upgrade does not delete it. The platform's NicClusterPolicy was never the chart's: it is the "
             "program's own object (components/addons/values.py nic_cluster_policy), which no chart upgrade touches.")
DROPPED_HOOKS: dict[tuple[str, str, str], str] = {
    ("network-operator", "ServiceAccount", "network-operator-hooks-keep-ncp-sa"): _KEEP_NCP,
    ("network-operator", "ClusterRole", "network-operator-hooks-keep-ncp-role"): _KEEP_NCP,
    ("network-operator", "ClusterRoleBinding", "network-operator-hooks-scale-binding"): _KEEP_NCP,
    ("network-operator", "Job", "network-operator-keep-ncp"): _KEEP_NCP,
    **{("gateway-helm", kind, "gateway-helm-certgen"): _EG_CERTGEN
       for kind in ("ServiceAccount", "Role", "RoleBinding", "Job")},
    **{("nvidia-device-plugin", kind, "nvidia-device-plugin-node-feature-discovery-prune"): _NFD_PRUNE
       for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job")},
    **{("gpu-operator", kind, "gpu-operator-node-feature-discovery-prune"): _NFD_PRUNE
       for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job")},
    ("gpu-operator", "ServiceAccount", "gpu-operator-upgrade-crd-hook-sa"): _GPU_OPERATOR_CRDS,
    ("gpu-operator", "ClusterRole", "gpu-operator-upgrade-crd-hook-role"): _GPU_OPERATOR_CRDS,
    ("gpu-operator", "ClusterRoleBinding", "gpu-operator-upgrade-crd-hook-binding"): _GPU_OPERATOR_CRDS,
    ("gpu-operator", "Job", "gpu-operator-upgrade-crd"): _GPU_OPERATOR_CRDS,
}


def default_resources(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """The transform every Chart carries: limits for chart containers that set none, and
    token use stated on the pods that call the API server (defaults.py API_CLIENTS), and GPU
    nodes' DaemonSets left unawaited (GPU_NODE_DAEMONSETS)."""
    if not args.custom or not args.type_.startswith("kubernetes:") or "kind" not in args.props:
        return None
    props, filled = with_default_resources(args.props)
    props, stated = with_stated_token_use(props)
    props, unawaited = with_unawaited_gpu_daemonsets(props)
    return pulumi.ResourceTransformResult(props, args.opts) if filled or stated or unawaited else None


def helm_chart(
    chart: str,
    values: dict[str, Any],
    mirror: str,
    opts: pulumi.ResourceOptions,
    namespace: str | None = None,
) -> k8s.helm.v4.Chart:
    source = chart_source(chart, mirror)
    return k8s.helm.v4.Chart(
        chart,
        name=chart,  # a fixed release name: Services and ServiceMonitors are named after it
        chart=source.chart,
        version=source.version,
        namespace=namespace or NAMESPACES[chart],
        values=values,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(transforms=[default_resources])),
    )
