"""Four chart defects a real deploy would have hit, each reintroduced into prod's values:
the render check (or the pack, judging the rendered object) must fail, naming the
release, the object, the field and the rule. Each test also shows that today's values
pass the same check, so the failure comes from the defect and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

from platform_policies import ALL_POLICIES

from components.addons.plan import addon_context
from components.addons.values import (
    NAMESPACES,
    NO_CAPABILITIES,
    dcgm_exporter_values,
    efa_device_plugin_values,
    kube_prometheus_stack_values,
    nvidia_device_plugin_values,
)
from infra.checks.images import object_id
from infra.checks.release import findings
from infra.config import load_stack
from infra.preview.charts import children
from infra.preview.fixtures import ACCOUNT_ID
from infra.render import release_spec, render
from infra.versions import IMAGES
from tests.policy.harness import check

REGION = "me-central-1"
PROD_POLICY_CONFIG = Path(__file__).resolve().parents[2] / "policies" / "config" / "prod.json"
PROD = addon_context(load_stack("prod"), ACCOUNT_ID, "gp3-encrypted")


def rendered(chart: str, values: dict):
    return render(release_spec(chart, chart, NAMESPACES[chart], values))


def test_efa_plugin_asking_for_privilege_with_no_escalation_is_refused():
    values = efa_device_plugin_values(PROD)
    assert findings(rendered("aws-efa-k8s-device-plugin", values), ACCOUNT_ID, REGION, "prod") == []
    # The defect: our map merged into the chart's `privileged: true`.
    values["securityContext"] = {**NO_CAPABILITIES, "runAsNonRoot": False}
    lines = findings(rendered("aws-efa-k8s-device-plugin", values), ACCOUNT_ID, REGION, "prod")
    assert lines == [
        "release aws-efa-k8s-device-plugin: DaemonSet kube-system/aws-efa-k8s-device-plugin: "
        "spec.template.spec.containers[0].securityContext: Invalid value: cannot set `allowPrivilegeEscalation` "
        "to false and `privileged` to true (ValidateSecurityContext)"
    ]


def test_nfd_of_the_wrong_version_for_the_device_plugin_chart_is_caught():
    values = nvidia_device_plugin_values(PROD)
    assert findings(rendered("nvidia-device-plugin", values), ACCOUNT_ID, REGION, "prod") == []
    # The defect: the GPU Operator's NFD (0.18.3) forced onto this chart's NFD 0.17.3.
    nfd = PROD.image("node-feature-discovery")
    values["nfd"]["image"] = {"repository": nfd.full_repository, "tag": nfd.tag, "pullPolicy": "IfNotPresent"}
    lines = findings(rendered("nvidia-device-plugin", values), ACCOUNT_ID, REGION, "prod")
    master = [line for line in lines if "node-feature-discovery-master" in line]
    assert master == [
        "release nvidia-device-plugin: Deployment nvidia-device-plugin/nvidia-device-plugin-node-feature-discovery-"
        "master spec.template.spec.containers[0].image: mirror "
        f"{nfd.uri} copies registry.k8s.io/nfd/node-feature-discovery:v0.18.3, but the chart runs "
        "registry.k8s.io/nfd/node-feature-discovery:v0.17.3 there (mirror is the chart's own image)"
    ]
    assert len(lines) == 3  # master, gc and worker
    # Why it matters: this chart's templates pass flags that NFD 0.18 no longer has.
    deployment = next(o for o in rendered("nvidia-device-plugin", values).objects
                      if object_id(o).endswith("node-feature-discovery-master"))
    assert {"-metrics=8081", "-grpc-health=8082"} <= set(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_node_exporter_tag_the_chart_rewrites_is_caught():
    values = kube_prometheus_stack_values(PROD)
    assert findings(rendered("kube-prometheus-stack", values), ACCOUNT_ID, REGION, "prod") == []
    # The defect: the chart (distroless by default) appends -distroless to the plan's tag.
    del values["prometheus-node-exporter"]["image"]["distroless"]
    lines = findings(rendered("kube-prometheus-stack", values), ACCOUNT_ID, REGION, "prod")
    host = f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com"
    assert (
        "release kube-prometheus-stack: DaemonSet monitoring/kube-prometheus-stack-prometheus-node-exporter: "
        f"spec.template.spec.containers[0].image: {host}/mlplat/prod/mirror/node-exporter:v1.12.1-distroless-distroless"
        f"@{IMAGES['node-exporter'].digest} (image is an in-region mirror of the plan, by digest)"
    ) in lines


def test_dcgm_exporter_keeping_the_charts_sys_admin_is_blocked_by_the_pack():
    rule = next(p for p in ALL_POLICIES if p.name == "k8s-pod-security-standards")
    # prod's exemption for the exporter: root, its host mounts and no seccomp profile; no capability.
    config = json.loads(PROD_POLICY_CONFIG.read_text())[rule.name]

    def verdict(values: dict) -> list[str]:
        chart = _chart_registration("dcgm-exporter")
        daemonset = next(c for c in children(chart, rendered("dcgm-exporter", values), _urn)
                         if c.type == "kubernetes:apps/v1:DaemonSet")
        # The pack reports the rule by name and the resource by URN, which names the release.
        assert daemonset.name == "dcgm-exporter:monitoring/dcgm-exporter"
        return check(rule, daemonset.type, daemonset.inputs(mask_secrets=False), provider_props=None,
                     name=daemonset.name, config=config)

    values = dcgm_exporter_values(PROD)
    assert verdict(values) == []
    # The defect: our capabilities map without `add: null` merges into the chart's [SYS_ADMIN].
    values["securityContext"]["capabilities"] = {"drop": ["ALL"]}
    where = "spec.template.spec.containers[0].securityContext.capabilities.add"
    assert verdict(values) == [
        f"DaemonSet monitoring/dcgm-exporter: [baseline/capabilities_baseline] {where}: SYS_ADMIN is not in the "
        "runtime's default set",
        f"DaemonSet monitoring/dcgm-exporter: [restricted/capabilities_restricted] {where}: SYS_ADMIN: only "
        "NET_BIND_SERVICE may be added"]


def test_a_child_is_named_after_its_release_with_its_namespace():
    chart = _chart_registration("kueue")
    names = {c.name for c in children(chart, rendered("kueue", {}), _urn)}
    assert {"kueue:kueue-system/kueue-controller-manager", "kueue:clusterqueues.kueue.x-k8s.io"} <= names


def _urn(parent: str, typ: str, name: str) -> str:
    return f"{parent}${typ}::{name}"


def _chart_registration(release: str):
    from google.protobuf import struct_pb2

    from infra.preview.mocks import Registration

    return Registration(urn=f"urn:pulumi:prod::mlplat::kubernetes:helm.sh/v4:Chart::{release}",
                        type="kubernetes:helm.sh/v4:Chart", name=release, parent="", custom=False, provider_ref="",
                        properties=struct_pb2.Struct(), dependencies=[], property_dependencies={}, protect=False,
                        retain_on_delete=False)
