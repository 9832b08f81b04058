"""Typed stack config: every stack parses, every mistake is one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError, load_stack, load_stack_file, parse_config
from tests.conftest import STACKS

REPO = Path(__file__).resolve().parents[2]


def raw_stack(name: str) -> dict:
    return yaml.safe_load((REPO / "stacks" / f"Pulumi.{name}.yaml").read_text())["config"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_parses_in_region(stack):
    config = load_stack(stack)
    assert config.region == "me-central-1"
    assert config.environment == stack
    assert config.region in config.residency.allowed_regions


def test_stack_shapes():
    assert [p.efa for p in load_stack("dev").node_pools if p.role == "gpu"] == [False]
    staging_gpu = [p for p in load_stack("staging").node_pools if p.role == "gpu"]
    assert len(staging_gpu) == 1 and staging_gpu[0].efa and staging_gpu[0].min_size == 0
    prod = {p.role: p for p in load_stack("prod").node_pools}
    assert prod["gpu"].instance_type == "p5.48xlarge" and prod["gpu"].efa and prod["gpu"].min_size == 0
    assert "inference" in prod
    assert {p.role for p in load_stack("smb").node_pools} <= {"system", "cpu"}


def bad(mutate) -> str:
    raw = raw_stack("dev")
    mutate(raw)
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "stacks/Pulumi.dev.yaml", from_stack_file=True)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_unknown_key_is_named():
    message = bad(lambda raw: raw.update({"mlplat:gpuPoolz": 3}))
    assert message.startswith("stacks/Pulumi.dev.yaml: mlplat:gpuPoolz: unknown key; the keys here are mlplat:addons, ")
    assert "aws:region, mlplat:residency" in message  # as the stack file spells them


def misspell(raw: dict, path: tuple, wrong: str) -> None:
    """Rename the last key of `path` in the stack's config to `wrong`."""
    *parents, key = path
    node = raw
    for part in parents:
        node = node[part]
    node[wrong] = node.pop(key)


@pytest.mark.parametrize("path, wrong, where, meant", [
    (("mlplat:nodePools",), "mlplat:nodePool", "mlplat:nodePool", "mlplat:nodePools"),
    (("mlplat:nodePools", 1, "instanceType"), "instanceTyp", "mlplat:nodePools[1].instanceTyp", "instanceType"),
    (("mlplat:cluster", "breakGlassRole"), "breakGlasRole", "mlplat:cluster.breakGlassRole", "breakGlassRole"),
    (("mlplat:tenants", 0, "quotas", "gpu"), "gpus", "mlplat:tenants[0].quotas.gpus", "gpu"),
], ids=["top", "pool", "cluster", "tenant-quota"])
def test_misspelt_key_is_named_at_its_path_with_the_key_it_stands_for(path, wrong, where, meant):
    """Named even where the key it stands for is required (the error pydantic lists first is
    then the missing key)."""
    message = bad(lambda raw: misspell(raw, path, wrong))
    where = where.replace("breakGlassRole", wrong)
    assert message == f"stacks/Pulumi.dev.yaml: {where}: unknown key; did you mean `{meant}`?"


def test_misspelt_namespace_key_is_named(tmp_path):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text((REPO / "stacks" / "Pulumi.dev.yaml").read_text().replace("aws:region:", "aws:regoin:"))
    with pytest.raises(ConfigError, match=r"^.*Pulumi.x.yaml: aws:regoin: unknown key; did you mean `aws:region`\? "):
        load_stack_file(path)
    path.write_text("confg:\n  aws:region: me-central-1\n")
    with pytest.raises(ConfigError, match=r"Pulumi.x.yaml: confg: unknown top-level key; did you mean `config`\?"):
        load_stack_file(path)


@pytest.mark.parametrize("content, says", [
    (b"\xff\xfe\x00c\x00o\x00n", "is not UTF-8 text (byte 0 is 0xff)"),
    (b"config:\n  mlplat:owner: caf\xe9\n", "is not UTF-8 text (byte 27 is 0xe9)"),
    (b"\x00\x01\x02ELF", "is not text (character #x0000 at byte 0)"),
], ids=["utf16", "latin1", "binary"])
def test_unreadable_stack_file_is_one_line(tmp_path, content, says):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        load_stack_file(path)
    assert str(err.value).startswith(f"{path}: {says}") and "\n" not in str(err.value)


def test_directory_or_forbidden_stack_file_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "Pulumi.x.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"Pulumi.x.yaml: is a directory, not a stack file"):
        load_stack_file(tmp_path / "Pulumi.x.yaml")
    path = tmp_path / "Pulumi.y.yaml"
    path.write_text("config: {}\n")

    def forbidden(name, *args, **kwargs):  # this runs as root, which chmod cannot stop
        raise PermissionError(13, "Permission denied", str(name))

    monkeypatch.setattr("workloads.inputs.os.open", forbidden)
    with pytest.raises(ConfigError, match=r"Pulumi.y.yaml: cannot be read \(permission denied\)"):
        load_stack_file(path)


def test_foreign_namespace_is_rejected():
    message = bad(lambda raw: raw.update({"aws:profile": "prod"}))
    assert "aws:profile: unknown key" in message


def test_region_outside_allow_list():
    message = bad(lambda raw: raw.update({"aws:region": "eu-west-1"}))
    assert message == (
        "stacks/Pulumi.dev.yaml: aws:region: 'eu-west-1' is outside the residency allow-list; allowed: me-central-1"
    )


def test_bahrain_is_not_the_uae():
    message = bad(lambda raw: raw.update({"aws:region": "me-south-1"}))
    assert "aws:region: 'me-south-1' is outside the residency allow-list" in message


def test_wildcard_region_refused():
    message = bad(lambda raw: raw.update({"mlplat:residency": {"allowedRegions": ["me-*"]}}))
    assert "mlplat:residency" in message and "'me-*' is not allowed" in message


def test_min_above_max():
    def mutate(raw):
        raw["mlplat:nodePools"][1].update({"minSize": 5, "maxSize": 2})

    message = bad(mutate)
    assert "mlplat:nodePools[1]: minSize 5 is above maxSize 2" in message


def test_wrong_literal_lists_allowed_values():
    message = bad(lambda raw: raw.update({"mlplat:environment": "qa"}))
    assert "mlplat:environment: 'qa' is not allowed; allowed: 'dev', 'staging', 'prod', 'smb' or 'onprem'" in message


def test_default_providers_must_be_disabled():
    message = bad(lambda raw: raw.pop("pulumi:disable-default-providers"))
    assert "pulumi:disable-default-providers: is required" in message
    message = bad(lambda raw: raw.update({"pulumi:disable-default-providers": ["kubernetes"]}))
    assert "leaves the default AWS provider on" in message


def test_engine_json_strings_parse_like_yaml():
    raw = {k: v for k, v in raw_stack("dev").items() if k != "pulumi:disable-default-providers"}
    import json

    as_engine = {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in raw.items()}
    assert parse_config(as_engine, "engine") == parse_config(raw, "yaml")


def test_unknown_stack_lists_available(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown stack 'nosuch': .* available: dev, dev-cluster, onprem, prod, prod-cluster, smb, smb-cluster, staging, staging-cluster"):
        load_stack("nosuch")


def test_invalid_yaml_names_line(tmp_path):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  aws:region: [me-central-1\n")
    with pytest.raises(ConfigError, match=r"Pulumi.x.yaml: line \d+ is not valid YAML"):
        load_stack_file(path)


def test_cluster_administrators_are_required_and_distinct():
    assert bad(lambda raw: raw["mlplat:cluster"].pop("breakGlassRole")) == (
        "stacks/Pulumi.dev.yaml: mlplat:cluster.breakGlassRole: is not set; name the role (in the deploying "
        "account) that gets cluster admin, so the identity that created the cluster is not its only admin")
    same = bad(lambda raw: raw["mlplat:cluster"].update({"breakGlassRole": "mlplat-deployer"}))
    assert same.startswith("stacks/Pulumi.dev.yaml: mlplat:cluster.breakGlassRole: is the deployer role")
    twice = bad(lambda raw: raw["mlplat:cluster"].update(
        {"adminRoleArns": ["arn:aws:iam::111122223333:role/mlplat-break-glass"]}))
    assert twice.startswith("stacks/Pulumi.dev.yaml: mlplat:cluster.adminRoleArns: "
                            "'arn:aws:iam::111122223333:role/mlplat-break-glass' is the deployer or break-glass role")
    assert "is neither an IAM role name nor a role ARN" in bad(
        lambda raw: raw["mlplat:cluster"].update({"deployerRole": "role with spaces"}))


def test_administrator_roles_by_name_live_in_the_deploying_account():
    config = parse_config(raw_stack("dev"), "stacks/Pulumi.dev.yaml", from_stack_file=True)
    assert config.cluster.role_arn(config.cluster.deployer_role, "123456789012") == \
        "arn:aws:iam::123456789012:role/mlplat-deployer"
    arn = "arn:aws:iam::210987654321:role/ops/break-glass"
    assert config.cluster.role_arn(arn, "123456789012") == arn


@pytest.mark.parametrize(("name", "collides_with"), [
    ("admin", "the tracking server's administrator"),
    ("mlflow", "the tracking server's namespace"),
    ("default", "system namespace"),
    ("kube-tenants", "starts with 'kube-', which Kubernetes or the platform reserves"),
    ("mlplat-system", "system namespace"),
    ("mlplat-data", "starts with 'mlplat'"),
    ("monitoring", "system namespace"),
    ("argo-rollouts", "system namespace"),
])
def test_a_tenant_named_like_a_platform_identity_is_refused(name, collides_with):
    def rename(raw: dict) -> None:
        raw["mlplat:tenants"][0]["name"] = name

    message = bad(rename)
    assert message.startswith(f"stacks/Pulumi.dev.yaml: mlplat:tenants[0].name: {name!r} ") and collides_with in message
    assert message.endswith("; pick another tenant name")


def test_the_tracking_admins_secret_never_derives_from_a_tenant():
    """Even a tenant the config let through could not stand for the admin: the admin's secret
    is its own field, not a key among the tenants'."""
    from components.tracking_spec import secret_names

    names = secret_names("mlplat-prod", ("admin", "research"))
    assert names.admin == "mlplat-prod/tracking/admin"
    assert names.tenants == {"admin": "mlplat-prod/tracking/tenant/admin", "research": "mlplat-prod/tracking/tenant/research"}


def test_a_group_belongs_to_one_tenant():
    def share(raw: dict) -> None:
        raw["mlplat:tenants"].append({"name": "applied", "quotas": {"cpu": 4, "memoryGi": 16},
                                      "groups": list(raw["mlplat:tenants"][0]["groups"])})

    message = bad(share)
    assert message == ("stacks/Pulumi.dev.yaml: mlplat:tenants[1].groups: 'mlplat:research-developers' is already a "
                       "group of tenant 'research'; a group belongs to one tenant, whose namespace alone it may work in")
