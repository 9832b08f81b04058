"""Side doors between tenants, walked in what each cluster layer applies: the admission
policies that close them are in place before any tenant namespace, every pod the
platform's own workloads would create passes them, and a planted breach of each is what
the preview refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.admission_spec import EXTERNAL_IPS_POLICY, TENANT_LABEL, TENANT_PODS_POLICY
from infra.checks.admission import refusals
from infra.checks.apiserver import parse_quantity
from infra.checks.admission_policy import namespace_labels, workload_pods
from infra.preview.report import kubernetes_objects
from tests.conftest import CLUSTER_STACKS, preview

NAMESPACE = "kubernetes:core/v1:Namespace"
POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"


def objects(stack: str) -> list[dict[str, Any]]:
    return kubernetes_objects(preview(stack))


def tenants(stack: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects(stack)
            if o["kind"] == "Namespace" and TENANT_LABEL in o["metadata"].get("labels", {})}


@pytest.mark.parametrize("stack", CLUSTER_STACKS)
def test_policies_before_every_tenant_namespace(stack):
    result = preview(stack)
    policies = {r.urn for r in result.registrations if r.type in (POLICY, BINDING)
                and r.inputs()["metadata"]["name"].startswith("mlplat-")}
    assert len(policies) == 4  # (the gateway chart brings one of its own)
    namespaces = [r for r in result.registrations if r.type == NAMESPACE
                  and TENANT_LABEL in r.inputs()["metadata"].get("labels", {})]
    assert namespaces
    for namespace in namespaces:
        assert policies <= set(namespace.dependencies), namespace.name


@pytest.mark.parametrize("stack", CLUSTER_STACKS)
def test_every_platform_pod_in_a_tenant_namespace_passes(stack):
    everything = objects(stack)
    assert [line for line in refusals([("program", o) for o in everything]) if "admission policy" in line] == []
    judged = [pod for o in everything if o["metadata"].get("namespace") in tenants(stack) for pod, _ in workload_pods(o)]
    assert judged, f"{stack}: no pod in a tenant namespace was judged"


def planted(stack: str, change) -> list[str]:
    """The refusals of the stack's objects with one of them changed."""
    changed = copy.deepcopy(objects(stack))
    change(changed)
    return [line for line in refusals([("program", o) for o in changed]) if "admission policy" in line]


def training_pod_spec(everything: list[dict[str, Any]]) -> dict[str, Any]:
    jobset = next(o for o in everything if o["kind"] == "JobSet" and o["metadata"]["name"] == "gpt2-smoke")
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_a_training_pod_in_another_tenants_group_is_refused():
    applied = int(tenants("prod-cluster")["applied"]["metadata"]["annotations"]["mlplat.io/gid"])

    def other_group(everything):
        training_pod_spec(everything)["securityContext"]["runAsGroup"] = applied

    [line] = planted("prod-cluster", other_group)
    assert line.startswith(f"program: JobSet research/gpt2-smoke: admission policy {TENANT_PODS_POLICY}: ")
    assert "runAsGroup and fsGroup must be" in line


def test_a_training_pod_on_the_inference_pool_is_refused():
    def to_inference(everything):
        terms = training_pod_spec(everything)["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        terms[0]["matchExpressions"][0]["values"] = ["inference"]

    [line] = planted("prod-cluster", to_inference)
    assert "pinned to the tenant's own GPU pools" in line


def test_a_gpu_deployment_in_a_tenant_namespace_is_refused():
    def as_deployment(everything):
        spec = copy.deepcopy(training_pod_spec(everything))
        everything.append({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "sneaky", "namespace": "research"},
                           "spec": {"selector": {"matchLabels": {"a": "b"}},
                                    "template": {"metadata": {"labels": {"a": "b"}}, "spec": spec}}})

    [line] = planted("prod-cluster", as_deployment)
    assert line.startswith("program: Deployment research/sneaky: ") and "must come from a Job" in line


def test_a_service_with_external_ips_is_refused_anywhere():
    def external(everything):
        service = next(o for o in everything if o["kind"] == "Service" and o["metadata"]["namespace"] == "monitoring")
        service["spec"]["externalIPs"] = ["10.0.0.10"]

    [line] = planted("prod-cluster", external)
    assert f"admission policy {EXTERNAL_IPS_POLICY}: " in line


def test_tenant_namespaces_are_what_kueue_manages_without_a_queue_name():
    import yaml

    from infra.checks.admission_policy import selector_matches

    release = next(r for r in preview("prod-cluster").registrations
                   if r.type == "kubernetes:helm.sh/v4:Chart" and r.name == "kueue")
    config = yaml.safe_load(release.inputs()["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["manageJobsWithoutQueueName"] is True
    managed = {o["metadata"]["name"] for o in objects("prod-cluster") if o["kind"] == "Namespace"
               and selector_matches(config["managedJobsNamespaceSelector"], namespace_labels(o))}
    assert managed == set(tenants("prod-cluster")) == {"research", "applied", "serving"}


@pytest.mark.parametrize("stack", CLUSTER_STACKS)
def test_the_platforms_own_claims_fit_each_tenants_quota_with_its_storage_on_top(stack):
    """The API server refuses a claim past the namespace's quota: the scratch claim the
    platform makes in each tenant's namespace (the whole Lustre file system's size, or the
    customer's scratch size) must fit, and leave the tenant its configured storage."""
    from infra.config import load_stack
    from infra.descriptor import descriptor_config
    from tests.conftest import CUSTOMER_STACKS, customer_descriptor

    config = (descriptor_config(customer_descriptor(stack), stack) if stack in CUSTOMER_STACKS
              else load_stack(stack.removesuffix("-cluster")))
    configured = {t.name: t.quotas.storage_gi for t in config.tenants}
    everything = objects(stack)
    checked = 0
    for name in tenants(stack):
        [quota] = [o for o in everything if o["kind"] == "ResourceQuota" and o["metadata"]["namespace"] == name]
        claims = [o for o in everything if o["kind"] == "PersistentVolumeClaim" and o["metadata"]["namespace"] == name]
        claimed = sum(parse_quantity(c["spec"]["resources"]["requests"]["storage"]) for c in claims)
        hard = quota["spec"]["hard"]
        assert claimed + configured[name] * 2**30 <= parse_quantity(hard["requests.storage"]), (stack, name, claimed)
        assert len(claims) < int(hard["persistentvolumeclaims"])
        checked += bool(claims)
    if stack in ("prod-cluster", "staging-cluster", "onprem"):
        assert checked, f"{stack}: no tenant has a scratch claim; the walk is broken"
