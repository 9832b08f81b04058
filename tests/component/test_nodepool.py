"""`GpuNodePool` under mocks: the launch template, node group and placement group the
engine receives; the preflight offering check; and the prod stack's EFA pool."""

from __future__ import annotations

import base64
import email

import pytest

from components.nodepool import GpuNodePool, GpuNodePoolArgs
from infra.config import ConfigError, load_stack
from infra.platform import build_platform
from infra.preview.fixtures import RegionFixture
from tests.component.recorder import opts, record, root_cause

VOLUMES_KEY = "arn:aws:kms:me-central-1:111122223333:key/volumes"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"


def pool(**changes):
    args = dict(
        prefix="mlplat-test", pool="train", role="gpu", instance_type="p5.48xlarge", min_size=2, max_size=4,
        desired_size=2, cluster_name="mlplat-test", node_role_arn="arn:aws:iam::111122223333:role/node",
        subnet_ids=("subnet-az1",), security_group_ids=("sg-cluster", "sg-nodes"), volumes_key_arn=VOLUMES_KEY,
        root_volume_gib=200, efa=True, efa_security_group_id="sg-efa", placement_group=True,
        instance_tags={"environment": "test"},
    )
    args.update(changes)
    return record(lambda provider: GpuNodePool("pool-train", GpuNodePoolArgs(**args), opts=opts(provider)))


@pytest.fixture(scope="module")
def p5():
    return pool()


def test_p5_launch_template_has_32_efa_interfaces(p5):
    interfaces = p5.one(LT).inputs()["networkInterfaces"]
    assert len(interfaces) == 32
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in interfaces[:2]] == [
        (0, 0, "efa"), (1, 1, "efa-only")]
    assert all(n["interfaceType"] == "efa-only" and n["deviceIndex"] == 1 for n in interfaces[1:])
    for nic in interfaces:
        assert nic["securityGroups"] == ["sg-cluster", "sg-nodes", "sg-efa"]
        assert "associatePublicIpAddress" not in nic and nic["deleteOnTermination"] == "true"
    assert "vpcSecurityGroupIds" not in p5.one(LT).inputs()


def test_launch_template_in_the_placement_group(p5):
    group = p5.one(PG)
    assert group.inputs()["strategy"] == "cluster" and group.inputs()["name"] == "mlplat-test-train"
    template = p5.one(LT)
    assert template.inputs()["placement"]["groupName"] == "mlplat-test-train"
    assert template.property_dependencies["placement"] == [group.urn]


def test_root_volume_gp3_encrypted_with_volumes_key(p5):
    [mapping] = p5.one(LT).inputs()["blockDeviceMappings"]
    assert mapping["deviceName"] == "/dev/xvda"
    assert mapping["ebs"] == {"volumeSize": 200, "volumeType": "gp3", "encrypted": "true", "kmsKeyId": VOLUMES_KEY,
                              "deleteOnTermination": "true"}


def test_imdsv2_required_with_hop_limit(p5):
    assert p5.one(LT).inputs()["metadataOptions"] == {
        "httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1,
        "instanceMetadataTags": "disabled"}


def test_user_data_assembles_nvme_raid0_and_reserves_huge_pages(p5):
    user_data = base64.b64decode(p5.one(LT).inputs()["userData"]).decode()
    message = email.message_from_string(user_data)
    [config, script] = message.get_payload()
    assert config.get_content_type() == "application/node.eks.aws"
    assert "strategy: RAID0" in config.get_payload()
    assert script.get_content_type() == "text/x-shellscript"
    assert "vm.nr_hugepages = 5120" in script.get_payload()


def test_instances_volumes_and_interfaces_are_tagged(p5):
    specs = p5.one(LT).inputs()["tagSpecifications"]
    assert {s["resourceType"] for s in specs} == {"instance", "volume", "network-interface"}
    assert all(s["tags"]["environment"] == "test" and s["tags"]["mlplat.io/pool"] == "train" for s in specs)


def test_node_group(p5):
    group = p5.one(NG)
    inputs = group.inputs()
    assert inputs["amiType"] == "AL2023_x86_64_NVIDIA" and inputs["instanceTypes"] == ["p5.48xlarge"]
    assert inputs["capacityType"] == "ON_DEMAND"
    assert inputs["scalingConfig"] == {"minSize": 2, "maxSize": 4, "desiredSize": 2}
    assert inputs["subnetIds"] == ["subnet-az1"]
    assert inputs["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert inputs["labels"]["mlplat.io/efa-count"] == "32" and inputs["labels"]["mlplat.io/gpu-model"] == "h100"
    assert group.property_dependencies["launchTemplate"] == [p5.one(LT).urn]
    assert inputs["launchTemplate"]["version"] == "1"
    assert group.ignore_changes == ["scalingConfig.desiredSize"]


def test_everything_parented_to_the_pool(p5):
    component = p5.one("mlplat:nodepool:GpuNodePool")
    assert {r.type for r in p5.children(component)} == {LT, NG, PG}


def test_cpu_pool_has_no_efa_placement_or_gpu_ami():
    cpu = pool(pool="system", role="system", instance_type="m7i.xlarge", efa=False, efa_security_group_id=None,
               placement_group=False, root_volume_gib=50)
    template = cpu.one(LT).inputs()
    assert "networkInterfaces" not in template and "placement" not in template and "userData" not in template
    assert template["vpcSecurityGroupIds"] == ["sg-cluster", "sg-nodes"]
    assert template["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"
    assert cpu.of_type(PG) == []
    group = cpu.one(NG).inputs()
    assert group["amiType"] == "AL2023_x86_64_STANDARD"
    assert group.get("taints", []) == []
    assert "nvidia.com/gpu.present" not in group["labels"]


def test_capacity_block_targets_the_reservation():
    block = pool(placement_group=False, capacity_reservation_id="cr-0123456789abcdef0", capacity_block=True)
    template = block.one(LT).inputs()
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert template["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}}
    assert "placement" not in template
    assert block.one(NG).inputs()["capacityType"] == "CAPACITY_BLOCK"


def test_preflight_stops_a_pool_its_zone_does_not_offer():
    config = load_stack("prod")
    fixture = RegionFixture("me-central-1", not_offered=frozenset({("p5.48xlarge", "mec1-az1")}))
    failed = record(lambda _provider: build_platform(config), fixture=fixture, stack="prod", expect_error=True)
    cause = root_cause(failed.error)
    assert isinstance(cause, ConfigError)
    assert str(cause) == (
        "preflight: mlplat:nodePools[1].placementGroupZoneId: p5.48xlarge is not offered in mec1-az1 "
        "(me-central-1); offered in: mec1-az2, mec1-az3. Pick one of those zones or another instance type"
    )
    # Only providers exist: nothing the stack would create was registered.
    assert {r.type for r in failed.registrations} == {"pulumi:providers:aws"}


def test_unpinned_pool_avoids_zones_without_its_type():
    config = load_stack("prod")
    fixture = RegionFixture("me-central-1", not_offered=frozenset({("g6e.2xlarge", "mec1-az3")}))
    rec = record(lambda _provider: build_platform(config), fixture=fixture, stack="prod")
    group = rec.one(NG, "pool-inference")
    zones = sorted(rec.by_urn(u).inputs()["availabilityZoneId"] for u in group.property_dependencies["subnetIds"])
    assert zones == ["mec1-az1", "mec1-az2"]


def test_prod_preview_runs_the_p5_pool_with_32_efa_in_a_placement_group(prod_preview):
    from infra.preview.report import plan_text
    from tests.helpers import one

    assert prod_preview.exit_code == 0 and prod_preview.verdict.mandatory == []
    template = one(prod_preview, LT, "pool-train-p5")
    assert len(template.inputs()["networkInterfaces"]) == 32
    group = one(prod_preview, PG, "pool-train-p5")
    assert template.property_dependencies["placement"] == [group.urn]
    node_group = one(prod_preview, NG, "pool-train-p5")
    by_urn = prod_preview.by_urn
    assert [by_urn[u].inputs()["availabilityZoneId"] for u in node_group.property_dependencies["subnetIds"]] == [
        "mec1-az1"]
    efa_sg = one(prod_preview, "aws:ec2/securityGroup:SecurityGroup", "network-efa")
    assert efa_sg.urn in template.property_dependencies["networkInterfaces"]
    assert ("mlplat-prod-train-p5: p5.48xlarge, 0-16 nodes (desired 0), AL2023_x86_64_NVIDIA, 32 EFA interfaces per "
            "node (1 efa + 31 efa-only), placement group mlplat-prod-train-p5 (cluster), zones mec1-az1"
            ) in plan_text(prod_preview)
