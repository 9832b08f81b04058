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
    assert pin_problem(parse_image(f"nginx@sha256:{'a' * 64}")) is None
    allowed = [ECR]
    assert registry_allowed(parse_image(f"{ECR}/x:1"), allowed)
    assert not registry_allowed(parse_image("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/x:1"), allowed)
    assert not registry_allowed(parse_image(f"evil.{ECR}/x:1"), allowed)
    assert not registry_allowed(parse_image(f"{ECR}.evil.io/x:1"), allowed)


def test_a_registry_is_named_by_its_account_never_a_wildcard():
    """The red team's image from another account's ECR in the same region."""
    foreign = parse_image(f"999999999999.dkr.ecr.me-central-1.amazonaws.com/mlplat/prod/serve@sha256:{'e' * 64}")
    assert not registry_allowed(foreign, [ECR])
    assert not registry_allowed(foreign, ["*.dkr.ecr.me-central-1.amazonaws.com"])
    assert not registry_allowed(parse_image(f"{ECR}/x:1"), ["*.dkr.ecr.me-central-1.amazonaws.com"])
    pod = deployment({**GOOD_POD, "containers": [{**GOOD_CONTAINER, "image": foreign.raw}]})
    [message] = check(k8s.k8s_images_from_allowed_registries, DEPLOYMENT, pod,
                      config={"allowedRegistries": [ECR, "*.dkr.ecr.me-central-1.amazonaws.com"]})
    assert "999999999999" in message and "never a wildcard" in message
    # With no config, nothing is allowed: the stack's config names its account.
    assert check(k8s.k8s_images_from_allowed_registries, DEPLOYMENT, deployment(GOOD_POD))
    assert check(k8s.k8s_images_from_allowed_registries, DEPLOYMENT, deployment(GOOD_POD),
                 config={"allowedRegistries": [ECR]}) == []


def test_the_eks_add_on_registry_only_for_what_eks_publishes():
    eks = "759879836304.dkr.ecr.me-central-1.amazonaws.com"
    coredns = deployment({**GOOD_POD, "containers": [{**GOOD_CONTAINER,
                                                      "image": f"{eks}/eks/coredns:v1.11.4@sha256:{'a' * 64}"}]})
    other = deployment({**GOOD_POD, "containers": [{**GOOD_CONTAINER,
                                                    "image": f"{eks}/some/other:v1@sha256:{'a' * 64}"}]})
    rule = k8s.k8s_images_from_allowed_registries
    assert check(rule, DEPLOYMENT, coredns, config={"allowedRegistries": [ECR, f"{eks}/eks"]}) == []
    assert check(rule, DEPLOYMENT, other, config={"allowedRegistries": [ECR, f"{eks}/eks"]})
    # The whole add-on account is too broad: the entry allows nothing, and the message says so.
    [message] = check(rule, DEPLOYMENT, coredns, config={"allowedRegistries": [ECR, eks]})
    assert "what EKS publishes" in message


def test_a_digest_is_sha256_and_64_hex_characters():
    for bad in ("sha256:123456", f"sha256:{'g' * 64}", f"sha256:{'A' * 64}", f"sha512:{'a' * 128}",
                f"sha256:{'a' * 65}"):
        assert "malformed digest" in pin_problem(parse_image(f"{ECR}/x:1@{bad}")), bad
    assert pin_problem(parse_image(f"{ECR}/x:1@sha256:{'0123456789abcdef' * 4}")) is None
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
    [message] = check(k8s.k8s_images_from_allowed_registries, HELM, release, config={"allowedRegistries": [ECR]})
    assert message == ("Release kube-system/nvidia-device-plugin: values.image pulls nvcr.io/nvidia/k8s-device-plugin"
                       f":v0.17.2 from nvcr.io, which is not an allowed registry ['{ECR}']")
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


PSS = k8s.k8s_pod_security_standards
PLUGIN_IMAGE = f"{ECR}/mlplat/prod/mirror/aws-efa-k8s-device-plugin"


def daemon_set(pod: dict, name: str = "efa", namespace: str = "kube-system") -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"template": {"metadata": {}, "spec": pod}}}


def controls(found: list[str]) -> set[str]:
    """The control ids named in the rule's messages (`[profile/control] ...`)."""
    return {m.split("] ", 1)[0].rsplit("/", 1)[1] for m in found if "] " in m}


def test_a_restricted_pod_passes_in_every_namespace_and_every_kind():
    for namespace in ("team-a", "kube-system", "default"):
        assert check(PSS, DEPLOYMENT, deployment(GOOD_POD, namespace=namespace)) == []
    assert check(PSS, JOBSET, jobset(GOOD_POD)) == []
    assert check(PSS, "kubernetes:core/v1:Namespace", {"metadata": {"name": "x"}}) == NOT_APPLICABLE


# Each trick breaks one control of the restricted profile, on a pod that otherwise meets it.
C = GOOD_CONTAINER
SC = GOOD_CONTAINER["securityContext"]
TRICKS = {
    "hostProcess": {**GOOD_POD, "securityContext": {**GOOD_POD["securityContext"],
                                                   "windowsOptions": {"hostProcess": True}}},
    "hostNamespaces": {**GOOD_POD, "hostPID": True},
    "privileged": {**GOOD_POD, "containers": [{**C, "securityContext": {**SC, "privileged": True}}]},
    "hostPathVolumes": {**GOOD_POD, "volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
    "hostPorts": {**GOOD_POD, "containers": [{**C, "ports": [{"containerPort": 80, "hostPort": 8080}]}]},
    "appArmorProfile": {**GOOD_POD, "containers": [{**C, "securityContext": {
        **SC, "appArmorProfile": {"type": "Unconfined"}}}]},
    "seLinuxOptions": {**GOOD_POD, "securityContext": {**GOOD_POD["securityContext"],
                                                      "seLinuxOptions": {"type": "spc_t"}}},
    "procMount": {**GOOD_POD, "containers": [{**C, "securityContext": {**SC, "procMount": "Unmasked"}}]},
    "seccompProfile_baseline": {**GOOD_POD, "containers": [{**C, "securityContext": {
        **SC, "seccompProfile": {"type": "Unconfined"}}}]},
    "sysctls": {**GOOD_POD, "securityContext": {**GOOD_POD["securityContext"],
                                               "sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}},
    "restrictedVolumes": {**GOOD_POD, "volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}]},
    "allowPrivilegeEscalation": {**GOOD_POD, "containers": [{**C, "securityContext": {
        k: v for k, v in SC.items() if k != "allowPrivilegeEscalation"}}]},
    "runAsNonRoot": {**GOOD_POD, "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{**C, "securityContext": {k: v for k, v in SC.items() if k != "runAsNonRoot"}}]},
    "runAsUser": {**GOOD_POD, "initContainers": [{**C, "name": "init", "securityContext": {**SC, "runAsUser": 0}}]},
    "seccompProfile_restricted": {**GOOD_POD, "securityContext": {"runAsNonRoot": True}},
    "capabilities_restricted": {**GOOD_POD, "containers": [{**C, "securityContext": {
        **SC, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}}]},
}


def test_each_control_of_the_profile_refuses_its_trick():
    for control, pod in TRICKS.items():
        found = check(PSS, DEPLOYMENT, deployment(pod))
        assert controls(found) == {control}, (control, found)


def test_look_alikes_the_profile_admits():
    admitted = [
        {**GOOD_POD, "containers": [{**C, "securityContext": {**SC, "capabilities": {
            "drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]},
        {**GOOD_POD, "containers": [{**C, "ports": [{"containerPort": 80, "hostPort": 0}]}]},
        {**GOOD_POD, "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "Localhost",
                                                                                "localhostProfile": "p.json"},
                                         "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}],
                                         "seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}}},
        {**GOOD_POD, "volumes": [{"name": v, source: {}} for v, source in
                                 (("a", "emptyDir"), ("b", "configMap"), ("c", "projected"), ("d", "csi"))]},
        # Container-level settings in place of the pod's.
        {"containers": [{**C, "securityContext": {**SC, "seccompProfile": {"type": "RuntimeDefault"}}}]},
    ]
    for pod in admitted:
        assert check(PSS, DEPLOYMENT, deployment(pod)) == [], pod


def test_init_and_ephemeral_containers_and_annotations_are_judged():
    loose = {"name": "debug", "image": C["image"]}
    found = check(PSS, DEPLOYMENT, deployment({**GOOD_POD, "ephemeralContainers": [loose]}))
    assert {"allowPrivilegeEscalation", "capabilities_restricted"} <= controls(found)
    assert all("ephemeralContainers[0]" in m for m in found)
    annotated = deployment(GOOD_POD)
    annotated["spec"]["template"]["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/app": "unconfined"}
    assert controls(check(PSS, DEPLOYMENT, annotated)) == {"appArmorProfile"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a", "annotations": {
        "container.apparmor.security.beta.kubernetes.io/app": "localhost/k8s-apparmor"}}, "spec": GOOD_POD}
    assert check(PSS, "kubernetes:core/v1:Pod", pod) == []


EFA_POD = {"hostNetwork": True, "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
           "volumes": [{"name": "dev", "hostPath": {"path": "/dev/infiniband"}}],
           "containers": [{**C, "image": f"{PLUGIN_IMAGE}:v0.5.29@sha256:{'a' * 64}",
                           "securityContext": {**SC, "runAsNonRoot": False, "runAsUser": 0}}]}
EFA_ENTRY = {"kind": "DaemonSet", "namespace": "kube-system", "name": "efa", "images": [PLUGIN_IMAGE],
             "controls": ["hostNamespaces", "hostPathVolumes", "runAsNonRoot", "runAsUser"],
             "reason": "EFA plugin registers devices through the host"}


def test_an_exemption_waives_only_its_controls_for_only_its_images():
    assert controls(check(PSS, DAEMONSET, daemon_set(EFA_POD))) == {
        "hostNamespaces", "hostPathVolumes", "runAsNonRoot", "runAsUser"}
    assert check(PSS, DAEMONSET, daemon_set(EFA_POD), config={"systemWorkloads": [EFA_ENTRY]}) == []
    # The same object made privileged: a control the entry does not name.
    privileged = {**EFA_POD, "containers": [{**EFA_POD["containers"][0], "securityContext": {
        **EFA_POD["containers"][0]["securityContext"], "privileged": True}}]}
    assert controls(check(PSS, DAEMONSET, daemon_set(privileged), config={"systemWorkloads": [EFA_ENTRY]})) == {
        "privileged"}
    # The name in another namespace, or another name: not exempt.
    assert check(PSS, DAEMONSET, daemon_set(EFA_POD, namespace="team-a"), config={"systemWorkloads": [EFA_ENTRY]})


def test_an_exempt_name_running_another_image_is_refused():
    """The red team's kube-system/fsx-csi-node with a foreign image: the name matches, the
    image does not, so the exemption does not apply at all."""
    foreign = {**EFA_POD, "containers": [{**EFA_POD["containers"][0],
                                          "image": f"999999999999.dkr.ecr.me-central-1.amazonaws.com/mlplat/prod/"
                                                   f"mirror/aws-efa-k8s-device-plugin@sha256:{'b' * 64}"}]}
    found = check(PSS, DAEMONSET, daemon_set(foreign), config={"systemWorkloads": [EFA_ENTRY]})
    assert any("runs images it does not name" in m for m in found)
    assert {"hostNamespaces", "hostPathVolumes"} <= controls(found)
    sidecar = {**EFA_POD, "containers": [*EFA_POD["containers"], {**C, "name": "shell"}]}
    assert any("does not name" in m for m in check(PSS, DAEMONSET, daemon_set(sidecar),
                                                  config={"systemWorkloads": [EFA_ENTRY]}))
    pinned = {**EFA_ENTRY, "images": [f"{PLUGIN_IMAGE}@sha256:{'c' * 64}"]}
    assert any("does not name" in m for m in check(PSS, DAEMONSET, daemon_set(EFA_POD),
                                                  config={"systemWorkloads": [pinned]}))


def test_pod_security_in_helm_values_and_operator_resources():
    release = {"chart": "node-exporter", "name": "node-exporter", "namespace": "monitoring",
               "values": {"hostNetwork": True, "securityContext": {"runAsNonRoot": False, "runAsUser": 0},
                          "image": {"repository": f"{ECR}/x", "tag": "1"}}}
    found = check(PSS, HELM, release)
    assert found == ["Release monitoring/node-exporter: [baseline/hostNamespaces] values.hostNetwork: is true",
                     "Release monitoring/node-exporter: [restricted/runAsNonRoot] values.securityContext.runAsNonRoot: "
                     "asks to run as root",
                     "Release monitoring/node-exporter: [restricted/runAsUser] values.securityContext.runAsUser: "
                     "asks to run as root"]
    entry = {"kind": "Release", "namespace": "monitoring", "name": "node-exporter", "images": [f"{ECR}/x"],
             "controls": ["hostNamespaces", "runAsNonRoot", "runAsUser"], "reason": "node metrics"}
    assert check(PSS, HELM, release, config={"systemWorkloads": [entry]}) == []
    assert check(PSS, HELM, {"chart": "kueue", "values": {"image": {"tag": "v0.13.0"}}}) == []
    proxy = {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
             "metadata": {"name": "p", "namespace": "envoy-gateway-system"},
             "spec": {"provider": {"kubernetes": {"envoyDeployment": {"pod": {"securityContext": {"runAsUser": 0}},
                                                                     "container": {"securityContext": {
                                                                         "privileged": True}}}}}}}
    found = check(PSS, "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy", proxy)
    assert controls(found) == {"privileged", "runAsUser"}
