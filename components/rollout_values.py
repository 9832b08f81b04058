"""Helm values of the two controllers the inference rollout runs on, Envoy Gateway and Argo
Rollouts, and the one hook of theirs the platform applies itself.

Both come from the in-region mirror by digest, run two replicas with a disruption budget,
with requests and limits, as non-root with nothing to escalate. Plain functions of plain
data: nothing here imports Pulumi.
"""

from __future__ import annotations

from typing import Any

from components.addons.values import SMALL, MirrorImage
from components.rollout_spec import ENVOY_GATEWAY_NAMESPACE, GATEWAY_PLUGIN
from components.training_spec import CONTAINER_SECURITY

ENVOY_GATEWAY_CHART = "gateway-helm"
ARGO_ROLLOUTS_CHART = "argo-rollouts"
ARGO_ROLLOUTS_NAMESPACE = "argo-rollouts"
# The plugin's release asset this platform pins (workloads/images/rollouts-plugin.Dockerfile
# downloads it with the same sum); the controller refuses a binary with another.
PLUGIN_SHA256 = "e44baf9271d087466c7fec35e704758b9f3d26b32b490089a06e6be44bdc9978"
# Where the controller finds the plugin (copied there by the init container); it copies it
# on to `plugin-bin` under its working directory, a volume of the chart's own.
PLUGIN_SOURCE = "/plugins/gatewayapi"
CONTROLLER_RESOURCES = {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def envoy_gateway_values(image: MirrorImage) -> dict[str, Any]:
    """The Gateway API controller. No topology injector: its webhook's certificate is
    made only by the certgen hook's optional half, and zone labels on proxy pods are not
    needed (the proxies' own spread comes from the EnvoyProxy). No rate-limit service."""
    return {
        "global": {"images": {"envoyGateway": {"image": image.uri, "pullPolicy": "IfNotPresent"}}},
        "deployment": {
            "replicas": 2,
            "envoyGateway": {"resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                           "limits": {"cpu": "1", "memory": "1Gi"}}},
        },
        "podDisruptionBudget": {"minAvailable": 1},
        "topologyInjector": {"enabled": False},
        "config": {"envoyGateway": {
            "gateway": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
            "provider": {"type": "Kubernetes"},
            "logging": {"level": {"default": "info"}},
        }},
    }


def certgen_objects(image: str, release: str = ENVOY_GATEWAY_CHART) -> list[dict[str, Any]]:
    """The chart's pre-install hook, as ordinary objects: `envoy-gateway certgen` writes the
    TLS secrets the controller and the proxies authenticate each other with (xDS over
    mTLS). The provider drops every hook, and without these secrets the controller never
    starts. The Job runs once; certgen leaves existing secrets alone, so it is not re-run
    on upgrades (Helm's pre-upgrade run does the same). tests/rendered compares this with
    the chart's own hook."""
    name = f"{release}-certgen"
    meta = {"name": name, "namespace": ENVOY_GATEWAY_NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "mlplat", "app.kubernetes.io/component": "certgen"}}
    return [
        # As the chart's: no token by default; the Job's pod asks for one (it writes secrets).
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ENVOY_GATEWAY_NAMESPACE}]},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {
            "backoffLimit": 3,
            "template": {"metadata": {"labels": {"app": "certgen"}}, "spec": {
                "serviceAccountName": name,
                "automountServiceAccountToken": True,
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "envoy-gateway-certgen",
                    "image": image,
                    "imagePullPolicy": "Always",
                    "command": ["envoy-gateway", "certgen"],
                    "args": ["--disable-topology-injector"],
                    "env": [{"name": "ENVOY_GATEWAY_NAMESPACE",
                             "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                            {"name": "KUBERNETES_CLUSTER_DOMAIN", "value": "cluster.local"}],
                    "resources": SMALL,
                    "securityContext": {**CONTAINER_SECURITY, "privileged": False},
                }],
            }},
        }},
    ]


def argo_rollouts_values(image: MirrorImage, plugin_image: str) -> dict[str, Any]:
    """The rollout controller, with only the Gateway API traffic router: its plugin is
    copied from the platform's image into the pod by an init container, and the controller
    checks its sum before it starts it. No dashboard (an unauthenticated UI)."""
    providers = ("istio", "smi", "ambassador", "awsLoadBalancerController", "awsAppMesh", "traefik", "apisix",
                 "contour", "glooPlatform")
    return {
        "installCRDs": True,
        "keepCRDs": True,
        "controller": {
            "replicas": 2,
            "image": {"registry": image.registry, "repository": image.repository, "tag": image.tag},
            "resources": CONTROLLER_RESOURCES,
            "metrics": {"enabled": True, "serviceMonitor": {"enabled": True}},
            "pdb": {"enabled": True, "maxUnavailable": 1},
            "initContainers": [{
                "name": "gatewayapi-plugin",
                "image": plugin_image,
                "imagePullPolicy": "IfNotPresent",
                "volumeMounts": [{"name": "plugins", "mountPath": "/shared"}],
                "resources": SMALL,
                "securityContext": {**CONTAINER_SECURITY, "runAsNonRoot": True, "runAsUser": 65532},
            }],
            # The chart mounts its own writable `plugin-bin` where the controller copies
            # plugins to; this volume is where the init container puts it.
            "volumes": [{"name": "plugins", "emptyDir": {"sizeLimit": "256Mi"}}],
            "volumeMounts": [{"name": "plugins", "mountPath": "/plugins", "readOnly": True}],
            "trafficRouterPlugins": [{"name": GATEWAY_PLUGIN, "location": f"file://{PLUGIN_SOURCE}",
                                      "sha256": PLUGIN_SHA256}],
        },
        "providerRBAC": {"enabled": True, "providers": {**{p: False for p in providers}, "gatewayAPI": True}},
        # The chart's pod security context sets only runAsNonRoot; the init container above
        # sets no seccomp profile, so the pod takes the runtime's default filter here (the
        # restricted profile argo-rollouts' namespace enforces requires one).
        "podSecurityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "dashboard": {"enabled": False},
        "notifications": {"secret": {"create": False}},
    }

