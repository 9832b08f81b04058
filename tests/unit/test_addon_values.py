"""Helm values, Kueue objects and GPU alert rules of the cluster add-ons, as plain data;
and the add-on settings a user gets wrong, with the exact line they see."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from components.addons.alerts import AlertThresholds, gpu_alert_rules, gpu_prometheus_rule
from components.addons.plan import addon_context, chart_mirror, gpu_pools, system_namespaces_needed
from components.addons.queues import (
    CPU_FLAVOR,
    FlavorCapacity,
    PoolCapacity,
    cluster_queue,
    flavor_capacities,
    local_queue,
    resource_flavors,
    split_quota,
)
from components.addons.values import (
    GPU_TOLERATION,
    KUEUE_EXCLUDED_RESOURCE_PREFIXES,
    INSTANCE_TYPE_LABEL,
    AddonContext,
    ChartSource,
    chart_source,
    dcgm_exporter_values,
    dcgm_metrics_csv,
    device_plugin_config,
    efa_device_plugin_values,
    fsx_csi_values,
    gpu_operator_values,
    jobset_values,
    kube_prometheus_stack_values,
    kueue_manager_config,
    kueue_values,
    mirror_image,
    network_operator_values,
    nvidia_device_plugin_values,
)
from components.inference_spec import adapter_values
from components.rollout_values import argo_rollouts_values, envoy_gateway_values
from components.tenancy_spec import Tenant, tenant_namespace
from components.training_spec import HUGEPAGES_RESOURCE, pod_resources
from infra.catalog import lookup
from infra.checks.admission_policy import namespace_labels, selector_matches
from infra.config import ConfigError, load_stack, parse_config
from infra.versions import CHARTS, IMAGES, UNBUILT, image_uri, unpinned
from tests.unit.test_config import raw_stack

ACCOUNT, REGION, ENV = "111122223333", "me-central-1", "prod"
MIRROR_HOST = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"

PROD = AddonContext(
    account=ACCOUNT, region=REGION, environment=ENV,
    gpu_instance_types=("p5.48xlarge", "g6e.2xlarge"), efa_instance_types=("p5.48xlarge",),
)


def required_instance_types(affinity: dict[str, Any]) -> list[str]:
    [term] = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    [expression] = term["matchExpressions"]
    assert expression["key"] == INSTANCE_TYPE_LABEL and expression["operator"] == "In"
    return expression["values"]


def image_references(values: Any, path: str = "") -> list[tuple[str, str]]:
    """Every (path, reference) of an image the values configure, in any of the shapes charts
    use: {repository, tag}, {registry, repository, tag} or {repository, image, version}, the
    digest in the tag or apart (`sha` without `sha256:`, or `sha`/`digest` with it); or a
    whole reference under `image` (containers, Envoy Gateway's global images)."""
    found: list[tuple[str, str]] = []
    if isinstance(values, dict):
        whole = values.get("image")
        if isinstance(whole, str) and "repository" not in values and "/" in whole and ":" in whole:
            found.append((f"{path}.image", whole))
        if "repository" in values and ("tag" in values or "version" in values):
            parts = [values.get("registry"), values["repository"], values.get("image")]
            ref = "/".join(p for p in parts if p)
            digest = values.get("digest") or values.get("sha")
            at = "" if not digest else f"@{digest}" if digest.startswith("sha256:") else f"@sha256:{digest}"
            found.append((path, f"{ref}:{values.get('tag') or values.get('version')}{at}"))
        for key, value in values.items():
            found += image_references(value, f"{path}.{key}")
    elif isinstance(values, list):
        for index, value in enumerate(values):
            found += image_references(value, f"{path}[{index}]")
    return found


ALL_VALUES = {
    "nvidia-device-plugin": nvidia_device_plugin_values(PROD),
    "gpu-operator": gpu_operator_values(PROD),
    "aws-efa-k8s-device-plugin": efa_device_plugin_values(PROD),
    "dcgm-exporter": dcgm_exporter_values(PROD),
    "kube-prometheus-stack": kube_prometheus_stack_values(PROD),
    "kueue": kueue_values(PROD),
    "jobset": jobset_values(PROD),
    "aws-fsx-csi-driver": fsx_csi_values(PROD),
    # Installed with the inference service (components/inference.py), which is its only user.
    "prometheus-adapter": adapter_values(PROD.image("prometheus-adapter").full_repository,
                                         PROD.image("prometheus-adapter").tag, resource_metrics=True),
    # Installed with the inference service too: the gateway and the rollout controller.
    "gateway-helm": envoy_gateway_values(PROD.image("envoy-gateway")),
    "argo-rollouts": argo_rollouts_values(
        PROD.image("argo-rollouts"),
        image_uri("rollouts-gatewayapi-plugin", ACCOUNT, REGION, ENV, {"rollouts-gatewayapi-plugin": UNBUILT})),
    # A customer's RDMA fabric (its registry in place of ECR: the same plan, another host).
    "network-operator": network_operator_values(PROD),
}


def test_every_chart_has_values_and_a_pinned_version():
    assert set(ALL_VALUES) == set(CHARTS)
    for chart in CHARTS.values():
        assert chart.version and chart.version not in ("latest", "*")


@pytest.mark.parametrize("chart", sorted(ALL_VALUES))
def test_every_image_comes_from_the_in_region_mirror(chart):
    refs = image_references(ALL_VALUES[chart])
    assert refs, f"{chart}: no image configured, the chart would fall back to its upstream default"
    # By digest, but for the mirrors still awaiting their pin, which only their tag names.
    mirrored = {image_uri(name, ACCOUNT, REGION, ENV) for name, image in IMAGES.items() if not image.built_here}
    mirrored |= {image_uri(name, ACCOUNT, REGION, ENV, {name: UNBUILT}) for name, image in IMAGES.items()
                 if image.built_here}
    for path, ref in refs:
        assert ref in mirrored, f"{chart}{path}: {ref} is not in the registry plan"
        assert "@sha256:" in ref or f"image {ref.split('/')[-1].split(':')[0]}" in unpinned("aws") + unpinned("customer"), ref


def test_mirror_image_splits_the_registry_plan_uri():
    img = mirror_image("dcgm-exporter", ACCOUNT, REGION, ENV)
    pinned = IMAGES["dcgm-exporter"]
    assert img.uri == f"{MIRROR_HOST}/mlplat/prod/mirror/dcgm-exporter:{pinned.tag}@{pinned.digest}"
    assert (img.registry, img.repository, img.prefix, img.image, img.tag) == (
        MIRROR_HOST, "mlplat/prod/mirror/dcgm-exporter", f"{MIRROR_HOST}/mlplat/prod/mirror", "dcgm-exporter",
        f"{pinned.tag}@{pinned.digest}")


# --- NVIDIA device plugin ------------------------------------------------------------


def test_device_plugin_mofed_off_tolerates_gpu_taint_and_runs_only_on_gpu_types():
    values = nvidia_device_plugin_values(PROD)
    assert values["mofedEnabled"] is False
    assert values["tolerations"] == [GPU_TOLERATION]
    assert GPU_TOLERATION == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert required_instance_types(values["affinity"]) == ["g6e.2xlarge", "p5.48xlarge"]
    assert values["gfd"]["enabled"] is True
    # GPU feature discovery needs NFD's worker on the same, tainted, nodes.
    assert values["nfd"]["worker"]["tolerations"] == [GPU_TOLERATION]
    assert required_instance_types(values["nfd"]["worker"]["affinity"]) == ["g6e.2xlarge", "p5.48xlarge"]
    assert values["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert values["resources"]["limits"]


def test_device_plugin_config_time_slicing_and_mig():
    plain = yaml.safe_load(device_plugin_config(1, "none"))
    assert plain == {"version": "v1", "flags": {"migStrategy": "none"}}
    shared = yaml.safe_load(device_plugin_config(4, "single"))
    assert shared["flags"]["migStrategy"] == "single"
    assert shared["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    ctx = AddonContext(ACCOUNT, REGION, ENV, ("g5.2xlarge",), time_slicing_replicas=4, mig_strategy="mixed")
    values = nvidia_device_plugin_values(ctx)
    assert values["config"]["default"] == "default"
    assert yaml.safe_load(values["config"]["map"]["default"]) == yaml.safe_load(device_plugin_config(4, "mixed"))


def test_gpu_operator_keeps_the_ami_driver_and_toolkit_and_runs_dcgm():
    values = gpu_operator_values(PROD)
    assert values["driver"]["enabled"] is False
    assert values["toolkit"]["enabled"] is False
    assert values["dcgmExporter"]["enabled"] is True
    assert {"name": "MOFED_ENABLED", "value": "false"} in values["devicePlugin"]["env"]
    assert values["daemonsets"]["tolerations"] == [GPU_TOLERATION]
    assert values["migManager"]["enabled"] is False and "mig" not in values
    assert values["devicePlugin"]["repository"] == f"{MIRROR_HOST}/mlplat/prod/mirror"
    assert values["devicePlugin"]["image"] == "k8s-device-plugin"
    mig = gpu_operator_values(AddonContext(ACCOUNT, REGION, ENV, ("p5.48xlarge",), mig_strategy="mixed"))
    assert mig["mig"] == {"strategy": "mixed"} and mig["migManager"]["enabled"] is True


# --- EFA device plugin ---------------------------------------------------------------


def test_efa_plugin_only_on_efa_types_and_tolerates_gpu_taint():
    values = efa_device_plugin_values(PROD)
    assert values["supportedInstanceLabels"] == {"keys": [INSTANCE_TYPE_LABEL], "values": ["p5.48xlarge"]}
    assert GPU_TOLERATION in values["tolerations"]
    assert values["securityContext"]["allowPrivilegeEscalation"] is False


def test_efa_types_come_from_efa_pools_only():
    ctx = addon_context(load_stack("prod"), ACCOUNT, "gp3-encrypted")
    assert ctx.efa_instance_types == ("p5.48xlarge",)  # the g6e inference pool attaches no EFA
    assert ctx.gpu_instance_types == ("p5.48xlarge", "g6e.2xlarge")
    assert addon_context(load_stack("dev"), ACCOUNT, "gp3-encrypted").efa_instance_types == ()
    assert addon_context(load_stack("smb"), ACCOUNT, "gp3-encrypted").gpu_instance_types == ()


# --- Telemetry -----------------------------------------------------------------------


def test_prometheus_and_alertmanager_volumes_on_the_encrypted_class():
    ctx = AddonContext(ACCOUNT, REGION, ENV, storage_class="gp3-encrypted", prometheus_volume_gi=250,
                       alertmanager_volume_gi=20, prometheus_retention_days=30)
    values = kube_prometheus_stack_values(ctx)
    prom = values["prometheus"]["prometheusSpec"]
    claim = prom["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "gp3-encrypted"
    assert claim["resources"]["requests"]["storage"] == "250Gi"
    assert prom["retention"] == "30d"
    # Rules and monitors outside the release (GPU alerts, DCGM, Kueue) are picked up.
    assert prom["ruleSelectorNilUsesHelmValues"] is False
    assert prom["serviceMonitorSelectorNilUsesHelmValues"] is False
    alert_claim = values["alertmanager"]["alertmanagerSpec"]["storage"]["volumeClaimTemplate"]["spec"]
    assert alert_claim["storageClassName"] == "gp3-encrypted"
    assert alert_claim["resources"]["requests"]["storage"] == "20Gi"
    assert GPU_TOLERATION in values["prometheus-node-exporter"]["tolerations"]


def test_dcgm_exporter_on_gpu_nodes():
    values = dcgm_exporter_values(PROD)
    assert values["tolerations"] == [GPU_TOLERATION]
    assert required_instance_types(values["affinity"]) == ["g6e.2xlarge", "p5.48xlarge"]
    assert values["serviceMonitor"]["enabled"] is True
    assert values["customMetrics"] == dcgm_metrics_csv()


def test_alerts_cover_utilisation_temperature_xid_ecc_nvlink():
    rules = {r["alert"]: r for r in gpu_alert_rules(AlertThresholds(temperature_celsius=80, idle_percent=5))}
    assert "DCGM_FI_DEV_GPU_UTIL" in rules["GpuAllocatedButIdle"]["expr"]
    assert rules["GpuAllocatedButIdle"]["expr"].endswith("< 5")
    assert "DCGM_FI_DEV_GPU_TEMP" in rules["GpuTemperatureHigh"]["expr"]
    assert rules["GpuTemperatureHigh"]["expr"].endswith("> 80")
    assert rules["GpuTemperatureCritical"]["expr"].endswith("> 85")
    assert "DCGM_FI_DEV_XID_ERRORS" in rules["GpuXidError"]["expr"]
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in rules["GpuEccDoubleBitErrors"]["expr"]
    assert "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL" in rules["GpuNvlinkErrors"]["expr"]
    for rule in rules.values():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_metric_an_alert_reads_is_exported():
    exported = {line.split(",")[0] for line in dcgm_metrics_csv().splitlines()}
    used = set()
    for rule in gpu_alert_rules():
        used |= set(re.findall(r"DCGM_FI_[A-Z0-9_]+", rule["expr"]))
    assert len(used) >= 8 and used <= exported


def test_prometheus_rule_manifest():
    rule = gpu_prometheus_rule("monitoring")
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["spec"]["groups"][0]["rules"] == gpu_alert_rules()


# --- Scheduling ----------------------------------------------------------------------


def test_kueue_and_jobset_controllers_have_limits_and_mirror_images():
    assert kueue_values(PROD)["controllerManager"]["manager"]["resources"]["limits"]
    assert kueue_values(PROD)["enablePrometheus"] is True
    assert kueue_values(AddonContext(ACCOUNT, REGION, ENV, telemetry=False))["enablePrometheus"] is False
    assert jobset_values(PROD)["controller"]["resources"]["limits"]


# Fields of Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, Kueue 0.18): Kueue decodes
# its configuration strictly, so a misspelt field stops the controller from starting.
KUEUE_CONFIG_FIELDS = {
    "apiVersion", "kind", "namespace", "webhook", "leaderElection", "metrics", "health", "pprofBindAddress",
    "controller", "tls", "manageJobsWithoutQueueName", "managedJobsNamespaceSelector", "internalCertManagement",
    "waitForPodsReady", "clientConnection", "integrations", "multiKueue", "fairSharing", "admissionFairSharing",
    "resources", "featureGates", "objectRetentionPolicies",
}


def test_kueue_configuration_replaces_the_charts_whole():
    values = kueue_values(PROD)
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config == kueue_manager_config()
    assert (config["apiVersion"], config["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    assert set(config) <= KUEUE_CONFIG_FIELDS
    # What the chart's Deployment and Services expect of the manager.
    assert config["health"]["healthProbeBindAddress"] == ":8081"
    assert config["metrics"]["bindAddress"] == ":8443"
    assert config["webhook"]["port"] == 9443
    assert config["leaderElection"] == {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"}
    # Webhook certificates for the chart's objects of the release (named after the chart).
    certs = config["internalCertManagement"]
    assert certs["enable"] is True and values.get("enableCertManager", False) is False
    assert certs["webhookServiceName"] == "kueue-webhook-service"
    assert certs["webhookSecretName"] == "kueue-webhook-server-cert"


def test_kueue_queues_every_job_in_a_tenant_namespace_and_elsewhere_only_those_naming_a_queue():
    config = kueue_manager_config()
    assert config["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset"]
    # A tenant's job without a queue label is held like the rest (issue: GPUs outside the queue).
    assert config["manageJobsWithoutQueueName"] is True
    selector = config["managedJobsNamespaceSelector"]
    tenant = tenant_namespace(Tenant("research", 8, 32, 0, 0))
    platform = {"metadata": {"name": "kube-system", "labels": {}}}
    assert selector_matches(selector, namespace_labels(tenant))
    assert not selector_matches(selector, namespace_labels(platform))


def covered(queue: dict[str, Any]) -> set[str]:
    return {r for group in queue["spec"]["resourceGroups"] for r in group["coveredResources"]}


def admissible(resources: set[str], queue: dict[str, Any], excluded: Any) -> set[str]:
    """The requested resources Kueue would find no quota for."""
    return {r for r in resources if r not in covered(queue) and not any(r.startswith(p) for p in excluded)}


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p4d.24xlarge"])
def test_every_resource_an_efa_training_pod_asks_for_is_covered_or_excluded(instance_type):
    instance = lookup(instance_type)
    requested = set(pod_resources(instance, efa=True)["requests"])
    assert HUGEPAGES_RESOURCE in requested
    caps = [FlavorCapacity(instance_type, 8 * instance.gpus, 8 * instance.efa_interfaces)]
    queue = cluster_queue(Tenant("research", 1024, 8192, 64, 256), caps)
    excluded = yaml.safe_load(kueue_values(PROD)["managerConfig"]["controllerManagerConfigYaml"])["resources"][
        "excludeResourcePrefixes"]
    assert admissible(requested, queue, excluded) == set()
    # The exclusion is what admits it: no ClusterQueue covers huge pages.
    assert admissible(requested, queue, ()) == {HUGEPAGES_RESOURCE}
    assert list(KUEUE_EXCLUDED_RESOURCE_PREFIXES) == excluded == ["hugepages-", "ephemeral-storage"]


def test_kueue_excludes_nothing_the_queues_ration():
    queue = cluster_queue(Tenant("research", 64, 512, 24, 96), CAPS)
    for resource in covered(queue):
        assert not any(resource.startswith(p) for p in KUEUE_EXCLUDED_RESOURCE_PREFIXES), resource


def test_flavor_capacities_sum_pools_and_count_time_slices():
    pools = [PoolCapacity("p5.48xlarge", 16, 8, 32), PoolCapacity("g6e.2xlarge", 8, 1, 0),
             PoolCapacity("p5.48xlarge", 2, 8, 0)]
    assert flavor_capacities(pools) == [FlavorCapacity("p5.48xlarge", 144, 512), FlavorCapacity("g6e.2xlarge", 8, 0)]
    assert flavor_capacities(pools[1:2], time_slicing_replicas=4) == [FlavorCapacity("g6e.2xlarge", 32, 0)]


def test_gpu_pools_from_config():
    assert gpu_pools(load_stack("prod").node_pools) == (
        PoolCapacity("p5.48xlarge", 16, 8, 32), PoolCapacity("g6e.2xlarge", 8, 1, 0))
    assert gpu_pools(load_stack("smb").node_pools) == ()


def test_split_quota_fills_flavors_in_order_and_adds_up():
    assert split_quota(20, [("a", 16), ("b", 8)]) == {"a": 16, "b": 4}
    assert split_quota(3, [("a", 16), ("b", 8)]) == {"a": 3, "b": 0}
    assert split_quota(0, [("a", 16)]) == {"a": 0}


CAPS = [FlavorCapacity("p5.48xlarge", 128, 512), FlavorCapacity("g6e.2xlarge", 8, 0)]


def quotas(queue: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(f["name"], r["name"]): r["nominalQuota"]
            for group in queue["spec"]["resourceGroups"] for f in group["flavors"] for r in f["resources"]}


def test_flavors_one_per_gpu_type_pinning_and_tolerating():
    flavors = {f["metadata"]["name"]: f for f in resource_flavors(CAPS)}
    assert set(flavors) == {CPU_FLAVOR, "p5.48xlarge", "g6e.2xlarge"}
    assert flavors[CPU_FLAVOR]["spec"] == {}
    assert flavors["p5.48xlarge"]["spec"] == {
        "nodeLabels": {INSTANCE_TYPE_LABEL: "p5.48xlarge"}, "tolerations": [GPU_TOLERATION]}
    assert all(f["apiVersion"] == "kueue.x-k8s.io/v1beta2" for f in flavors.values())


def test_cluster_queue_covers_cpu_memory_gpu_efa_with_cohort():
    tenant = Tenant("research", cpu=64, memory_gi=512, gpu=24, efa=96, cohort="training")
    queue = cluster_queue(tenant, CAPS)
    assert queue["metadata"] == {"name": "research"}
    spec = queue["spec"]
    assert spec["cohortName"] == "training"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "research"}}
    covered = [r for group in spec["resourceGroups"] for r in group["coveredResources"]]
    assert covered == ["cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"]
    assert quotas(queue) == {
        (CPU_FLAVOR, "cpu"): "64", (CPU_FLAVOR, "memory"): "512Gi",
        ("p5.48xlarge", "nvidia.com/gpu"): "24", ("p5.48xlarge", "vpc.amazonaws.com/efa"): "96",
        ("g6e.2xlarge", "nvidia.com/gpu"): "0", ("g6e.2xlarge", "vpc.amazonaws.com/efa"): "0",
    }
    # Kueue requires every flavor of a group to list the group's resources in order.
    for group in spec["resourceGroups"]:
        for flavor in group["flavors"]:
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def test_cluster_queue_honours_the_tenants_instance_types_and_has_no_cohort_by_default():
    queue = cluster_queue(Tenant("serving", 8, 64, 8, 0, instance_types=("g6e.2xlarge",)), CAPS)
    assert "cohortName" not in queue["spec"]
    assert quotas(queue)[("g6e.2xlarge", "nvidia.com/gpu")] == "8"
    assert ("p5.48xlarge", "nvidia.com/gpu") not in quotas(queue)


def test_cpu_only_queue_has_one_group():
    queue = cluster_queue(Tenant("analytics", 24, 48, 0, 0), [])
    assert [g["coveredResources"] for g in queue["spec"]["resourceGroups"]] == [["cpu", "memory"]]


def test_local_queue_default_in_tenant_namespace():
    assert local_queue(Tenant("research", 1, 1, 0, 0)) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "research"}, "spec": {"clusterQueue": "research"},
    }


# --- Storage drivers and chart sources -----------------------------------------------


def test_fsx_csi_driver_region_pinned_and_on_gpu_nodes():
    values = fsx_csi_values(PROD)
    assert values["controller"]["region"] == REGION and values["node"]["region"] == REGION
    assert GPU_TOLERATION in values["node"]["tolerations"]
    assert values["node"]["tolerateAllTaints"] is False


def test_charts_come_from_the_environments_in_region_repositories():
    mirror = chart_mirror("ecr", ACCOUNT, REGION, ENV)
    assert mirror == f"oci://{MIRROR_HOST}/mlplat/prod/charts"
    for name, chart in CHARTS.items():
        # Where `mlplat mirror` pushes it (infra/mirror.py) is where Helm fetches it.
        assert chart_source(name, mirror) == ChartSource(f"oci://{MIRROR_HOST}/{chart.mirror_repository(ENV)}",
                                                        chart.version)
    assert chart_mirror("oci://mirror.example/charts", ACCOUNT, REGION, ENV) == "oci://mirror.example/charts"


def test_system_namespaces_follow_the_stack():
    prod = addon_context(load_stack("prod"), ACCOUNT, "gp3-encrypted")
    assert system_namespaces_needed(prod, lustre=True) == [
        "jobset-system", "kueue-system", "monitoring", "nvidia-device-plugin", "kube-system"]
    smb = addon_context(load_stack("smb"), ACCOUNT, "gp3-encrypted")
    assert system_namespaces_needed(smb, lustre=False) == ["jobset-system", "kueue-system", "monitoring"]
    operator = AddonContext(ACCOUNT, REGION, ENV, ("g5.2xlarge",), device_plugin_mode="gpu-operator", telemetry=False)
    assert system_namespaces_needed(operator, lustre=False) == ["jobset-system", "kueue-system", "gpu-operator"]


# --- Bad input: one line naming key, value and what is allowed -------------------------


def addons_error(settings: dict[str, Any], extra: dict[str, Any] | None = None) -> str:
    raw = raw_stack("dev")
    raw["mlplat:addons"] = settings
    raw.update(extra or {})
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "stacks/Pulumi.dev.yaml", from_stack_file=True)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_unknown_mig_strategy():
    assert addons_error({"migStrategy": "auto"}) == (
        "stacks/Pulumi.dev.yaml: mlplat:addons.migStrategy: 'auto' is not allowed; "
        "allowed: 'none', 'single' or 'mixed'")


def test_mig_strategy_is_case_insensitive():
    raw = raw_stack("dev")
    raw["mlplat:addons"] = {"migStrategy": "Single", "devicePluginMode": "GPU-Operator"}
    config = parse_config(raw, "stacks/Pulumi.dev.yaml", from_stack_file=True)
    assert (config.addons.mig_strategy, config.addons.device_plugin_mode) == ("single", "gpu-operator")


def test_time_slicing_below_one():
    assert addons_error({"timeSlicingReplicas": 0}) == (
        "stacks/Pulumi.dev.yaml: mlplat:addons.timeSlicingReplicas: 0 is below 1; "
        "use 1 (no sharing) or N > 1 to share each GPU N ways")


@pytest.mark.parametrize("both", [["device-plugin", "gpu-operator"], "both"])
def test_both_device_plugin_modes(both):
    assert addons_error({"devicePluginMode": both}) == (
        f"stacks/Pulumi.dev.yaml: mlplat:addons.devicePluginMode: {both!r}: choose one of 'device-plugin', "
        "'gpu-operator'; the GPU Operator brings its own device plugin, so both cannot run")


def test_unknown_device_plugin_mode():
    assert addons_error({"devicePluginMode": "nvidia"}) == (
        "stacks/Pulumi.dev.yaml: mlplat:addons.devicePluginMode: 'nvidia' is not allowed; "
        "allowed: 'device-plugin' or 'gpu-operator'")


def test_chart_mirror_must_be_oci_or_ecr():
    assert addons_error({"chartMirror": "https://charts.example"}) == (
        "stacks/Pulumi.dev.yaml: mlplat:addons.chartMirror: 'https://charts.example' is not a chart mirror; "
        "use 'ecr' or an oci:// URL")


def test_engine_json_strings_parse_like_yaml():
    raw = raw_stack("prod")
    as_engine = {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in raw.items()
                 if k != "pulumi:disable-default-providers"}
    plain = {k: v for k, v in raw.items() if k != "pulumi:disable-default-providers"}
    assert parse_config(as_engine, "engine").tenants == parse_config(plain, "yaml").tenants
