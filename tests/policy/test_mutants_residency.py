"""availability-zones-in-allowed-regions: the paths its messages name, and zones nested
after a top-level one, where `make mutate` (bench/mutate.py) found them unchecked."""

from __future__ import annotations

from platform_policies.residency import availability_zones_in_allowed_regions as zones

from tests.policy.harness import check

UAE = {"allowedRegions": ["me-central-1"]}


def test_a_top_level_zone_is_named_by_its_own_key():
    [message] = check(zones, "aws:ec2/subnet:Subnet", {"vpcId": "v", "availabilityZone": "us-east-1a"}, config=UAE,
                      name="s")
    assert message == ("aws:ec2/subnet:Subnet 's': availabilityZone = 'us-east-1a' is not a zone of the allowed "
                       "regions ['me-central-1']")


def test_nested_zones_after_a_top_level_one_are_still_read():
    props = {"availabilityZone": "me-central-1a", "placement": {"availabilityZone": "us-east-1a"},
             "subnetMappings": [{"availabilityZoneId": "use1-az1"}]}
    messages = check(zones, "aws:ec2/instance:Instance", props, config=UAE)
    assert [m.split(": ", 1)[1].split(" = ")[0] for m in messages] == ["placement.availabilityZone",
                                                                     "subnetMappings[0].availabilityZoneId"]
