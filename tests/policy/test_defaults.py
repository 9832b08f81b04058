"""Per-stack policy config, and the pack with none at all (schema defaults, the safe ones)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from platform_policies import ALL_POLICIES, CUSTOMER_CLUSTER

from infra.preview.engine import run_preview

CONFIG_DIR = Path(__file__).resolve().parents[2] / "policies" / "config"
POLICIES = {p.name: p for p in ALL_POLICIES}
# What the stacks' config files relax, each entry with a written reason; every other setting
# they give restates a default or is stricter than it.
RELAXED = {"k8s-pod-security-standards", "k8s-namespaces-enforce-pod-security",
           "k8s-images-pinned", "nothing-exposed-outside-the-cluster"}
CUSTOMER_RULES = {p.name for p in CUSTOMER_CLUSTER}
STRICTER = {("load-balancer-listeners-tls", "requireTls13Policy"): True,
            # a restricted environment (prod): its private subnets only through the egress firewall
            ("no-open-internet-egress", "restricted"): True,
            # turns a customer-cluster rule on (off, `aws`, by default)
            **{(name, "deployment"): "customer-cluster" for name in CUSTOMER_RULES}}
# What a stack's config names of its own infrastructure, in place of the defaults (no registry,
# no object store): the registries of its account (test_registries_are_the_accounts_own) or, on
# a customer's cluster, the customer's registry project and object store
# (test_customer_cluster_config).
SITE_SPECIFIC = {("k8s-images-from-allowed-registries", "allowedRegistries"),
                 ("k8s-charts-from-allowed-registries", "allowedRegistries"),
                 ("object-store-endpoints-allowed", "allowedEndpoints"),
                 ("no-external-access", "trustedAccounts")}
ACCOUNT_ECR = re.compile(r"[0-9]{12}\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com")


def _customer_cluster(config: dict) -> bool:
    return any(isinstance(entry, dict) and entry.get("deployment") == "customer-cluster" for entry in config.values())


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_stack_config_matches_the_rules_schemas(path):
    config = json.loads(path.read_text())
    assert config.pop("all") == "mandatory"
    customer = _customer_cluster(config)
    for name, entry in config.items():
        properties = POLICIES[name].config_schema.properties
        settings = {k: v for k, v in entry.items() if k != "enforcementLevel"}
        jsonschema.validate(settings, {"type": "object", "properties": properties, "additionalProperties": False})
        for key, value in settings.items():
            if (name, key) in SITE_SPECIFIC:
                continue
            if name in RELAXED and isinstance(value, list):
                assert all(item["reason"].strip() for item in value)
            elif STRICTER.get((name, key)) != value:
                assert value == properties[key]["default"], f"{path.name}: {name}.{key} relaxes the default"


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_registries_are_the_accounts_own(path):
    """An AWS environment allows images and charts from exactly its account's ECR in an
    allowed region, named by account: never a wildcard, never another region's."""
    config = json.loads(path.read_text())
    if _customer_cluster(config):
        return
    regions = set(config["aws-resources-in-allowed-regions"]["allowedRegions"])
    images = config["k8s-images-from-allowed-registries"]["allowedRegistries"]
    assert images == config["k8s-charts-from-allowed-registries"]["allowedRegistries"]
    accounts = set(config["no-external-access"]["trustedAccounts"])
    for registry in images:
        match = ACCOUNT_ECR.fullmatch(registry.partition("/")[0])
        assert match and match["region"] in regions, registry
        assert registry.split(".", 1)[0] in accounts, f"{registry}: not an account the environment trusts"


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_customer_cluster_config(path):
    """A customer-cluster stack's config turns every customer-cluster rule on (one left at
    `aws` would silently not judge), allows only the customer's registry, by a repository
    prefix (not the registry's other projects, such as a proxy cache of Docker Hub), for
    images and charts alike, and only https object-store endpoints; an AWS stack's config
    turns none on."""
    config = json.loads(path.read_text())
    deployments = {name: (config.get(name) or {}).get("deployment", "aws") for name in CUSTOMER_RULES}
    if not _customer_cluster(config):
        assert set(deployments.values()) == {"aws"}
        return
    assert set(deployments.values()) == {"customer-cluster"}, deployments
    images = config["k8s-images-from-allowed-registries"]["allowedRegistries"]
    assert images == config["k8s-charts-from-allowed-registries"]["allowedRegistries"]
    for registry in images:
        host, _, prefix = registry.partition("/")
        assert "*" not in host and "amazonaws.com" not in host and prefix, registry
    endpoints = config["object-store-endpoints-allowed"]["allowedEndpoints"]
    assert endpoints and all(e.startswith("https://") and "amazonaws.com" not in e for e in endpoints)


def test_dev_without_policy_config_flags_only_what_the_allow_lists_excuse(tmp_path):
    empty = tmp_path / "none.json"
    empty.write_text("{}")
    result = run_preview("dev", policy_config=empty)
    assert {p.name: p.level for p in result.verdict.policies} == {p.name: "mandatory" for p in ALL_POLICIES}
    # What the stack's own config adds: allow-lists with reasons, and the account it trusts.
    assert {v.policy for v in result.verdict.violations} <= RELAXED | {rule for rule, _key in SITE_SPECIFIC}
