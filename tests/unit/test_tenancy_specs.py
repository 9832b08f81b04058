"""Tenant specs (namespace, quota, limits, network policies, RBAC), the system namespaces'
Pod Security exceptions, and the tenant settings a user gets wrong."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from components.addons.values import NAMESPACES
from components.tenancy_spec import (
    GID_RANGE,
    tenant_gid,
    DEVELOPER_RULES,
    SYSTEM_NAMESPACES,
    Tenant,
    developer_binding,
    endpoint_policy,
    limit_range,
    network_policies,
    quota_ceiling,
    resource_quota,
    system_namespace,
    tenant_namespace,
    tenant_objects,
    tenants_from_config,
)
from infra.config import ConfigError, load_stack, parse_config
from infra.versions import KUBERNETES_VERSION
from tests.unit.test_config import raw_stack

RESEARCH = Tenant("research", cpu=64, memory_gi=512, gpu=24, efa=96, cohort="training",
                  groups=("mlplat:research-developers",))
APPLIED = Tenant("applied", cpu=32, memory_gi=256, gpu=8, efa=32, cohort="training")
SERVING = Tenant("serving", cpu=8, memory_gi=64, gpu=4, efa=0)
EVERYONE = (RESEARCH, APPLIED, SERVING)
CIDRS = ["10.0.0.0/16", "198.51.100.0/24"]
REPO = Path(__file__).resolve().parents[2]


def test_tenant_namespace_enforces_restricted_pinned_to_the_cluster_version():
    labels = tenant_namespace(RESEARCH)["metadata"]["labels"]
    version = f"v{KUBERNETES_VERSION}"
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == version
    assert labels["mlplat.io/tenant"] == "research" and labels["mlplat.io/cohort"] == "training"


def test_every_pod_security_exception_is_written_down():
    for ns in SYSTEM_NAMESPACES.values():
        assert ns.level in ("privileged", "baseline", "restricted")
        assert len(ns.reason) > 30, f"{ns.name}: say why"
    # Exactly the namespaces whose daemons need host access are privileged.
    privileged = {n for n, ns in SYSTEM_NAMESPACES.items() if ns.level == "privileged"}
    assert privileged == {"kube-system", "nvidia-device-plugin", "gpu-operator", "monitoring",
                          "nvidia-network-operator"}
    # Every namespace an add-on installs into is in the table.
    assert set(NAMESPACES.values()) <= set(SYSTEM_NAMESPACES)


def test_system_namespace_manifest_carries_level_and_reason():
    ns = system_namespace(SYSTEM_NAMESPACES["kueue-system"])
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert "Kueue" in ns["metadata"]["annotations"]["mlplat.io/pod-security-reason"]
    assert not SYSTEM_NAMESPACES["kube-system"].managed  # EKS owns it; never relabelled


def test_quota_ceiling_is_own_quota_plus_what_the_cohort_can_lend():
    assert quota_ceiling(RESEARCH, EVERYONE) == Tenant("research", 96, 768, 32, 128, "training")
    assert quota_ceiling(SERVING, EVERYONE) == Tenant("serving", 8, 64, 4, 0, None)


def test_resource_quota_backstops_kueue_and_blocks_exposure():
    hard = resource_quota(RESEARCH, EVERYONE)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "32"
    assert hard["requests.vpc.amazonaws.com/efa"] == "128"
    assert hard["requests.cpu"] == "96" and hard["requests.memory"] == "768Gi"
    assert hard["services.loadbalancers"] == "0" and hard["services.nodeports"] == "0"


def test_what_no_queue_lends_is_the_tenants_own_whatever_its_cohort():
    """Pods, claimed storage and node-local disk are not borrowed through Kueue: the
    ceiling is the tenant's own, where CPU's is its cohort's sum."""
    research = replace(RESEARCH, pods=40, storage_gi=300, ephemeral_gi=90)
    hard = resource_quota(research, [research, *[t for t in EVERYONE if t.name != research.name]])["spec"]["hard"]
    assert (hard["pods"], hard["requests.storage"], hard["requests.ephemeral-storage"]) == ("40", "300Gi", "90Gi")
    assert research.cohort and int(hard["requests.cpu"]) > research.cpu


def test_the_config_names_pods_storage_and_disk_or_takes_the_defaults():
    from infra.config import TenantQuotasConfig

    given = TenantQuotasConfig.model_validate({"cpu": 8, "memoryGi": 32, "pods": 12, "storageGi": 5, "ephemeralGi": 7})
    assert (given.pods, given.storage_gi, given.ephemeral_gi) == (12, 5, 7)
    default = TenantQuotasConfig.model_validate({"cpu": 8, "memoryGi": 32})
    assert default.pods >= 1 and default.storage_gi > 0 and default.ephemeral_gi > 0
    with pytest.raises(ValueError):
        TenantQuotasConfig.model_validate({"cpu": 8, "memoryGi": 32, "pods": 0})


def test_limit_range_gives_every_container_limits():
    [limits] = limit_range(RESEARCH)["spec"]["limits"]
    assert limits["type"] == "Container" and limits["default"]["memory"] and limits["defaultRequest"]["cpu"]


def by_name(policies: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p["spec"] for p in policies}


def test_default_deny_both_ways_then_only_the_needed_flows():
    policies = by_name(network_policies(RESEARCH))
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    [dns] = policies["allow-dns"]["egress"]
    assert dns["to"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    same = policies["allow-same-namespace"]
    assert same["ingress"] == [{"from": [{"podSelector": {}}]}] and same["egress"] == [{"to": [{"podSelector": {}}]}]
    [scrape] = policies["allow-prometheus-scrape"]["ingress"]
    assert scrape["from"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    assert "egress" not in policies["allow-prometheus-scrape"]
    # Without this, pods would get no AWS credentials (S3 datasets and checkpoints).
    [identity] = policies["allow-pod-identity"]["egress"]
    assert identity == {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}], "ports": [{"protocol": "TCP", "port": 80}]}


def test_endpoint_policy_is_https_to_the_given_cidrs_only():
    spec = endpoint_policy(RESEARCH, CIDRS)["spec"]
    assert spec["policyTypes"] == ["Egress"]
    [rule] = spec["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}]
    assert [t["ipBlock"]["cidr"] for t in rule["to"]] == CIDRS


def test_developers_run_workloads_but_cannot_move_the_fences():
    writable = {(group, resource) for rule in DEVELOPER_RULES if "create" in rule["verbs"] or "delete" in rule["verbs"]
                for group in rule["apiGroups"] for resource in rule["resources"]}
    assert ("jobset.x-k8s.io", "jobsets") in writable and ("batch", "jobs") in writable
    for fence in [("", "resourcequotas"), ("", "limitranges"), ("networking.k8s.io", "networkpolicies"),
                  ("rbac.authorization.k8s.io", "roles"), ("rbac.authorization.k8s.io", "rolebindings"),
                  ("kueue.x-k8s.io", "localqueues"), ("", "namespaces")]:
        assert fence not in writable
    assert all("*" not in rule["verbs"] and "*" not in rule["resources"] for rule in DEVELOPER_RULES)


def test_binding_names_the_tenant_groups():
    binding = developer_binding(RESEARCH)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-developer"}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "mlplat:research-developers"}]
    kinds = [o["kind"] for o in tenant_objects(APPLIED, EVERYONE)]
    assert "RoleBinding" not in kinds  # no groups, nobody to bind


@pytest.mark.parametrize("tenant", EVERYONE, ids=lambda t: t.name)
def test_every_tenant_object_is_schema_valid(tenant):
    objects = [tenant_namespace(tenant), *tenant_objects(tenant, EVERYONE, CIDRS),
               system_namespace(SYSTEM_NAMESPACES["monitoring"])]
    assert [o["kind"] for o in objects].count("NetworkPolicy") == 7
    for manifest in objects:
        kubernetes_validate.validate(manifest, f"{KUBERNETES_VERSION}.0", strict=True)


def test_tenants_from_config():
    prod = tenants_from_config(load_stack("prod").tenants)
    research = next(t for t in prod if t.name == "research")
    assert research == Tenant("research", 1152, 12288, 96, 384, "training", ("mlplat:research-developers",), (),
                              ("p5.48xlarge",), tenant_gid("research"))
    # Drawn from the name, so stable whatever the order of the tenants, and apart for each.
    assert len({t.gid for t in prod}) == len(prod) and all(GID_RANGE[0] <= t.gid < GID_RANGE[1] for t in prod)


def test_a_tenants_group_is_its_own():
    def with_gid(raw: dict, gids: list) -> None:
        for tenant, gid in zip(raw["mlplat:tenants"], gids):
            tenant["gid"] = gid

    raw = raw_stack("prod")
    with_gid(raw, [31000, 31000])
    with pytest.raises(ConfigError, match=r"mlplat:tenants\[1\]\.gid: 31000 is already the group of tenant 'research'"):
        parse_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True)
    for reserved, why in ((0, ": Input should be greater than or equal to 1000"), (999, ": Input should be"),
                          (10001, " is the platform workloads' shared group"), (65534, " is nogroup")):
        raw = raw_stack("prod")
        with_gid(raw, [reserved])
        with pytest.raises(ConfigError, match=rf"mlplat:tenants\[0\]\.gid: {reserved}{why}"):
            parse_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True)
    raw = raw_stack("prod")
    with_gid(raw, [31000])
    assert tenants_from_config(parse_config(raw, "x", from_stack_file=True).tenants)[0].gid == 31000


# --- Bad input: one line naming key, value and what is allowed -------------------------


def tenants_error(tenants: list[dict[str, Any]], stack: str = "dev", **extra: Any) -> str:
    raw = raw_stack(stack)
    raw["mlplat:tenants"] = tenants
    raw.update(extra)
    with pytest.raises(ConfigError) as err:
        parse_config(raw, f"stacks/Pulumi.{stack}.yaml", from_stack_file=True)
    assert "\n" not in str(err.value)
    return str(err.value)


def tenant(**fields: Any) -> dict[str, Any]:
    return {"name": "research", "quotas": {"cpu": 8, "memoryGi": 32}, **fields}


def test_gpu_quota_beyond_what_the_pools_can_hold():
    assert tenants_error([tenant(quotas={"cpu": 8, "memoryGi": 32, "gpu": 3})]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[0].quotas.gpu: 3 GPUs is more than the pools can ever hold "
        "(2: gpu: 2 x g5.2xlarge x 1 GPU); lower the quota or raise a pool's maxSize")


def test_time_slicing_raises_what_the_pools_hold():
    raw = raw_stack("dev")
    raw["mlplat:addons"] = {"timeSlicingReplicas": 4}
    raw["mlplat:tenants"] = [tenant(quotas={"cpu": 8, "memoryGi": 32, "gpu": 8})]
    assert parse_config(raw, "stacks/Pulumi.dev.yaml", from_stack_file=True).tenants[0].quotas.gpu == 8
    assert tenants_error([tenant(quotas={"cpu": 8, "memoryGi": 32, "gpu": 9})],
                         **{"mlplat:addons": {"timeSlicingReplicas": 4}}).endswith(
        "9 GPUs is more than the pools can ever hold (8: gpu: 2 x g5.2xlarge x 1 GPU x 4 time-slicing replicas); "
        "lower the quota or raise a pool's maxSize")


def test_gpu_quota_counts_only_the_tenants_instance_types():
    message = tenants_error([tenant(quotas={"cpu": 8, "memoryGi": 32, "gpu": 9}, instanceTypes=["g6e.2xlarge"])],
                            stack="prod")
    assert message == (
        "stacks/Pulumi.prod.yaml: mlplat:tenants[0].quotas.gpu: 9 GPUs is more than the pools can ever hold "
        "(8: inference: 8 x g6e.2xlarge x 1 GPU); lower the quota or raise a pool's maxSize")


def test_gpu_quota_on_a_cpu_only_stack():
    assert tenants_error([tenant(quotas={"cpu": 8, "memoryGi": 32, "gpu": 1})], stack="smb") == (
        "stacks/Pulumi.smb.yaml: mlplat:tenants[0].quotas.gpu: 1 GPUs is more than the pools can ever hold "
        "(0: no GPU pool); lower the quota or raise a pool's maxSize")


def test_efa_quota_without_efa_pools():
    assert tenants_error([tenant(quotas={"cpu": 8, "memoryGi": 32, "efa": 4})]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[0].quotas.efa: 4 EFA interfaces is more than the pools can ever "
        "hold (0: no pool attaches EFA); lower the quota or raise a pool's maxSize")


def test_instance_type_without_a_pool():
    assert tenants_error([tenant(instanceTypes=["p5.48xlarge"])]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[0].instanceTypes: 'p5.48xlarge' is not the type of any GPU pool; "
        "GPU pools run: g5.2xlarge")


def test_reserved_and_duplicate_names():
    assert tenants_error([tenant(name="monitoring")]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[0].name: 'monitoring' is a system namespace; pick another tenant name")
    assert tenants_error([tenant(name="datasets")]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[0].name: 'datasets' is the datasets directory on the Lustre file "
        "system; pick another tenant name")
    assert tenants_error([tenant(), tenant()]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[1].name: 'research' is used twice; tenant names must be unique")
    assert "mlplat:tenants[0].name: 'Research' does not match" in tenants_error([tenant(name="Research")])


def test_groups_and_role_arns():
    assert tenants_error([tenant(groups=["system:masters"])]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[0].groups: 'system:masters' is not allowed as a tenant group; "
        "use letters, digits and :._@- and never the system: prefix")
    assert tenants_error([tenant(roleArns=["arn:aws:iam::111122223333:role/research"])]) == (
        "stacks/Pulumi.dev.yaml: mlplat:tenants[0].groups: is empty but roleArns are set; "
        "name the groups those roles are mapped to")
    admin = "arn:aws:iam::111122223333:role/platform-admin"
    assert tenants_error([tenant(groups=["g"], roleArns=[admin])],
                         **{"mlplat:cluster": {**raw_stack("dev")["mlplat:cluster"], "adminRoleArns": [admin]}}) == (
        f"stacks/Pulumi.dev.yaml: mlplat:tenants[0].roleArns: '{admin}' already has an access entry; "
        "an IAM role maps to one set of groups only")


def test_negative_quota():
    assert "mlplat:tenants[0].quotas.gpu: -1:" in tenants_error([tenant(quotas={"cpu": 8, "memoryGi": 32, "gpu": -1})])


@pytest.mark.parametrize(("setting", "expected"), [
    ({"mlplat:tenants": [{"name": "research", "quotas": {"cpu": 8, "memoryGi": 32, "gpu": 64}}]},
     "mlplat:tenants[0].quotas.gpu: 64 GPUs is more than the pools can ever hold (2: gpu: 2 x g5.2xlarge x 1 GPU); "
     "lower the quota or raise a pool's maxSize"),
    ({"mlplat:addons": {"devicePluginMode": "both"}},
     "mlplat:addons.devicePluginMode: 'both': choose one of 'device-plugin', 'gpu-operator'; the GPU Operator "
     "brings its own device plugin, so both cannot run"),
])
def test_preview_refuses_bad_tenancy_with_one_line_and_exit_2(tmp_path, capsys, setting, expected):
    from infra.cli import EXIT_BAD_INPUT, main

    document = yaml.safe_load((REPO / "stacks" / "Pulumi.dev.yaml").read_text())
    document["config"].update(setting)
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(document))
    report = tmp_path / "report.json"
    code = main(["preview", "--stack", "dev", "--stacks-dir", str(tmp_path), "--json", str(report), "--quiet"])
    assert code == EXIT_BAD_INPUT
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == f"mlplat: error: {tmp_path / 'Pulumi.dev.yaml'}: {expected}"
    assert not report.exists()  # stopped before the program ran: nothing registered


def test_no_tenant_can_be_named_like_a_namespace_the_platform_makes():
    """Every Namespace the cluster layers apply, other than the tenants' own (labelled with
    their tenant), is a name the config refuses for a tenant; the serving namespace is refused
    as a tenant's by the stack's own check (test_inference_config)."""
    from components.tenancy_spec import RESERVED_NAMES, RESERVED_PREFIXES, platform_identity
    from infra.preview.report import kubernetes_objects
    from tests.conftest import preview

    for stack in ("prod-cluster", "onprem"):
        namespaces = [o for o in kubernetes_objects(preview(stack)) if o["kind"] == "Namespace"]
        made = {o["metadata"]["name"] for o in namespaces if "mlplat.io/tenant" not in o["metadata"].get("labels", {})}
        assert made  # the platform's own: monitoring, mlflow, inference, ...
        for name in made - {load_stack("prod").inference.namespace}:
            assert name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES) or platform_identity(name), name


def test_more_tenants_than_lustre_links_only_where_lustre_is_on():
    def with_tenants(stack: str, count: int) -> dict:
        raw = raw_stack(stack)
        own = raw["mlplat:tenants"]
        raw["mlplat:tenants"] = own + [{"name": f"team{i}", "quotas": {"cpu": 8, "memoryGi": 32}}
                                       for i in range(count - len(own))]
        return raw

    with pytest.raises(ConfigError) as err:
        parse_config(with_tenants("prod", 9), "stacks/Pulumi.prod.yaml", from_stack_file=True)
    assert str(err.value) == (
        "stacks/Pulumi.prod.yaml: mlplat:tenants: 9 tenants, but Lustre links at most 8 directories to the datasets "
        "bucket (one per tenant's own prefix); split the tenants across environments, or set "
        "storage.lustre.enabled: false")
    assert len(parse_config(with_tenants("prod", 8), "x", from_stack_file=True).tenants) == 8
    assert len(parse_config(with_tenants("dev", 9), "x", from_stack_file=True).tenants) == 9  # no Lustre there
