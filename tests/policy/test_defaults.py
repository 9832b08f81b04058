"""Per-stack policy config, and the pack with none at all (schema defaults, the safe ones)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from platform_policies import ALL_POLICIES

from infra.preview.engine import run_preview

CONFIG_DIR = Path(__file__).resolve().parents[2] / "policies" / "config"
POLICIES = {p.name: p for p in ALL_POLICIES}
# What the stacks' config files relax, each entry with a written reason; every other setting
# they give restates a default or is stricter than it.
RELAXED = {"k8s-no-privileged-or-host-namespaces", "k8s-workloads-run-as-non-root", "k8s-no-added-capabilities",
           "k8s-images-pinned"}
STRICTER = {("load-balancer-listeners-tls", "requireTls13Policy"): True}


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_stack_config_matches_the_rules_schemas(path):
    config = json.loads(path.read_text())
    assert config.pop("all") == "mandatory"
    for name, entry in config.items():
        properties = POLICIES[name].config_schema.properties
        settings = {k: v for k, v in entry.items() if k != "enforcementLevel"}
        jsonschema.validate(settings, {"type": "object", "properties": properties, "additionalProperties": False})
        for key, value in settings.items():
            if name in RELAXED:
                assert all(item["reason"].strip() for item in value)
            elif STRICTER.get((name, key)) != value:
                assert value == properties[key]["default"], f"{path.name}: {name}.{key} relaxes the default"


def test_dev_without_policy_config_flags_only_what_the_allow_lists_excuse(tmp_path):
    empty = tmp_path / "none.json"
    empty.write_text("{}")
    result = run_preview("dev", policy_config=empty)
    assert {p.name: p.level for p in result.verdict.policies} == {p.name: "mandatory" for p in ALL_POLICIES}
    assert {v.policy for v in result.verdict.violations} <= RELAXED
