"""Residency beyond the region rule: zones, replication, multi-region keys, edge paths."""

from __future__ import annotations

import json

from google.protobuf import struct_pb2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from platform_policies import ALL_POLICIES, data_paths
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


PATHS = next(p for p in ALL_POLICIES if p.name == "no-data-paths-abroad")
US_EAST = "us-east-1"


def test_every_path_out_names_its_region():
    """The red team's paths abroad, each in the property AWS takes it from."""
    abroad = {
        "aws:backup/plan:Plan": {"rules": [{"ruleName": "daily", "targetVaultName": "local", "copyActions": [
            {"destinationVaultArn": f"arn:aws:backup:{US_EAST}:111122223333:backup-vault:copy"}]}]},
        "aws:cloudwatch/eventTarget:EventTarget": {"rule": "r", "arn": f"arn:aws:events:{US_EAST}:111122223333:"
                                                                        "event-bus/default"},
        "aws:cloudwatch/logSubscriptionFilter:LogSubscriptionFilter": {
            "logGroup": "g", "destinationArn": f"arn:aws:logs:{US_EAST}:111122223333:destination:d"},
        "aws:cloudwatch/logDestination:LogDestination": {"targetArn": f"arn:aws:kinesis:{US_EAST}:1:stream/s"},
        "aws:kinesis/firehoseDeliveryStream:FirehoseDeliveryStream": {
            "destination": "opensearch", "opensearchConfiguration": {
                "domainArn": f"arn:aws:es:{US_EAST}:111122223333:domain/logs"}},
        "aws:sns/topicSubscription:TopicSubscription": {"protocol": "sqs",
                                                        "endpoint": f"arn:aws:sqs:{US_EAST}:111122223333:q"},
        "pulumi:providers:aws": {"region": "me-central-1",
                                 "endpoints": json.dumps([{"s3": f"https://s3.{US_EAST}.amazonaws.com"}])},
        "aws:ec2/vpcEndpoint:VpcEndpoint": {"serviceName": f"com.amazonaws.{US_EAST}.s3", "vpcId": "v"},
        "kubernetes:apps/v1:Deployment": {"kind": "Deployment", "metadata": {"name": "d", "namespace": "t"},
                                          "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [
                                              {"name": "AWS_ENDPOINT_URL_S3",
                                               "value": f"https://s3.{US_EAST}.amazonaws.com"}]}]}}}},
    }
    for resource_type, props in abroad.items():
        found = check(PATHS, resource_type, props)
        assert found and all(US_EAST in m for m in found), (resource_type, found)


def test_what_stays_in_the_region_or_names_none_passes():
    home = {
        "aws:cloudwatch/eventTarget:EventTarget": {"arn": "arn:aws:events:me-central-1:111122223333:event-bus/b"},
        "aws:iam/rolePolicy:RolePolicy": {"policy": json.dumps({"Statement": [{
            "Effect": "Allow", "Action": "s3:GetObject", "Resource": ["arn:aws:s3:::b/*", "arn:aws:iam::1:role/x"]}]})},
        "aws:ec2/vpcEndpoint:VpcEndpoint": {"serviceName": "com.amazonaws.me-central-1.s3"},
        # A bucket's own region is the region rule's; a replication configuration is the replication rule's.
        "aws:s3/bucket:Bucket": {"bucket": "b", "region": US_EAST},
        "pulumi:providers:aws": {"region": US_EAST},
    }
    for resource_type, props in home.items():
        assert check(PATHS, resource_type, props) in ([], NOT_APPLICABLE), resource_type
    assert check(PATHS, "aws:s3/bucketReplicationConfig:BucketReplicationConfig", {"rules": []}) == NOT_APPLICABLE
    assert check(PATHS, "aws:cloudwatch/eventTarget:EventTarget",
                 {"arn": f"arn:aws:events:{US_EAST}:1:event-bus/b"}, config={"allowedRegions": [US_EAST]}) == []


def test_paths_that_leave_aws_altogether():
    for protocol in ("https", "email", "sms"):
        [message] = check(PATHS, "aws:sns/topicSubscription:TopicSubscription",
                          {"protocol": protocol, "endpoint": "ops@example.com"})
        assert "outside AWS's regions" in message
    assert check(PATHS, "aws:sns/topicSubscription:TopicSubscription",
                 {"protocol": "sqs", "endpoint": "arn:aws:sqs:me-central-1:111122223333:q"}) == []
    assert check(PATHS, "aws:cloudwatch/eventApiDestination:EventApiDestination",
                 {"invocationEndpoint": "https://hooks.example.com/x", "httpMethod": "POST"})
    assert check(PATHS, "aws:kinesis/firehoseDeliveryStream:FirehoseDeliveryStream",
                 {"destination": "http_endpoint", "httpEndpointConfiguration": {"url": "https://collector.example"}})


def test_a_path_out_cannot_hide_by_nesting():
    deep: dict = {"arn": "arn:aws:events:me-central-1:1:event-bus/b"}
    for _ in range(250):
        deep = {"inner": deep}
    deep["x"] = "arn:aws:events:us-east-1:1:event-bus/b"  # near the top: found
    found = check(PATHS, "kubernetes:example.com/v1:Thing", {"spec": deep})
    assert any("us-east-1" in m for m in found) and any("too deep to judge" in m for m in found)


def test_a_region_in_disguise_is_still_found():
    """Host names in capitals, a region spelt with a JSON escape, JSON text led by white space:
    each names us-east-1 all the same, and the quick test that spares the walk must not be
    fooled by any of them."""
    disguised = {
        "capitals": {"endpoints": json.dumps([{"s3": "https://S3.US-EAST-1.AMAZONAWS.COM"}])},
        "escaped": {"definition": '{"QueueUrl": "https://sqs.\\u0075s-east-1.amazonaws.com/1/q"}'},
        "escaped, led by white space": {"definition": '\n {"Resource": "arn:aws:sqs:\\u0075s-east-1:1:q"}'},
        "a region key in capitals": {"serviceRegion": "US-EAST-1"},
        "the European Sovereign Cloud": {"endpoint": "arn:aws-eusc:sqs:eusc-de-east-1:1:q"},
        "a host under on.aws": {"url": "https://abc.lambda-url.us-east-1.on.aws/"},
        "a region under an empty key": {"": {"region": "us-east-1"}},
        "S3's legacy us-east-1 host": {"endpoints": json.dumps([{"s3": "https://s3-external-1.amazonaws.com"}])},
        "an ElastiCache label": {"url": "rediss://master.features.abc123.use1.cache.amazonaws.com:6379"},
        "an ElastiCache label in capitals": {"url": "MASTER.FEATURES.ABC123.USE1.CACHE.AMAZONAWS.COM"},
    }
    for case, props in disguised.items():
        found = check(PATHS, "aws:sfn/stateMachine:StateMachine", props)
        assert found and all(US_EAST in m or "eusc-de-east-1" in m for m in found), (case, found)
    # ElastiCache labels decode by area and direction; one that does not decode is named as it
    # is (no allow-list holds it); the UAE's own passes.
    assert [data_paths.cache_region(x) for x in ("use1", "apse1", "mec1", "usgw1", "euc1")] == [
        "us-east-1", "ap-southeast-1", "me-central-1", "us-gov-west-1", "eu-central-1"]
    assert check(PATHS, "aws:sfn/stateMachine:StateMachine", {"url": "x.abc.zzq9.cache.amazonaws.com"})
    assert check(PATHS, "aws:sfn/stateMachine:StateMachine", {"url": "x.abc.mec1.cache.amazonaws.com"}) == []
    assert check(PATHS, "aws:sfn/stateMachine:StateMachine", {"url": "https://not-s3-external-1.amazonaws.com"}) == []
    # A Kubernetes object's top-level `region` is no resource's own region: judged here.
    assert check(PATHS, "kubernetes:example.com/v1:Exporter", {"region": "us-east-1"})
    # An AWS resource's own region is the region rule's, even when an empty key repeats it.
    assert check(PATHS, "aws:sqs/queue:Queue", {"region": US_EAST, "": {"region": US_EAST}}) == []
    assert check(PATHS, "aws:sqs/queue:Queue", {"region": "me-central-1", "": {"region": US_EAST}})


# Pieces a path out is made of, in the forms that have fooled or could fool the quick test.
PIECES = st.sampled_from([
    "us-east-1", "US-EAST-1", "me-central-1", "us-gov-west-1", "us-isob-east-1", "\\u0075s-east-1", "\u212a",
    "\u0130", "arn:aws:sqs:", "arn:aws:s3:::b", ":1:q", "https://s3.", "sqs.", ".amazonaws.com", ".api.aws",
    "com.amazonaws.", ".s3", "{", "}", "[", "]", '"', ":", ",", " ", "\n", "-", "-1", "a", "z", "0", ".", "x" * 50,
    "\\n", "\\t", '\\"', "\\\\", "_", "eusc-de-east-1", "arn:aws-eusc:sqs:", ".amazonaws.eu", ".on.aws", "-de",
])
TEXTS = st.lists(PIECES, max_size=12).map("".join)
PROPS = st.recursive(TEXTS, lambda inner: st.dictionaries(
    st.sampled_from(["arn", "endpoint", "serviceRegion", "definition", "x"]), inner, max_size=3)
    | st.lists(inner, max_size=3), max_leaves=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=PROPS)
@example(props="arn:aws:sqs:ab-" + "x" * 60 + "-1:1:q")  # a region-shaped run longer than the window
@example(props="us-east-1.amazonaws.com/" + "x" * 73)  # 97 characters: its length is written "a" before it
@example(props='{"url": "\\nus-east-1.amazonaws.com"}')  # JSON text: a new line, written as a backslash and n
def test_the_quick_test_never_spares_a_walk_that_would_find_a_region(props):
    """Soundness of the quick test, over both forms of the text it reads (the pack's protobuf
    bytes, JSON elsewhere): whenever it says the properties surely stay home, walking them
    finds no region off the allow-list."""
    allowed = {"me-central-1"}
    found = set()
    for _path, key, text in data_paths._strings(data_paths.known({"p": props}), ""):
        found |= data_paths.regions_of(key, text)
    struct = struct_pb2.Struct()
    struct.update({"p": props})
    for form in (struct.SerializeToString(), json.dumps({"p": props}).encode()):
        if data_paths._surely_home(form, allowed):
            assert found <= allowed, (form, found)
