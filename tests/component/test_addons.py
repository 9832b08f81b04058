"""`ClusterAddons` under mocks: what each Helm release and Kubernetes object looks like
as the engine receives it, on which provider, and in which order."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.addons import AddonsArgs, ClusterAddons, LustreVolume
from components.addons.queues import PoolCapacity
from components.addons.values import NAMESPACES, AddonContext, chart_source, kueue_manager_config
from components.tenancy import Tenancy, TenancyArgs
from components.tenancy_spec import Tenant, tenant_gid
from infra.versions import CHARTS, image_uri
from tests.component.recorder import Recording, record

ACCOUNT, REGION = "111122223333", "me-central-1"
RELEASE = "kubernetes:helm.sh/v4:Chart"
TENANTS = (
    Tenant("research", 64, 512, 24, 96, cohort="training", groups=("mlplat:research-developers",)),
    Tenant("serving", 8, 64, 4, 0, instance_types=("g6e.2xlarge",), gid=41000),
)
POOLS = (PoolCapacity("p5.48xlarge", 4, 8, 32), PoolCapacity("g6e.2xlarge", 4, 1, 0))
MIRROR = f"oci://{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/mlplat/prod/charts"
LUSTRE = LustreVolume("fs-0123456789abcdef0", "fs-0123456789abcdef0.fsx.me-central-1.amazonaws.com", "abcdefgh", 1200)


def context(**overrides: Any) -> AddonContext:
    fields: dict[str, Any] = dict(account=ACCOUNT, region=REGION, environment="prod",
                                  gpu_instance_types=("p5.48xlarge", "g6e.2xlarge"),
                                  efa_instance_types=("p5.48xlarge",))
    return AddonContext(**{**fields, **overrides})


def build(ctx: AddonContext | None = None, pools=POOLS, lustre: LustreVolume | None = LUSTRE,
          mirror: str = MIRROR) -> Recording:
    """The add-ons with a Kubernetes provider of their own; `workload_dependencies` on the
    recording holds the URNs the component hands to workloads."""
    dependencies: list[str] = []

    def program(aws_provider):
        cluster = k8s.Provider("cluster-k8s", kubeconfig="{}")
        providers = {"aws": aws_provider, "kubernetes": cluster}
        tenancy = Tenancy("tenancy", TenancyArgs(tenants=TENANTS), opts=pulumi.ResourceOptions(providers=providers))
        addons = ClusterAddons("addons", AddonsArgs(
            context=ctx or context(), pools=pools, tenants=TENANTS, tenant_namespaces=tenancy.namespaces,
            chart_mirror=mirror, lustre=lustre,
        ), opts=pulumi.ResourceOptions(providers=providers))
        pulumi.Output.all(*[r.urn for r in addons.workload_dependencies]).apply(dependencies.extend)

    rec = record(program)
    rec.workload_dependencies = dependencies
    return rec


@pytest.fixture(scope="module")
def rec() -> Recording:
    return build()


def release(rec: Recording, chart: str):
    return rec.one(RELEASE, chart)


def depends(rec: Recording, reg, *others) -> bool:
    return all(o.urn in reg.dependencies for o in others)


def test_releases_in_prod_shape(rec):
    charts = sorted(r.name for r in rec.of_type(RELEASE))
    assert charts == ["aws-efa-k8s-device-plugin", "aws-fsx-csi-driver", "dcgm-exporter", "jobset",
                      "kube-prometheus-stack", "kueue", "nvidia-device-plugin"]


@pytest.mark.parametrize("chart", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin", "kueue", "jobset"])
def test_release_pins_the_chart_version_and_source(rec, chart):
    inputs = release(rec, chart).inputs()
    source = chart_source(chart, MIRROR)
    assert inputs["version"] == CHARTS[chart].version
    assert inputs["chart"] == source.chart and "repositoryOpts" not in inputs
    assert inputs["name"] == chart and inputs["namespace"] == NAMESPACES[chart]


def test_values_reach_the_engine_unchanged(rec):
    values = release(rec, "nvidia-device-plugin").inputs()["values"]
    assert values["mofedEnabled"] is False
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert release(rec, "nvidia-device-plugin").inputs()["namespace"] == "nvidia-device-plugin"
    efa = release(rec, "aws-efa-k8s-device-plugin").inputs()
    assert efa["namespace"] == "kube-system"
    assert efa["values"]["supportedInstanceLabels"]["values"] == ["p5.48xlarge"]


def test_every_kubernetes_resource_uses_the_cluster_provider(rec):
    [provider] = rec.of_type("pulumi:providers:kubernetes")
    k8s_resources = [r for r in rec.registrations if r.type.startswith("kubernetes:")]
    assert len(k8s_resources) > 30
    for reg in k8s_resources:
        assert reg.provider_urn == provider.urn, reg.urn
        assert reg.parent, f"{reg.urn} has no parent component"


def test_urns_are_unique(rec):
    urns = [r.urn for r in rec.registrations]
    assert len(urns) == len(set(urns))


def test_components_and_their_type_tokens(rec):
    kinds = {r.type for r in rec.registrations if not r.custom}
    assert {"mlplat:addons:ClusterAddons", "mlplat:addons:DevicePlugins", "mlplat:addons:GpuTelemetry",
            "mlplat:addons:Scheduling", "mlplat:addons:StorageDrivers", "mlplat:tenancy:Tenancy"} <= kinds


def test_system_namespaces_before_their_releases(rec):
    namespaces = {r.name: r for r in rec.of_type("kubernetes:core/v1:Namespace")}
    assert {"namespace-nvidia-device-plugin", "namespace-monitoring", "namespace-kueue-system",
            "namespace-jobset-system"} <= set(namespaces)
    assert "namespace-kube-system" not in namespaces  # EKS owns it
    assert depends(rec, release(rec, "nvidia-device-plugin"), namespaces["namespace-nvidia-device-plugin"])
    assert depends(rec, release(rec, "kube-prometheus-stack"), namespaces["namespace-monitoring"])
    assert depends(rec, release(rec, "kueue"), namespaces["namespace-kueue-system"])
    labels = namespaces["namespace-monitoring"].inputs()["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_scheduling_order_jobset_kueue_flavors_queues(rec):
    jobset, kueue = release(rec, "jobset"), release(rec, "kueue")
    assert depends(rec, kueue, jobset)
    assert depends(rec, kueue, release(rec, "kube-prometheus-stack"))  # its ServiceMonitor CRD
    flavors = rec.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
    assert sorted(f.inputs()["metadata"]["name"] for f in flavors) == ["default", "g6e.2xlarge", "p5.48xlarge"]
    for flavor in flavors:
        assert depends(rec, flavor, kueue)
    queues = {q.inputs()["metadata"]["name"]: q for q in rec.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")}
    assert set(queues) == {"research", "serving"}
    for queue in queues.values():
        assert depends(rec, queue, kueue, *flavors)
    namespaces = {r.inputs()["metadata"]["name"]: r for r in rec.of_type("kubernetes:core/v1:Namespace")}
    for local in rec.of_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"):
        body = local.inputs()
        assert body["metadata"]["name"] == "default"
        tenant = body["metadata"]["namespace"]
        assert depends(rec, local, queues[tenant], namespaces[tenant])


def test_gpu_rules_and_dcgm_after_the_prometheus_stack(rec):
    stack = release(rec, "kube-prometheus-stack")
    rule = rec.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    assert depends(rec, rule, stack) and depends(rec, release(rec, "dcgm-exporter"), stack)
    assert rule.inputs()["metadata"]["namespace"] == "monitoring"


def test_lustre_claim_per_tenant_on_a_retained_static_volume(rec):
    driver = release(rec, "aws-fsx-csi-driver")
    volumes = {v.inputs()["metadata"]["name"]: v for v in rec.of_type("kubernetes:core/v1:PersistentVolume")
               if "mlplat.io/tenant" in v.inputs()["metadata"]["labels"]}
    claims = [c for c in rec.of_type("kubernetes:core/v1:PersistentVolumeClaim")
              if c.inputs()["metadata"]["namespace"] != "kube-system"]
    assert set(volumes) == {"lustre-scratch-research", "lustre-scratch-serving"}
    for volume in volumes.values():
        spec = volume.inputs()["spec"]
        assert spec["csi"]["volumeHandle"] == LUSTRE.file_system_id
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"
        assert volume.retain_on_delete and depends(rec, volume, driver)
    for claim in claims:
        body = claim.inputs()
        assert body["metadata"]["name"] == "lustre-scratch"
        assert depends(rec, claim, volumes[body["spec"]["volumeName"]]) and claim.retain_on_delete


def test_tenant_directories_job_after_its_own_claim_and_isolation(rec):
    job = rec.one("kubernetes:batch/v1:Job")
    body = job.inputs()
    assert (body["apiVersion"], body["kind"]) == ("batch/v1", "Job")
    assert body["metadata"]["namespace"] == "kube-system"
    [container] = body["spec"]["template"]["spec"]["containers"]
    # Each directory with its own tenant's group: given, or drawn from the name.
    assert container["command"][4:] == [f"/fsx/research={tenant_gid('research')}", "/fsx/serving=41000"]
    assert container["image"] == image_uri("node-debug", ACCOUNT, REGION, "prod")
    assert container["image"].startswith(f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/mlplat/prod/mirror/node-debug:")
    claims = {(c.inputs()["metadata"]["namespace"]): c for c in rec.of_type("kubernetes:core/v1:PersistentVolumeClaim")}
    volumes = {v.inputs()["metadata"]["name"]: v for v in rec.of_type("kubernetes:core/v1:PersistentVolume")}
    own_claim = claims["kube-system"]
    assert own_claim.inputs()["metadata"]["name"] == body["spec"]["template"]["spec"]["volumes"][0][
        "persistentVolumeClaim"]["claimName"]
    [policy] = [p for p in rec.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
                if p.inputs()["metadata"]["namespace"] == "kube-system"]
    assert depends(rec, job, own_claim, policy)
    assert depends(rec, own_claim, volumes["lustre-tenant-directories"])
    assert depends(rec, volumes["lustre-tenant-directories"], release(rec, "aws-fsx-csi-driver"))
    assert own_claim.retain_on_delete and volumes["lustre-tenant-directories"].retain_on_delete
    assert not job.retain_on_delete and not job.protect  # a one-off: nothing to keep


def test_workloads_wait_for_plugins_queues_claims_and_tenant_directories(rec):
    expected = {release(rec, "nvidia-device-plugin").urn, release(rec, "aws-efa-k8s-device-plugin").urn,
                release(rec, "jobset").urn, rec.one("kubernetes:batch/v1:Job").urn}
    expected |= {r.urn for r in rec.of_type("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue")}
    expected |= {r.urn for r in rec.of_type("kubernetes:core/v1:PersistentVolumeClaim")
                 if r.inputs()["metadata"]["namespace"] != "kube-system"}
    assert len(expected) == 8
    assert set(rec.workload_dependencies) == expected


def test_kueue_release_gets_the_whole_manager_configuration(rec):
    config = yaml.safe_load(release(rec, "kueue").inputs()["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config == kueue_manager_config()
    assert config["resources"]["excludeResourcePrefixes"] == ["hugepages-", "ephemeral-storage"]


def test_gpu_operator_mode_replaces_plugin_and_exporter():
    rec = build(context(device_plugin_mode="gpu-operator", mig_strategy="single"), lustre=None)
    charts = {r.name for r in rec.of_type(RELEASE)}
    assert "gpu-operator" in charts
    assert not charts & {"nvidia-device-plugin", "dcgm-exporter", "aws-fsx-csi-driver"}
    assert not rec.of_type("kubernetes:batch/v1:Job")  # no Lustre, no directories to make
    operator = release(rec, "gpu-operator")
    values = operator.inputs()["values"]
    assert values["driver"] == {"enabled": False} and values["toolkit"] == {"enabled": False}
    assert values["dcgmExporter"]["enabled"] is True and values["mig"] == {"strategy": "single"}
    assert operator.inputs()["namespace"] == "gpu-operator"
    assert depends(rec, operator, release(rec, "kube-prometheus-stack"))  # its DCGM ServiceMonitor


def test_cpu_only_stack_gets_scheduling_and_telemetry_but_no_gpu_addons():
    rec = build(AddonContext(ACCOUNT, REGION, "prod"), pools=(), lustre=None)
    charts = {r.name for r in rec.of_type(RELEASE)}
    assert charts == {"jobset", "kueue", "kube-prometheus-stack"}
    assert not rec.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    assert not [r for r in rec.registrations if r.type == "mlplat:addons:DevicePlugins"]
    [flavor] = rec.of_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
    assert flavor.inputs()["metadata"]["name"] == "default"


def test_every_chart_comes_from_the_in_region_mirror():
    rec = build()
    assert rec.of_type(RELEASE)
    for reg in rec.of_type(RELEASE):
        inputs = reg.inputs()
        assert inputs["chart"] == f"oci://{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/mlplat/prod/charts/{reg.name}"
        assert "repositoryOpts" not in inputs
        assert inputs["version"] == CHARTS[reg.name].version


def test_telemetry_off_drops_the_stack_and_the_service_monitors():
    rec = build(context(telemetry=False), lustre=None)
    charts = {r.name for r in rec.of_type(RELEASE)}
    assert "kube-prometheus-stack" not in charts and "dcgm-exporter" not in charts
    assert release(rec, "kueue").inputs()["values"]["enablePrometheus"] is False
