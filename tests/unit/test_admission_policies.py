"""The tenant admission policies (components/admission_spec.py), evaluated with cel-python
as the API server evaluates them (infra/checks/admission_policy.py): for each side door
between tenants, the trick that must be refused and the look-alike that must pass."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from components.admission_spec import JOB_CONTROLLER, admission_objects
from components.tenancy_spec import Tenant, tenant_namespace
from components.training_spec import RUN_AS, tenant_pod_security
from infra.checks.admission_policy import Request, refusals
from infra.versions import KUBERNETES_VERSION

OBJECTS = admission_objects()
POLICIES = [o for o in OBJECTS if o["kind"] == "ValidatingAdmissionPolicy"]
BINDINGS = [o for o in OBJECTS if o["kind"] == "ValidatingAdmissionPolicyBinding"]
POOLS = (("train-p5", "p5.48xlarge"), ("inference", "g6e.2xlarge"))
RESEARCH = Tenant("research", 64, 512, 16, 64, instance_types=("p5.48xlarge",), gid=30001)
APPLIED = Tenant("applied", 64, 512, 16, 64, instance_types=("p5.48xlarge",), gid=30002)
NAMESPACE = tenant_namespace(RESEARCH, POOLS)
BY_JOB = Request("CREATE", JOB_CONTROLLER)
BY_REPLICASET = Request("CREATE", "system:serviceaccount:kube-system:replicaset-controller")
BY_DEVELOPER = Request("CREATE", "alice@example.com")


def pod(**spec: Any) -> dict[str, Any]:
    """A research pod as the platform writes them; `spec` replaces fields of its spec."""
    body = {"securityContext": tenant_pod_security(RESEARCH.gid),
            "containers": [{"name": "main", "image": "i", "resources": {"limits": {"cpu": "1"}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "research"},
            "spec": {**body, **spec}}


def refused(obj: dict[str, Any], request: Request = BY_DEVELOPER, namespace: dict[str, Any] = NAMESPACE) -> list[str]:
    return refusals(POLICIES, BINDINGS, obj, namespace, request)


def with_security(**fields: Any) -> dict[str, Any]:
    return pod(securityContext={**tenant_pod_security(RESEARCH.gid), **fields})


def gpu_pod(**spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    return pod(containers=[container], tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}], **spec)


def pool_affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": term} for term in terms]}}}


def test_objects_are_valid_at_the_clusters_version():
    for manifest in OBJECTS:
        kubernetes_validate.validate(manifest, f"{KUBERNETES_VERSION}.0", strict=True)
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in POLICIES)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in BINDINGS)


def test_the_platforms_own_pod_passes():
    assert refused(pod()) == []
    assert refused(pod(), BY_REPLICASET) == []


def test_tenant_namespace_states_what_the_policies_read():
    annotations = NAMESPACE["metadata"]["annotations"]
    assert annotations == {"mlplat.io/uid": str(RUN_AS), "mlplat.io/gid": "30001",
                           "pool.mlplat.io/train-p5": "allowed", "instance-type.mlplat.io/p5.48xlarge": "allowed"}
    # A tenant that names no instance types may use every GPU pool.
    everything = tenant_namespace(Tenant("dev", 8, 32, 1, 0, gid=30003), POOLS)["metadata"]["annotations"]
    assert {k for k in everything if k.startswith("pool.")} == {"pool.mlplat.io/train-p5", "pool.mlplat.io/inference"}


# --- externalIPs -----------------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["research", "monitoring", "inference"])
def test_external_ips_refused_in_every_namespace(namespace):
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": namespace},
               "spec": {"ports": [{"port": 443}], "externalIPs": ["10.0.12.7"]}}
    ns = NAMESPACE if namespace == "research" else {"metadata": {"name": namespace}}
    [line] = refused(service, namespace=ns)
    assert "externalIPs is not allowed" in line and "CVE-2020-8554" in line
    service["spec"]["externalIPs"] = []
    assert refused(service, namespace=ns) == []
    del service["spec"]["externalIPs"]
    assert refused(service, namespace=ns) == []


# --- priority --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["system-node-critical", "system-cluster-critical", "system-anything"])
def test_system_priority_refused(name):
    [line] = refused(pod(priorityClassName=name))
    assert "system-* priority class" in line


@pytest.mark.parametrize("name", ["batch-high", "systematic", "low-system-"])
def test_other_priority_classes_pass(name):
    assert refused(pod(priorityClassName=name)) == []


# --- UID and group ---------------------------------------------------------------------


@pytest.mark.parametrize("fields", [{"runAsUser": 10002}, {"runAsUser": 0}])
def test_another_uid_refused(fields):
    [line] = refused(with_security(**fields))
    assert "securityContext.runAsUser must be 10001" in line


def test_uid_left_to_the_image_refused():
    security = tenant_pod_security(RESEARCH.gid)
    del security["runAsUser"]
    [line] = refused(pod(securityContext=security))
    assert "runAsUser must be 10001" in line


def test_a_containers_own_uid_refused_unless_the_same():
    container = {"name": "main", "image": "i", "securityContext": {"runAsUser": 10002}}
    assert "runAsUser must be 10001" in refused(pod(containers=[container]))[0]
    container["securityContext"]["runAsUser"] = RUN_AS
    assert refused(pod(containers=[container])) == []


@pytest.mark.parametrize("fields", [
    {"runAsGroup": APPLIED.gid},  # another tenant's directory
    {"fsGroup": APPLIED.gid},
    {"supplementalGroups": [APPLIED.gid]},
    {"supplementalGroups": [RESEARCH.gid, 0]},
    {"supplementalGroupsPolicy": "Merge"},  # the image's /etc/group could add any group
])
def test_another_group_refused(fields):
    [line] = refused(with_security(**fields))
    assert "runAsGroup and fsGroup must be 30001" in line


def test_group_policy_left_to_the_default_refused():
    security = tenant_pod_security(RESEARCH.gid)
    del security["supplementalGroupsPolicy"]  # Merge by default
    assert refused(pod(securityContext=security))


def test_own_group_as_a_supplemental_group_passes():
    assert refused(with_security(supplementalGroups=[RESEARCH.gid])) == []


@pytest.mark.parametrize("group", ["initContainers", "containers"])
def test_a_containers_own_group_refused(group):
    spec = pod()["spec"]
    spec[group] = [{"name": "x", "image": "i", "securityContext": {"runAsGroup": APPLIED.gid}}]
    if group == "initContainers":
        spec["containers"] = pod()["spec"]["containers"]
    assert "runAsGroup and fsGroup must be 30001" in refused(pod(**spec))[0]


def test_a_debug_container_is_held_to_the_same():
    """`kubectl debug` adds an ephemeral container: an UPDATE of pods/ephemeralcontainers."""
    running = pod(ephemeralContainers=[{"name": "debug", "image": "i", "securityContext": {"runAsGroup": APPLIED.gid}}])
    [line] = refused(running, Request("UPDATE", "alice@example.com", "ephemeralcontainers"))
    assert "runAsGroup" in line
    running["spec"]["ephemeralContainers"][0]["securityContext"]["runAsGroup"] = RESEARCH.gid
    assert refused(running, Request("UPDATE", "alice@example.com", "ephemeralcontainers")) == []


def test_another_tenants_namespace_holds_its_own_group():
    applied_ns = tenant_namespace(APPLIED, POOLS)
    research_pod = pod()
    research_pod["metadata"]["namespace"] = "applied"
    assert "must be 30002" in refused(research_pod, namespace=applied_ns)[0]


def test_a_namespace_without_the_annotations_refuses_every_pod():
    bare = copy.deepcopy(NAMESPACE)
    del bare["metadata"]["annotations"]
    lines = refused(pod(), namespace=bare)
    assert any("has no mlplat.io/uid and mlplat.io/gid annotations" in line for line in lines)


def test_platform_namespaces_are_not_held_to_a_tenants_identity():
    monitoring = {"metadata": {"name": "monitoring", "labels": {}}}
    assert refused(with_security(runAsUser=65534, runAsGroup=65534), namespace=monitoring) == []


# --- GPU pools -------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [
    {},  # tolerates the taint, pinned nowhere
    {"nodeSelector": {"mlplat.io/pool": "inference"}},  # Triton's pool
    {"nodeSelector": {"node.kubernetes.io/instance-type": "g6e.2xlarge"}},
    {"nodeSelector": {"mlplat.io/role": "gpu"}},
    {"affinity": pool_affinity([{"key": "mlplat.io/pool", "operator": "In", "values": ["train-p5", "inference"]}])},
    {"affinity": pool_affinity([{"key": "mlplat.io/pool", "operator": "In", "values": ["train-p5"]}],
                               [{"key": "mlplat.io/pool", "operator": "In", "values": ["inference"]}])},
    {"affinity": pool_affinity([{"key": "mlplat.io/pool", "operator": "NotIn", "values": ["inference"]}])},
])
def test_gpu_toleration_off_the_tenants_pools_refused(spec):
    lines = refused(gpu_pod(**spec), BY_JOB)
    assert len(lines) == 1 and "pinned to the tenant's own GPU pools" in lines[0]


def test_toleration_of_every_taint_counts_as_the_gpu_taint():
    lines = refused(pod(tolerations=[{"operator": "Exists"}]))
    assert len(lines) == 1 and "pinned" in lines[0]


@pytest.mark.parametrize("spec", [
    {"nodeSelector": {"mlplat.io/pool": "train-p5"}},
    {"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},  # what Kueue's flavor injects
    {"affinity": pool_affinity([{"key": "mlplat.io/pool", "operator": "In", "values": ["train-p5"]}])},
    {"affinity": pool_affinity([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]},
                                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                                 "values": ["p5.48xlarge"]}])},
])
def test_gpu_toleration_on_the_tenants_own_pools_passes(spec):
    assert refused(gpu_pod(**spec), BY_JOB) == []


def test_other_tolerations_need_no_pin():
    assert refused(pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}])) == []


def test_node_name_refused_at_creation():
    [line] = refused(pod(nodeName="ip-10-0-1-1.ec2.internal"))
    assert "spec.nodeName is not allowed" in line
    # The scheduler's binding does not come through here; an update of a placed pod is not refused.
    assert refused(pod(nodeName="ip-10-0-1-1.ec2.internal"), Request("UPDATE", "system:kube-scheduler")) == []


# --- accelerators through Kueue only ---------------------------------------------------


@pytest.mark.parametrize("request_", [BY_DEVELOPER, BY_REPLICASET,
                                      Request("CREATE", "system:serviceaccount:kube-system:statefulset-controller")])
def test_gpus_outside_a_job_refused(request_):
    [line] = refused(gpu_pod(nodeSelector={"mlplat.io/pool": "train-p5"}), request_)
    assert "must come from a Job" in line


@pytest.mark.parametrize("resources", [{"requests": {"vpc.amazonaws.com/efa": "1"}},
                                       {"limits": {"nvidia.com/mig-1g.10gb": "1"}},
                                       {"limits": {"rdma/rdma_shared_device_a": "1"}}])
def test_any_device_outside_a_job_refused(resources):
    container = {"name": "main", "image": "i", "resources": resources}
    [line] = refused(pod(containers=[container]), BY_REPLICASET)
    assert "must come from a Job" in line


def test_a_dra_claim_outside_a_job_refused():
    claimed = pod(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    assert "must come from a Job" in refused(claimed, BY_REPLICASET)[0]


def test_cpu_memory_and_huge_pages_outside_a_job_pass():
    container = {"name": "main", "image": "i",
                 "resources": {"limits": {"cpu": "2", "memory": "4Gi", "hugepages-2Mi": "1Gi", "ephemeral-storage": "1Gi"}}}
    assert refused(pod(containers=[container]), BY_REPLICASET) == []


# --- the evaluator itself --------------------------------------------------------------


def test_an_expression_that_fails_refuses_under_fail_and_admits_under_ignore():
    broken = copy.deepcopy(POLICIES)
    tenant_pods = next(p for p in broken if p["metadata"]["name"] == "mlplat-tenant-pods")
    tenant_pods["spec"]["validations"][0]["expression"] = "object.spec.noSuchField.startsWith('x')"
    [line] = refusals(broken, BINDINGS, pod(), NAMESPACE, BY_DEVELOPER)
    assert "its expression failed" in line
    tenant_pods["spec"]["failurePolicy"] = "Ignore"
    assert refusals(broken, BINDINGS, pod(), NAMESPACE, BY_DEVELOPER) == []


def test_without_its_binding_a_policy_refuses_nothing():
    assert refusals(POLICIES, [], pod(priorityClassName="system-node-critical"), NAMESPACE) == []
