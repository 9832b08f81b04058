"""Bad network, cluster and node pool settings: one line naming the key, the value and
what is allowed, before anything is registered."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError, load_stack, parse_config

REPO = Path(__file__).resolve().parents[2]
SOURCE = "stacks/Pulumi.prod.yaml"


def raw_stack(name: str = "prod") -> dict:
    return yaml.safe_load((REPO / "stacks" / f"Pulumi.{name}.yaml").read_text())["config"]


def bad(mutate, stack: str = "prod") -> str:
    raw = raw_stack(stack)
    mutate(raw)
    with pytest.raises(ConfigError) as err:
        parse_config(raw, f"stacks/Pulumi.{stack}.yaml", from_stack_file=True)
    message = str(err.value)
    assert "\n" not in message
    return message


def pool(raw: dict, name: str) -> dict:
    return next(p for p in raw["mlplat:nodePools"] if p["name"] == name)


def test_stack_pools():
    prod = {p.name: p for p in load_stack("prod").node_pools}
    assert prod["train-p5"].efa and prod["train-p5"].placement_group_zone_id == "mec1-az1"
    staging = {p.name: p for p in load_stack("staging").node_pools}
    assert staging["gpu-efa"].placement_group_zone_id == "mec1-az1" and staging["gpu-efa"].min_size == 0
    dev = {p.name: p for p in load_stack("dev").node_pools}
    assert not dev["gpu"].efa and dev["gpu"].placement_group_zone_id is None
    assert load_stack("prod").zone_ids == ("mec1-az1", "mec1-az2", "mec1-az3")


def test_unknown_instance_type():
    message = bad(lambda raw: pool(raw, "train-p5").update(instanceType="p5.48xlarg"))
    assert message == (
        f"{SOURCE}: mlplat:nodePools[1].instanceType: 'p5.48xlarg' is not in the instance catalog "
        "(infra/catalog.py); did you mean 'p5.48xlarge'? known families: c7i, g5, g6, g6e, m7i, p4d, p4de, p5, "
        "p5e, p5en, p6-b200"
    )


def test_instance_type_is_case_insensitive():
    raw = raw_stack()
    pool(raw, "train-p5").update(instanceType="P5.48xlarge")
    config = parse_config(raw, SOURCE, from_stack_file=True)
    assert config.node_pools[1].instance_type == "p5.48xlarge"


def test_efa_on_a_type_without_it():
    message = bad(lambda raw: pool(raw, "train-p5").update(instanceType="g6e.2xlarge"))
    assert message == (
        f"{SOURCE}: mlplat:nodePools[1].efa: 'g6e.2xlarge' has no EFA interfaces; set efa: false or use an EFA "
        "type (EFA sizes of g6e: g6e.12xlarge, g6e.16xlarge, g6e.24xlarge, g6e.48xlarge, g6e.8xlarge)"
    )


def test_efa_needs_two_nodes():
    message = bad(lambda raw: pool(raw, "train-p5").update(minSize=1))
    assert message == (
        f"{SOURCE}: mlplat:nodePools[1].minSize: 1 is too small for an EFA pool; EFA pools run at 0 (until capacity "
        "is there) or at least 2 nodes (minSize >= 2)"
    )


def test_efa_needs_a_zone():
    message = bad(lambda raw: pool(raw, "train-p5").pop("placementGroupZoneId"))
    assert message.startswith(f"{SOURCE}: mlplat:nodePools[1].placementGroupZoneId: is required for an EFA pool")


def test_placement_zone_outside_the_network():
    message = bad(lambda raw: pool(raw, "train-p5").update(placementGroupZoneId="mec1-az9"))
    assert message == (
        f"{SOURCE}: mlplat:nodePools[1].placementGroupZoneId: 'mec1-az9' is not one of the network's zones; "
        "allowed: mec1-az1, mec1-az2, mec1-az3"
    )


def test_placement_zone_outside_a_narrowed_network():
    def mutate(raw):
        raw["mlplat:network"]["zoneIds"] = ["mec1-az2", "mec1-az3"]

    message = bad(mutate)
    assert "mlplat:nodePools[1].placementGroupZoneId: 'mec1-az1' is not one of the network's zones; " \
           "allowed: mec1-az2, mec1-az3" in message


def test_min_above_max():
    message = bad(lambda raw: pool(raw, "inference").update(minSize=9))
    assert message == f"{SOURCE}: mlplat:nodePools[2]: minSize 9 is above maxSize 8; set minSize <= maxSize"


def test_gpu_role_needs_a_gpu():
    message = bad(lambda raw: pool(raw, "inference").update(instanceType="c7i.2xlarge"))
    assert message.startswith(f"{SOURCE}: mlplat:nodePools[2].instanceType: 'c7i.2xlarge' has no GPU")


def test_capacity_block_needs_reservation_and_no_placement_group():
    message = bad(lambda raw: pool(raw, "train-p5").update(capacityBlock=True))
    assert message == (
        f"{SOURCE}: mlplat:nodePools[1].capacityReservationId: is required with capacityBlock: true "
        "(the Capacity Block's cr- id)"
    )
    message = bad(lambda raw: pool(raw, "train-p5").update(capacityBlock=True, capacityReservationId="cr-0123456789abcdef0"))
    assert message.startswith(f"{SOURCE}: mlplat:nodePools[1].placementGroupZoneId: cannot be used with a Capacity Block")


def test_capacity_block_in_a_zone_parses():
    raw = raw_stack()
    p = pool(raw, "train-p5")
    p.pop("placementGroupZoneId")
    p.update(zoneId="mec1-az2", capacityBlock=True, capacityReservationId="cr-0123456789abcdef0")
    config = parse_config(raw, SOURCE, from_stack_file=True)
    assert config.node_pools[1].pinned_zone_id == "mec1-az2"


def test_bad_reservation_id():
    message = bad(lambda raw: pool(raw, "train-p5").update(capacityReservationId="res-1"))
    assert message.startswith(f"{SOURCE}: mlplat:nodePools[1].capacityReservationId: 'res-1' does not match")


def test_public_endpoint_without_cidrs():
    message = bad(lambda raw: raw.update({"mlplat:cluster": {"publicEndpoint": {"enabled": True}}}))
    assert message == (
        f"{SOURCE}: mlplat:cluster.publicEndpoint: enabled without cidrs; list the networks allowed to reach the "
        "API server"
    )


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "::/0"])
def test_public_endpoint_open_to_the_world(cidr):
    message = bad(lambda raw: raw.update({"mlplat:cluster": {"publicEndpoint": {"enabled": True, "cidrs": [cidr]}}}))
    assert message == (
        f"{SOURCE}: mlplat:cluster.publicEndpoint: '{cidr}' opens the API server to the whole internet; "
        "list your own networks"
    )


def test_public_cidrs_without_enabled_are_not_ignored():
    message = bad(lambda raw: raw.update({"mlplat:cluster": {"publicEndpoint": {"cidrs": ["203.0.113.0/24"]}}}))
    assert "cidrs are set but enabled is false" in message


def test_bad_role_arn():
    message = bad(lambda raw: raw.update({"mlplat:cluster": {"adminRoleArns": ["arn:aws:iam::1:user/bob"]}}))
    assert message == (
        f"{SOURCE}: mlplat:cluster.adminRoleArns: 'arn:aws:iam::1:user/bob' is not an IAM role ARN "
        "(arn:aws:iam::<account>:role/<name>)"
    )


def test_bad_vpc_cidr_and_zones():
    message = bad(lambda raw: raw.update({"mlplat:network": {"vpcCidr": "10.0.0.0/8"}}))
    assert message == (
        f"{SOURCE}: mlplat:network.vpcCidr: '10.0.0.0/8': use a prefix between /16 and /20 (pods take VPC addresses)"
    )
    message = bad(lambda raw: raw.update({"mlplat:network": {"zoneIds": ["mes1-az1", "mec1-az2"]}}))
    assert message == (
        f"{SOURCE}: mlplat:network.zoneIds: 'mes1-az1' is not a zone of me-central-1; "
        "allowed: mec1-az1, mec1-az2, mec1-az3"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("instanceType: p5.48xlarge", "instanceType: p5.96xlarge",
         "mlplat:nodePools[1].instanceType: 'p5.96xlarge' is not in the instance catalog"),
        ("instanceType: p5.48xlarge", "instanceType: g5.2xlarge", "mlplat:nodePools[1].efa: 'g5.2xlarge' has no EFA"),
        ("placementGroupZoneId: mec1-az1", "placementGroupZoneId: mec1-az7",
         "mlplat:nodePools[1].placementGroupZoneId: 'mec1-az7' is not one of the network's zones"),
        ("minSize: 0\n      maxSize: 16", "minSize: 2\n      maxSize: 1", "mlplat:nodePools[1]: minSize 2 is above maxSize 1"),
        ("    deployerRole: mlplat-deployer", "    deployerRole: mlplat-deployer\n    publicEndpoint: {enabled: true}",
         "mlplat:cluster.publicEndpoint: enabled without cidrs"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_nothing_registered(tmp_path, old, new, expected):
    import subprocess
    import sys

    text = (REPO / "stacks" / "Pulumi.prod.yaml").read_text()
    assert old in text
    (tmp_path / "Pulumi.prod.yaml").write_text(text.replace(old, new, 1))
    report = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "preview", "--stack", "prod", "--stacks-dir", str(tmp_path),
         "--json", str(report), "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlplat: error: ") and expected in lines[0]
    assert not report.exists()


def test_public_endpoint_wide_range_refused():
    message = bad(lambda raw: raw.update({"mlplat:cluster": {"publicEndpoint": {"enabled": True,
                                                                                 "cidrs": ["16.0.0.0/4"]}}}))
    assert message == f"{SOURCE}: mlplat:cluster.publicEndpoint: '16.0.0.0/4' is wider than /8; list your own networks"


def test_public_endpoint_with_allow_list_parses():
    raw = raw_stack()
    raw["mlplat:cluster"] = {**raw["mlplat:cluster"], "publicEndpoint": {"enabled": True, "cidrs": ["203.0.113.0/24"]},
                             "adminRoleArns": ["arn:aws:iam::111122223333:role/platform-admin"]}
    config = parse_config(raw, SOURCE, from_stack_file=True)
    assert config.cluster.public_endpoint.cidrs == ("203.0.113.0/24",)
