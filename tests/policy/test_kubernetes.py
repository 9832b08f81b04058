"""Kubernetes guardrails on objects and Helm values."""

from __future__ import annotations

from platform_policies import kubernetes as k8s
from platform_policies.workloads import helm_images, parse_image, pin_problem, pod_specs, registry_allowed

from tests.policy.cases import DAEMONSET, DEPLOYMENT, ECR, GOOD_CONTAINER, GOOD_POD, GPU_CONTAINER, HELM, deployment
from tests.policy.harness import NOT_APPLICABLE, check

JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def jobset(pod: dict) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2,
                                         "template": {"spec": {"template": {"spec": pod}}}}]}}


def test_pod_specs_are_found_at_any_depth():
    [(path, _)] = pod_specs(jobset(GOOD_POD))
    assert path == "spec.replicatedJobs[0].template.spec.template.spec"
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": GOOD_POD}
    assert [p for p, _ in pod_specs(pod)] == ["spec"]
    cron = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": GOOD_POD}}}}}
    assert [p for p, _ in pod_specs(cron)] == ["spec.jobTemplate.spec.template.spec"]
    assert pod_specs({"kind": "ConfigMap", "data": {"containers": "[]"}}) == []


def test_image_references():
    image = parse_image(f"{ECR}/mlplat/mirror/dcgm-exporter:4.2.3-4.1.1-ubuntu22.04")
    assert (image.host, image.path, image.tag) == (ECR, "mlplat/mirror/dcgm-exporter", "4.2.3-4.1.1-ubuntu22.04")
    assert parse_image("nginx").host == "docker.io" and parse_image("nginx").tag is None
    assert parse_image("localhost:5000/x:1").host == "localhost:5000"
    assert parse_image("ghcr.io/a/b@sha256:abc").digest == "sha256:abc"
    assert pin_problem(parse_image("nginx")) == "has no tag, so it means :latest"
    assert pin_problem(parse_image("nginx:stable")) == "uses the tag :stable, which names no version"
    assert pin_problem(parse_image("nginx@sha256:abc")) is None
    allowed = ["*.dkr.ecr.me-central-1.amazonaws.com"]
    assert registry_allowed(parse_image(f"{ECR}/x:1"), allowed)
    assert not registry_allowed(parse_image("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/x:1"), allowed)
    assert not registry_allowed(parse_image(f"evil.{ECR}/x:1"), allowed)
    assert registry_allowed(parse_image(f"{ECR}/mlplat/x:1"), [f"{ECR}/mlplat"])
    assert not registry_allowed(parse_image(f"{ECR}/mlplatform/x:1"), [f"{ECR}/mlplat"])


def test_helm_value_shapes():
    values = {
        "image": {"repository": f"{ECR}/mlplat/mirror/k8s-device-plugin", "tag": "v0.17.2"},
        "operator": {"repository": f"{ECR}/mlplat/mirror", "image": "gpu-operator", "version": "v25.3.0"},
        "prometheus": {"prometheusSpec": {"image": {"registry": ECR, "repository": "mlplat/mirror/prometheus",
                                                    "tag": "v3.4.1"}}},
        "sidecar": {"image": "quay.io/prometheus/busybox:latest"},
        "chartless": {"image": {"repository": "nvcr.io/nvidia/k8s-device-plugin"}},
    }
    found = {path: image for path, image in helm_images(values)}
    assert found["values.operator"].path == "mlplat/mirror/gpu-operator"
    assert found["values.prometheus.prometheusSpec.image"].host == ECR
    assert found["values.sidecar.image"].tag == "latest"
    # The chart's appVersion: a tag, pinned by the chart version but not by digest.
    assert pin_problem(found["values.chartless.image"]) == "leaves the image to the chart's tag, which names no digest"
    split = helm_images({"image": {"registry": ECR, "repository": "mlplat/prod/mirror/prometheus", "tag": "v3",
                                   "sha": "ab" * 32}})
    assert [image.digest for _, image in split] == ["sha256:" + "ab" * 32]  # kube-prometheus-stack's `sha`


def test_helm_release_images():
    release = {"chart": "nvidia-device-plugin", "name": "nvidia-device-plugin", "namespace": "kube-system",
               "values": {"image": {"repository": "nvcr.io/nvidia/k8s-device-plugin", "tag": "v0.17.2"}}}
    [message] = check(k8s.k8s_images_from_allowed_registries, HELM, release)
    assert message == ("Release kube-system/nvidia-device-plugin: values.image pulls nvcr.io/nvidia/k8s-device-plugin"
                       ":v0.17.2 from nvcr.io, which is not an allowed registry "
                       "['*.dkr.ecr.me-central-1.amazonaws.com']")
    [message] = check(k8s.k8s_images_pinned, HELM, release)
    assert message.startswith("Release kube-system/nvidia-device-plugin: values.image nvcr.io/nvidia/k8s-device-plugin"
                              ":v0.17.2 is referenced by the tag :v0.17.2 alone")
    pinned = {**release, "values": {"image": {"repository": f"{ECR}/mlplat/prod/mirror/k8s-device-plugin",
                                              "tag": f"v0.19.3@sha256:{'c' * 64}"}}}
    assert check(k8s.k8s_images_pinned, HELM, pinned) == []
    awaiting = {"awaitingPin": [{"repository": "mirror/k8s-device-plugin", "reason": "not pinned yet"}]}
    tagged = {**release, "values": {"image": {"repository": f"{ECR}/mlplat/prod/mirror/k8s-device-plugin",
                                              "tag": "v0.19.3"}}}
    assert check(k8s.k8s_images_pinned, HELM, tagged, config=awaiting) == []
    assert check(k8s.k8s_images_from_allowed_registries, HELM, {"chart": "x", "values": {}}) == NOT_APPLICABLE
    assert check(k8s.k8s_containers_have_limits, HELM, release) == NOT_APPLICABLE


def test_images_in_custom_resources():
    bad = jobset({"containers": [{**GOOD_CONTAINER, "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"}]})
    [message] = check(k8s.k8s_images_from_allowed_registries, JOBSET, bad)
    assert "docker.io" in message and "JobSet team-a/train" in message


def test_limits_cover_init_containers():
    pod = {**GOOD_POD, "initContainers": [{"name": "fetch", "image": f"{ECR}/x:1",
                                           "resources": {"limits": {"memory": "1Gi"}}}]}
    [message] = check(k8s.k8s_containers_have_limits, DEPLOYMENT, deployment(pod))
    assert message == ("Deployment team-a/app: spec.template.spec.initContainers[0] (fetch) has no cpu limit")
    assert check(k8s.k8s_containers_have_limits, DEPLOYMENT, deployment(pod),
                 config={"requiredLimits": ["memory"]}) == []


def test_gpu_pods():
    gpu = k8s.k8s_gpu_pods_use_limits_and_tolerate_taint
    assert check(gpu, DEPLOYMENT, deployment(GOOD_POD)) == NOT_APPLICABLE
    request_only = {**GPU_CONTAINER, "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"cpu": "1"}}}
    found = check(gpu, DEPLOYMENT, deployment({"containers": [request_only],
                                                "tolerations": [{"operator": "Exists"}]}))
    assert len(found) == 1 and "without a limit" in found[0]
    unequal = {**GPU_CONTAINER, "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}}
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    found = check(gpu, DEPLOYMENT, deployment({"containers": [unequal], "tolerations": tolerate}))
    assert len(found) == 1 and "differs from its limit" in found[0]
    wrong_effect = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]
    assert check(gpu, DEPLOYMENT, deployment({"containers": [GPU_CONTAINER], "tolerations": wrong_effect}))


def test_privileged_and_allow_list():
    plugin = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "efa", "namespace": "kube-system"},
              "spec": {"template": {"spec": {"hostNetwork": True, "containers": [
                  {**GOOD_CONTAINER, "securityContext": {"privileged": True}}]}}}}
    found = check(k8s.k8s_no_privileged_or_host_namespaces, DAEMONSET, plugin)
    assert len(found) == 2
    allow = {"allowedSystemWorkloads": [{"kind": "DaemonSet", "namespace": "kube-system", "name": "efa",
                                         "reason": "EFA plugin registers devices through the host"}]}
    assert check(k8s.k8s_no_privileged_or_host_namespaces, DAEMONSET, plugin, config=allow) == NOT_APPLICABLE
    other_namespace = {"allowedSystemWorkloads": [{**allow["allowedSystemWorkloads"][0], "namespace": "team-a"}]}
    assert check(k8s.k8s_no_privileged_or_host_namespaces, DAEMONSET, plugin, config=other_namespace)


def test_privileged_in_helm_values():
    release = {"chart": "node-exporter", "name": "node-exporter", "namespace": "monitoring",
               "values": {"hostNetwork": True, "image": {"repository": f"{ECR}/x", "tag": "1"}}}
    [message] = check(k8s.k8s_no_privileged_or_host_namespaces, HELM, release)
    assert message == "Release monitoring/node-exporter: values.hostNetwork is true"
    allow = {"allowedSystemWorkloads": [{"kind": "Release", "namespace": "monitoring", "name": "node-exporter",
                                         "reason": "node metrics need the host network namespace"}]}
    assert check(k8s.k8s_no_privileged_or_host_namespaces, HELM, release, config=allow) == NOT_APPLICABLE


def test_run_as_non_root():
    rule = k8s.k8s_workloads_run_as_non_root
    pod_level = {"containers": [{**GOOD_CONTAINER, "securityContext": {}}], "securityContext": {"runAsNonRoot": True}}
    assert check(rule, DEPLOYMENT, deployment(pod_level)) == []
    overridden = {**pod_level, "containers": [{**GOOD_CONTAINER, "securityContext": {"runAsNonRoot": False}}]}
    assert check(rule, DEPLOYMENT, deployment(overridden))
    root = {**pod_level, "containers": [{**GOOD_CONTAINER, "securityContext": {"runAsUser": 0}}]}
    [message] = check(rule, DEPLOYMENT, deployment(root))
    assert "runAsUser 0" in message
    assert check(rule, "kubernetes:core/v1:Namespace", {"metadata": {"name": "x"}}) == NOT_APPLICABLE


def test_root_asked_for_in_helm_values():
    rule = k8s.k8s_workloads_run_as_non_root
    release = {"chart": "dcgm-exporter", "name": "dcgm-exporter", "namespace": "monitoring",
               "values": {"securityContext": {"runAsNonRoot": False, "runAsUser": 0}}}
    found = check(rule, HELM, release)
    assert found == ["Release monitoring/dcgm-exporter: values.securityContext.runAsNonRoot asks to run as root",
                     "Release monitoring/dcgm-exporter: values.securityContext.runAsUser asks to run as root"]
    allow = {"exemptSystemWorkloads": [{"kind": "Release", "namespace": "monitoring", "name": "dcgm-exporter",
                                        "reason": "opens the GPU devices"}]}
    assert check(rule, HELM, release, config=allow) == NOT_APPLICABLE
    assert check(rule, HELM, {"chart": "kueue", "values": {"image": {"tag": "v0.13.0"}}}) == []
