"""Preflight against the region, answered by fixtures: a vCPU quota shortfall, an add-on
version the region lacks, a missing endpoint service, a pool that needs a reservation and
a Capacity Block that does not fit each stop the program with one line, before anything
but the provider is registered; through the CLI, with exit code 2."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from infra import cli
from infra.config import ConfigError, NodePoolConfig, load_stack
from infra.platform import build_platform
from infra.preflight import check_capacity_block, check_on_demand_acknowledged, region_lookup, vcpu_needs, vcpu_quota
from infra.preview import engine
from infra.preview.fixtures import RegionFixture
from infra.versions import EKS_ADDONS
from tests.component.recorder import record, root_cause

P_QUOTA = "L-417A185B"


def _refusal(**facts) -> str:
    failed = record(lambda _provider: build_platform(load_stack("prod")),
                    fixture=RegionFixture("me-central-1", **facts), stack="prod", expect_error=True)
    cause = root_cause(failed.error)
    assert isinstance(cause, ConfigError)
    # Nothing the stack would create was registered.
    assert {r.type for r in failed.registrations} == {"pulumi:providers:aws"}
    assert "\n" not in str(cause)
    return str(cause)


def test_prod_needs_its_p5_pool_at_max_size_in_the_p_quota():
    needs = vcpu_needs(load_stack("prod"))
    assert vcpu_quota("p5.48xlarge") == (P_QUOTA, "Running On-Demand P instances")
    assert vcpu_quota("m7i.2xlarge")[0] == "L-1216C47A" and vcpu_quota("g6e.2xlarge")[0] == "L-DB2E81BA"
    assert needs[P_QUOTA] == (16 * 192, ["train-p5 16 x p5.48xlarge"])


def test_a_quota_shortfall_stops_the_stack():
    assert _refusal(vcpu_quotas={P_QUOTA: 1536}) == (
        "preflight: mlplat:nodePools: train-p5 16 x p5.48xlarge need 3072 vCPUs of 'Running On-Demand P instances' "
        "(L-417A185B) but the account's quota in me-central-1 is 1536; request an increase in Service Quotas or "
        "lower maxSize")


def test_an_add_on_version_the_region_lacks_stops_the_stack():
    pinned = EKS_ADDONS["aws-ebs-csi-driver"].version
    assert _refusal(addon_versions={"aws-ebs-csi-driver": "v1.50.0-eksbuild.1"}) == (
        f"preflight: EKS add-on aws-ebs-csi-driver {pinned} is not published in me-central-1 for Kubernetes "
        "1.34 (the newest there is v1.50.0-eksbuild.1); pin a version the region has in infra/versions.py EKS_ADDONS")


def test_a_newer_build_in_the_region_is_fine():
    pinned = EKS_ADDONS["coredns"].version
    newer = pinned.rsplit(".", 1)[0] + ".9"
    rec = record(lambda _provider: build_platform(load_stack("prod")),
                 fixture=RegionFixture("me-central-1", addon_versions={"coredns": newer}), stack="prod")
    assert rec.one("aws:eks/addon:Addon", "core-addons-coredns").inputs()["addonVersion"] == pinned


def test_a_missing_endpoint_service_stops_the_stack():
    assert _refusal(missing_endpoint_services=frozenset({"eks-auth"})) == (
        "preflight: VPC endpoint service com.amazonaws.me-central-1.eks-auth does not exist in me-central-1 "
        "(no matching VPC Endpoint Service found); drop it from INTERFACE_ENDPOINT_SERVICES "
        "(components/specs/network.py) or deploy to a region that has it")


def test_a_p5_pool_without_a_reservation_must_say_on_demand():
    config = load_stack("prod")
    pools = [p.model_copy(update={"on_demand": False}) for p in config.node_pools]
    with pytest.raises(ConfigError) as caught:
        check_on_demand_acknowledged(config.model_copy(update={"node_pools": tuple(pools)}))
    assert str(caught.value).startswith(
        "preflight: mlplat:nodePools[1]: p5.48xlarge x 16 on demand will most likely fail with "
        "InsufficientInstanceCapacity; set capacityReservationId")
    check_on_demand_acknowledged(config)  # prod says onDemand: true


@pytest.mark.parametrize(("block", "says"), [
    ({"instance_type": "p5e.48xlarge"}, "is a Capacity Block of p5e.48xlarge, not p5.48xlarge"),
    ({"availability_zone_id": "mec1-az2"}, "is in mec1-az2, not the pool's zone mec1-az1; set zoneId: mec1-az2"),
    ({"state": "expired"}, "is expired"),
    ({"instance_count": 2}, "holds 2 instances, fewer than maxSize 4"),
])
def test_a_capacity_block_that_does_not_fit_is_named(block, says):
    pool = NodePoolConfig.model_validate({"name": "train", "role": "gpu", "instanceType": "p5.48xlarge", "minSize": 2,
                                          "maxSize": 4, "efa": True, "zoneId": "mec1-az1", "capacityBlock": True,
                                          "capacityReservationId": "cr-0123456789abcdef0"})
    fits = {"instance_type": "p5.48xlarge", "availability_zone_id": "mec1-az1", "state": "active", "instance_count": 4}
    check_capacity_block(0, pool, SimpleNamespace(**fits), "mec1-az1")
    with pytest.raises(ConfigError, match="^preflight: mlplat:nodePools\\[0\\].capacityReservationId: "
                                          "cr-0123456789abcdef0 ") as caught:
        check_capacity_block(0, pool, SimpleNamespace(**{**fits, **block}), "mec1-az1")
    assert says in str(caught.value)


@pytest.mark.parametrize(("facts", "says"), [
    ({"vcpu_quotas": {P_QUOTA: 96}}, "preflight: mlplat:nodePools: train-p5 16 x p5.48xlarge need 3072 vCPUs"),
    ({"addon_versions": {"coredns": "v1.11.1-eksbuild.1"}}, "preflight: EKS add-on coredns "),
    ({"missing_endpoint_services": frozenset({"ssmmessages"})},
     "preflight: VPC endpoint service com.amazonaws.me-central-1.ssmmessages does not exist"),
], ids=["quota", "add-on", "endpoint-service"])
def test_the_cli_says_one_line_and_exits_2(monkeypatch, capsys, facts, says):
    monkeypatch.setattr(engine, "RegionFixture", functools.partial(RegionFixture, **facts))
    code = cli.main(["preview", "--stack", "prod", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [err.strip()] and err.startswith(f"mlplat: error: {says}")


def _with_capacity_block(block_id: str):
    config = load_stack("prod")
    pools = [p.model_copy(update={"placement_group_zone_id": None, "zone_id": "mec1-az1", "capacity_block": True,
                                  "capacity_reservation_id": block_id, "on_demand": False})
             if p.name == "train-p5" else p for p in config.node_pools]
    return config.model_copy(update={"node_pools": tuple(pools)})


def test_a_capacity_block_the_account_does_not_hold_is_one_line():
    config = _with_capacity_block("cr-0123456789abcdef0")
    failed = record(lambda _provider: build_platform(config), fixture=RegionFixture("me-central-1"), stack="prod",
                    expect_error=True)
    assert str(root_cause(failed.error)) == (
        "preflight: mlplat:nodePools[1].capacityReservationId: cr-0123456789abcdef0 is no Capacity Block of this "
        "account in me-central-1 (no matching EC2 Capacity Block Reservation found (cr-0123456789abcdef0)); name "
        "the block's cr- id")
    held = {"cr-0123456789abcdef0": {"instanceType": "p5.48xlarge", "availabilityZoneId": "mec1-az1",
                                     "instanceCount": 16, "state": "active"}}
    rec = record(lambda _provider: build_platform(config),
                 fixture=RegionFixture("me-central-1", capacity_blocks=held), stack="prod")
    assert rec.one("aws:eks/nodeGroup:NodeGroup", "pool-train-p5").inputs()["capacityType"] == "CAPACITY_BLOCK"


def test_a_lookup_that_fails_for_another_reason_is_not_taken_for_an_answer():
    def denied():
        raise Exception("invocation of aws:ec2/getVpcEndpointService:getVpcEndpointService returned an error: "
                        "1 error occurred:\n\t* reading EC2 VPC Endpoint Services: operation error EC2: "
                        "DescribeVpcEndpointServices, api error UnauthorizedOperation: not authorized")

    with pytest.raises(Exception, match="UnauthorizedOperation"):
        region_lookup(denied)

    def missing():
        raise Exception("invocation of aws:ec2/getVpcEndpointService:getVpcEndpointService returned an error: "
                        "1 error occurred:\n\t* no matching EC2 VPC Endpoint Service found")

    assert region_lookup(missing) == (None, "no matching EC2 VPC Endpoint Service found")


# --- zones AWS reports available, and pools that start empty without a reservation ------

@pytest.mark.parametrize(("unavailable", "says"), [
    ({"mec1-az3"}, "preflight: mlplat:network.zoneIds: mec1-az3 is not available in me-central-1 now (available: "
                   "mec1-az1, mec1-az2); list only available zones"),
    # March 2026: two of the three zones gone.
    ({"mec1-az2", "mec1-az3"}, "preflight: mlplat:network.zoneIds: me-central-1 has 1 available zone(s) now "
                               "(mec1-az1) of the network's mec1-az1, mec1-az2, mec1-az3; EKS needs two. Run "
                               "in-country on the customer's own cluster"),
    # The zone prod's EFA pool is pinned to (its placement group).
    ({"mec1-az1"}, "preflight: mlplat:nodePools[1].placementGroupZoneId: mec1-az1 is not available in me-central-1 "
                   "now (available: mec1-az2, mec1-az3); pin an available zone"),
], ids=["one-lost", "two-lost", "pinned-lost"])
def test_a_zone_aws_reports_unavailable_stops_the_stack(unavailable, says):
    assert _refusal(unavailable_zones=frozenset(unavailable)).startswith(says)


def test_a_lost_zone_the_network_does_not_use_is_fine():
    config = load_stack("dev")
    config = config.model_copy(update={"network": config.network.model_copy(
        update={"zone_ids": ("mec1-az1", "mec1-az2")})})
    rec = record(lambda _provider: build_platform(config),
                 fixture=RegionFixture("me-central-1", unavailable_zones=frozenset({"mec1-az3"})), stack="dev")
    subnets = [r.inputs()["availabilityZoneId"] for r in rec.registrations if r.type == "aws:ec2/subnet:Subnet"]
    assert subnets and set(subnets) == {"mec1-az1", "mec1-az2"}


def test_an_ultracluster_pool_without_a_reservation_starts_empty():
    def pool(**fields):
        return NodePoolConfig.model_validate({"name": "train", "role": "gpu", "instanceType": "p5.48xlarge",
                                              "maxSize": 4, "efa": True, "placementGroupZoneId": "mec1-az1",
                                              **fields})

    def judged(node_pool):
        return SimpleNamespace(node_pools=[node_pool])

    check_on_demand_acknowledged(judged(pool(minSize=0, onDemand=True)))
    for starting in ({"minSize": 2}, {"minSize": 0, "desiredSize": 2}):
        with pytest.raises(ConfigError, match=r"^preflight: mlplat:nodePools\[0\]: p5.48xlarge on demand starts at 2 "
                                              r"node\(s\), and the deploy would wait"):
            check_on_demand_acknowledged(judged(pool(onDemand=True, **starting)))
    # With capacity reserved it may start full; a type AWS has on demand may too.
    check_on_demand_acknowledged(judged(pool(minSize=2, capacityReservationId="cr-0123456789abcdef0")))
    check_on_demand_acknowledged(judged(NodePoolConfig.model_validate(
        {"name": "infer", "role": "inference", "instanceType": "g6e.2xlarge", "minSize": 2, "maxSize": 4})))


@pytest.mark.parametrize(("missing", "says"), [
    ("mlplat-deployer", "preflight: mlplat:cluster.deployerRole: role mlplat-deployer does not exist in this account"),
    ("mlplat-break-glass", "preflight: mlplat:cluster.breakGlassRole: role mlplat-break-glass does not exist"),
])
def test_the_cluster_admins_must_exist_before_their_access_entries(missing, says):
    message = _refusal(missing_roles=frozenset({missing}))
    assert message.startswith(says) and "run `mlplat bootstrap`" in message


def test_a_fixture_that_fails_fails_its_invoke_as_the_provider_would(monkeypatch):
    """A fixture's own error reaches the program as a failed invoke, named, which the
    program may catch and go on from; raised as it came, the engine re-raised it at the
    end of the run even after the program had caught it."""
    import pulumi
    import pulumi_aws as aws

    from infra.preview import fixtures

    def broken(_fixture, _args):
        raise ValueError("broken fixture")

    monkeypatch.setitem(fixtures._HANDLERS, "aws:iam/getRole:getRole", broken)
    caught = []

    def program(provider):
        try:
            aws.iam.get_role(name="x", opts=pulumi.InvokeOptions(provider=provider))
        except Exception as err:  # noqa: BLE001 - what a program such as region_lookup does
            caught.append(str(err))
        aws.s3.Bucket("after", opts=pulumi.ResourceOptions(provider=provider))

    rec = record(program)
    assert "the offline preview's fixture for aws:iam/getRole:getRole failed: ValueError: broken fixture" in caught[0]
    assert "aws:s3/bucket:Bucket" in {r.type for r in rec.registrations}
