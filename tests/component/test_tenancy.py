"""`Tenancy` under mocks: per-tenant objects as the engine receives them, the endpoint
policy from outputs, no AWS resource; `TenantAccess` (the cloud layer's): access entries
for the tenants' IAM roles."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pytest

from components.tenancy import Tenancy, TenancyArgs, TenantAccess, TenantAccessArgs
from components.tenancy_spec import Tenant
from tests.component.recorder import Recording, record

ROLE = "arn:aws:iam::111122223333:role/research-engineers"
TENANTS = (
    Tenant("research", 64, 512, 24, 96, cohort="training", groups=("mlplat:research-developers",),
           role_arns=(ROLE,)),
    Tenant("applied", 32, 256, 8, 32, cohort="training"),
)


def build() -> Recording:
    def program(aws_provider):
        cluster = k8s.Provider("cluster-k8s", kubeconfig="{}")
        vpc = aws.ec2.Vpc("vpc", cidr_block="10.0.0.0/16", opts=pulumi.ResourceOptions(provider=aws_provider))
        Tenancy("tenancy", TenancyArgs(
            tenants=TENANTS,
            # An output, as the VPC's CIDR is while the network is being created.
            endpoint_cidrs=vpc.cidr_block.apply(lambda cidr: [cidr, "198.51.100.0/24"]),
        ), opts=pulumi.ResourceOptions(providers={"aws": aws_provider, "kubernetes": cluster}))

    return record(program)


def build_access(tenants: tuple[Tenant, ...] = TENANTS) -> Recording:
    def program(aws_provider):
        TenantAccess("tenant-access", TenantAccessArgs(tenants=tenants, cluster_name="mlplat-test"),
                     opts=pulumi.ResourceOptions(providers={"aws": aws_provider}))

    return record(program)


@pytest.fixture(scope="module")
def rec() -> Recording:
    return build()


@pytest.fixture(scope="module")
def access() -> Recording:
    return build_access()


def in_namespace(rec: Recording, namespace: str) -> dict[tuple[str, str], object]:
    found = {}
    for reg in rec.registrations:
        if reg.type.startswith("kubernetes:") and reg.custom:
            meta = reg.inputs().get("metadata", {})
            if meta.get("namespace") == namespace:
                found[(reg.inputs()["kind"], meta["name"])] = reg
    return found


def test_namespace_per_tenant_retained_on_delete(rec):
    namespaces = {r.inputs()["metadata"]["name"]: r for r in rec.of_type("kubernetes:core/v1:Namespace")}
    assert set(namespaces) == {"research", "applied"}
    for ns in namespaces.values():
        assert ns.retain_on_delete
        assert ns.inputs()["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_each_namespace_gets_its_fences_after_the_namespace(rec):
    namespace = next(r for r in rec.of_type("kubernetes:core/v1:Namespace") if r.name == "namespace-research")
    objects = in_namespace(rec, "research")
    assert set(objects) == {
        ("ResourceQuota", "tenant-quota"), ("LimitRange", "container-defaults"),
        ("NetworkPolicy", "default-deny"), ("NetworkPolicy", "allow-dns"), ("NetworkPolicy", "allow-same-namespace"),
        ("NetworkPolicy", "allow-pod-identity"), ("NetworkPolicy", "allow-prometheus-scrape"),
        ("NetworkPolicy", "allow-vpc-endpoints"), ("NetworkPolicy", "allow-tracking"),
        ("Role", "tenant-developer"), ("RoleBinding", "tenant-developers"),
    }
    for reg in objects.values():
        assert namespace.urn in reg.dependencies
    assert ("RoleBinding", "tenant-developers") not in in_namespace(rec, "applied")


def test_typed_resources_for_core_kinds(rec):
    types = {r.type for r in rec.registrations if r.type.startswith("kubernetes:")}
    assert {"kubernetes:core/v1:ResourceQuota", "kubernetes:core/v1:LimitRange",
            "kubernetes:networking.k8s.io/v1:NetworkPolicy", "kubernetes:rbac.authorization.k8s.io/v1:Role",
            "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"} <= types


def test_endpoint_policy_resolves_the_cidrs(rec):
    policy = in_namespace(rec, "research")[("NetworkPolicy", "allow-vpc-endpoints")]
    [rule] = policy.inputs()["spec"]["egress"]
    assert [t["ipBlock"]["cidr"] for t in rule["to"]] == ["10.0.0.0/16", "198.51.100.0/24"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}]


def test_quota_is_the_cohort_ceiling(rec):
    quota = in_namespace(rec, "applied")[("ResourceQuota", "tenant-quota")]
    assert quota.inputs()["spec"]["hard"]["requests.nvidia.com/gpu"] == "32"


def test_access_entry_maps_the_tenant_role_to_its_groups(access):
    [entry] = access.of_type("aws:eks/accessEntry:AccessEntry")
    inputs = entry.inputs()
    assert inputs["principalArn"] == ROLE and inputs["kubernetesGroups"] == ["mlplat:research-developers"]
    assert inputs["clusterName"] == "mlplat-test" and inputs["type"] == "STANDARD"
    [aws_provider] = access.of_type("pulumi:providers:aws")
    [component] = access.of_type("mlplat:tenancy:TenantAccess")
    assert entry.provider_urn == aws_provider.urn and entry.parent == component.urn
    # The cloud layer's half: no Kubernetes object.
    assert not [r for r in access.registrations if r.type.startswith("kubernetes:")]


def test_the_groups_the_access_entry_maps_to_are_the_ones_tenancy_binds(rec, access):
    [entry] = access.of_type("aws:eks/accessEntry:AccessEntry")
    binding = in_namespace(rec, "research")[("RoleBinding", "tenant-developers")]
    subjects = {s["name"] for s in binding.inputs()["subjects"] if s["kind"] == "Group"}
    assert set(entry.inputs()["kubernetesGroups"]) <= subjects


def test_kubernetes_objects_on_the_cluster_provider_under_the_component(rec):
    [provider] = rec.of_type("pulumi:providers:kubernetes")
    [component] = rec.of_type("mlplat:tenancy:Tenancy")
    for reg in rec.registrations:
        if reg.type.startswith("kubernetes:"):
            assert reg.provider_urn == provider.urn and reg.parent == component.urn


def test_tenancy_makes_no_access_entries_and_no_aws_resource(rec):
    # Access entries are the cloud layer's (TenantAccess); the VPC is this test's stand-in.
    assert not rec.of_type("aws:eks/accessEntry:AccessEntry")
    assert [r.type for r in rec.registrations if r.type.startswith("aws:")] == ["aws:ec2/vpc:Vpc"]


def test_no_access_entries_for_tenants_without_roles():
    assert not build_access(tuple(t for t in TENANTS if not t.role_arns)).of_type("aws:eks/accessEntry:AccessEntry")
