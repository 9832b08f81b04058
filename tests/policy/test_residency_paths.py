"""Residency beyond the region rule: zones, replication, multi-region keys, edge paths."""

from __future__ import annotations

from platform_policies.edge import no_global_edge_data_paths as edge
from platform_policies.replication import kms_keys_single_region as single_region
from platform_policies.replication import no_cross_region_replication as replication
from platform_policies.residency import availability_zones_in_allowed_regions as zones

from tests.policy.harness import NOT_APPLICABLE, check


def test_zone_names_and_ids_in_every_position():
    assert check(zones, "aws:ec2/subnet:Subnet", {"availabilityZone": "me-central-1b"}) == []
    assert check(zones, "aws:ec2/launchTemplate:LaunchTemplate", {"placement": {"availabilityZone": "mec1-az1"}}) == []
    [message] = check(zones, "aws:ec2/launchTemplate:LaunchTemplate",
                      {"placement": {"availabilityZone": "eu-west-1a"}}, name="lt")
    assert message == ("aws:ec2/launchTemplate:LaunchTemplate 'lt': placement.availabilityZone = 'eu-west-1a' is not "
                       "a zone of the allowed regions ['me-central-1']")
    found = check(zones, "aws:autoscaling/group:Group", {"availabilityZones": ["me-central-1a", "me-south-1a"]})
    assert len(found) == 1 and "availabilityZones[1]" in found[0]
    assert check(zones, "aws:ec2/subnet:Subnet", {"availabilityZoneId": "euc1-az2"},
                 config={"allowedRegions": ["eu-central-1"]}) == []


def test_s3_replication_needs_a_declared_destination():
    rule = {"rules": [{"status": "Enabled", "destination": {"bucket": "arn:aws:s3:::copy"}}]}
    kind = "aws:s3/bucketReplicationConfig:BucketReplicationConfig"
    [message] = check(replication, kind, rule)
    assert "rules[0].destination.bucket replicates objects to 'arn:aws:s3:::copy'" in message
    assert check(replication, kind, rule, config={"inRegionDestinationBuckets": ["copy"]}) == []
    assert check(replication, kind, rule, config={"inRegionDestinationBuckets": ["arn:aws:s3:::copy"]}) == []


def test_inline_bucket_replication():
    bucket = {"bucket": "b", "replicationConfiguration": {"role": "r", "rules": [
        {"status": "Enabled", "destination": {"bucket": "arn:aws:s3:::elsewhere"}}]}}
    assert len(check(replication, "aws:s3/bucket:Bucket", bucket)) == 1
    assert check(replication, "aws:s3/bucket:Bucket", {"bucket": "b"}) == NOT_APPLICABLE


def test_replicas_and_replication_rules():
    assert check(replication, "aws:secretsmanager/secret:Secret", {"replicas": [{"region": "eu-west-1"}]})
    assert check(replication, "aws:secretsmanager/secret:Secret", {"name": "s"}) == NOT_APPLICABLE
    ecr = {"replicationConfiguration": {"rules": [{"destinations": [{"region": "us-east-1", "registryId": "1"}]}]}}
    [message] = check(replication, "aws:ecr/replicationConfiguration:ReplicationConfiguration", ecr)
    assert "destinations[0].region replicates data to 'us-east-1'" in message
    assert check(replication, "aws:dynamodb/globalTable:GlobalTable", {"replicas": [{"regionName": "me-central-1"}]}) \
        == []
    assert check(replication, "aws:dynamodb/tableReplica:TableReplica", {"region": "eu-west-1"})
    assert check(replication, "aws:efs/replicationConfiguration:ReplicationConfiguration",
                 {"destination": {"region": "eu-west-1"}})


def test_rds_backup_replication_checks_both_ends():
    kind = "aws:rds/instanceAutomatedBackupsReplication:InstanceAutomatedBackupsReplication"
    local = {"sourceDbInstanceArn": "arn:aws:rds:me-central-1:111122223333:db:main"}
    assert check(replication, kind, local, config={"allowedRegions": ["me-central-1", "me-south-1"]},
                 provider_props={"region": "me-south-1"}) == []
    found = check(replication, kind, local, provider_props={"region": "eu-west-1"})
    assert len(found) == 1 and "eu-west-1" in found[0]


def test_multi_region_keys():
    assert check(single_region, "aws:kms/key:Key", {"enableKeyRotation": True}) == []
    assert check(single_region, "aws:kms/replicaKey:ReplicaKey", {"primaryKeyArn": "arn"})


def test_edge_paths():
    assert check(edge, "aws:s3/bucketAccelerateConfiguration:BucketAccelerateConfiguration", {"status": "Suspended"}) \
        == []
    assert check(edge, "aws:s3/bucketAccelerateConfiguration:BucketAccelerateConfiguration", {"status": "Enabled"})
    assert check(edge, "aws:s3/bucket:Bucket", {"accelerationStatus": "Enabled"})
    assert check(edge, "aws:s3/bucket:Bucket", {"bucket": "b"}) == NOT_APPLICABLE
    assert check(edge, "aws:s3control/multiRegionAccessPoint:MultiRegionAccessPoint", {"details": {}})
    oac = {"origins": [{"domainName": "d.example.com", "originId": "x", "s3OriginConfig": {"originAccessIdentity": ""}}]}
    assert check(edge, "aws:cloudfront/distribution:Distribution", oac)
