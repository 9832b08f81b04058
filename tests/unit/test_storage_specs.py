"""Pure storage specs: key policies, bucket policies, lifecycle rules, Lustre rules, the
registry plan, and the storage config's one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components import lustre_spec
from components.audit import event_selectors
from components.bucket_policy import TrailDelivery, bucket_name, bucket_policy, lifecycle_rules
from components.key_policy import KeyUse, StorageNames, data_class_uses, key_policy
from components.registry_policy import lifecycle_policy
from infra.config import ConfigError, parse_config
from infra.versions import CHARTS, DIGEST, IMAGES, SITES, PlanError, image_uri, unpinned

ACCOUNT, REGION = "111122223333", "me-central-1"
ROOT = f"arn:aws:iam::{ACCOUNT}:root"
KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234"
NAMES = StorageNames(
    buckets={p: f"mlplat-test-{p}-{ACCOUNT}-{REGION}" for p in ("datasets", "models", "checkpoints", "audit",
                                                                "access-logs")},
    trail="mlplat-test-audit",
    lustre=True,
)


def statements(policy: dict) -> dict[str, dict]:
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert len(by_sid) == len(policy["Statement"]), "statement ids must be unique"
    return by_sid


# --- key policies ---------------------------------------------------------------------


def test_every_data_class_has_a_key_and_a_use():
    from infra.platform import DATA_CLASSES

    uses = data_class_uses(NAMES)
    assert set(uses) == set(DATA_CLASSES) == {"datasets", "models", "checkpoints", "logs", "cluster", "volumes",
                                              "images", "tracking", "features"}
    assert all(use.services for use in uses.values())


def test_administrators_manage_but_never_use_a_key():
    admin = statements(key_policy(ACCOUNT, REGION, KeyUse()))["KeyAdministration"]
    assert admin["Principal"] == {"AWS": ROOT}
    actions = set(admin["Action"])
    assert {"kms:PutKeyPolicy", "kms:ScheduleKeyDeletion", "kms:EnableKeyRotation"} <= actions
    assert not actions & {"kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*", "kms:CreateGrant"}
    assert not any("*" in a.split(":", 1)[1] for a in actions), "administration is listed action by action"


def test_a_key_without_uses_grants_only_administration():
    assert list(statements(key_policy(ACCOUNT, REGION, KeyUse()))) == ["KeyAdministration"]


def test_bucket_keys_work_only_through_s3_in_region_on_their_buckets():
    uses = data_class_uses(NAMES)
    for data_class in ("models", "checkpoints"):
        policy = statements(key_policy(ACCOUNT, REGION, uses[data_class]))
        assert set(policy) == {"KeyAdministration", "UseThroughS3"}
        s3 = policy["UseThroughS3"]
        assert s3["Condition"]["StringEquals"] == {"kms:ViaService": f"s3.{REGION}.amazonaws.com",
                                                   "kms:CallerAccount": ACCOUNT}
        bucket = NAMES.buckets[data_class]
        assert s3["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"] == [
            f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]


def test_datasets_key_serves_lustre_and_its_s3_link_only_when_lustre_is_on():
    on = statements(key_policy(ACCOUNT, REGION, data_class_uses(NAMES)["datasets"]))
    assert on["UseThroughFSx"]["Condition"]["StringEquals"]["kms:ViaService"] == f"fsx.{REGION}.amazonaws.com"
    assert on["UseThroughFSxGrants"]["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    link = on["FSxDataRepositoryThroughS3"]
    assert link["Condition"]["StringEquals"]["kms:ViaService"] == f"s3.{REGION}.amazonaws.com"
    assert link["Condition"]["ArnLike"]["aws:PrincipalArn"].startswith(
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/")
    off = data_class_uses(StorageNames(NAMES.buckets, NAMES.trail, lustre=False))["datasets"]
    assert set(statements(key_policy(ACCOUNT, REGION, off))) == {"KeyAdministration", "UseThroughS3"}


def test_logs_key_serves_cloudwatch_cloudtrail_and_log_delivery_pinned_to_region_and_account():
    policy = statements(key_policy(ACCOUNT, REGION, data_class_uses(NAMES)["logs"]))
    logs = policy["CloudWatchLogs"]
    assert logs["Principal"] == {"Service": f"logs.{REGION}.amazonaws.com"}
    assert logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"] == (
        f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:*")
    trail_arn = f"arn:aws:cloudtrail:{REGION}:{ACCOUNT}:trail/mlplat-test-audit"
    encrypt = policy["CloudTrailEncryptLogs"]
    assert encrypt["Principal"] == {"Service": "cloudtrail.amazonaws.com"}
    assert encrypt["Condition"]["StringEquals"] == {"aws:SourceArn": trail_arn, "aws:SourceAccount": ACCOUNT}
    assert encrypt["Action"] == "kms:GenerateDataKey*"
    delivery = policy["S3ServerAccessLogDelivery"]
    assert delivery["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT}
    assert f"arn:aws:s3:::{NAMES.buckets['datasets']}" in delivery["Condition"]["ArnLike"]["aws:SourceArn"]
    assert policy["UseThroughS3"]["Condition"]["StringLike"]["kms:EncryptionContext:aws:s3:arn"] == [
        f"arn:aws:s3:::{NAMES.buckets['audit']}", f"arn:aws:s3:::{NAMES.buckets['audit']}/*",
        f"arn:aws:s3:::{NAMES.buckets['access-logs']}", f"arn:aws:s3:::{NAMES.buckets['access-logs']}/*"]


def test_volumes_key_lets_auto_scaling_launch_encrypted_nodes():
    policy = statements(key_policy(ACCOUNT, REGION, data_class_uses(NAMES)["volumes"]))
    assert policy["UseThroughEC2"]["Condition"]["StringEquals"]["kms:ViaService"] == f"ec2.{REGION}.amazonaws.com"
    role = f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
    for sid in ("AutoScalingVolumes", "AutoScalingVolumeGrants"):
        condition = policy[sid]["Condition"]
        assert condition["ArnEquals"] == {"aws:PrincipalArn": role}
        assert condition["StringEquals"] == {"kms:CallerAccount": ACCOUNT}
    assert policy["AutoScalingVolumeGrants"]["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}


SIDS = {"eks": "UseThroughEKS", "ecr": "UseThroughECR", "secretsmanager": "UseThroughSecretsManager",
        "codebuild": "UseThroughCodeBuild"}


# The cluster key also holds the deploy runner's secrets: its GitHub token and build data.
@pytest.mark.parametrize(("data_class", "services"), [("cluster", ("eks", "secretsmanager", "codebuild")),
                                                       ("images", ("ecr",))])
def test_service_keys_work_only_through_their_service(data_class, services):
    policy = statements(key_policy(ACCOUNT, REGION, data_class_uses(NAMES)[data_class]))
    sids = [SIDS[service] for service in services]
    assert set(policy) == {"KeyAdministration", *sids, *(f"{sid}Grants" for sid in sids)}
    for service, sid in zip(services, sids):
        assert policy[sid]["Condition"]["StringEquals"]["kms:ViaService"] == f"{service}.{REGION}.amazonaws.com"


def test_every_wildcard_principal_is_pinned_to_the_account():
    for use in data_class_uses(NAMES).values():
        for statement in key_policy(ACCOUNT, REGION, use)["Statement"]:
            if statement["Principal"] == {"AWS": "*"}:
                assert statement["Condition"]["StringEquals"]["kms:CallerAccount"] == ACCOUNT
                principal_arn = next(v["aws:PrincipalArn"] for k, v in statement["Condition"].items()
                                     if k in ("ArnLike", "ArnEquals"))
                assert principal_arn.startswith(f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/")


def test_no_key_policy_names_another_region():
    for use in data_class_uses(NAMES).values():
        text = str(key_policy(ACCOUNT, REGION, use))
        assert "us-east-1" not in text and "me-south-1" not in text
        assert text.count(".amazonaws.com") == text.count(f"{REGION}.amazonaws.com") + text.count(
            "logging.s3.amazonaws.com") + text.count("cloudtrail.amazonaws.com") + text.count(
            "s3.data-source.lustre.fsx.amazonaws.com") + text.count("autoscaling.amazonaws.com")


# --- buckets --------------------------------------------------------------------------


def test_bucket_names_differ_by_stack_account_and_region():
    names = {bucket_name("mlplat", s, "datasets", a, r)
             for s in ("dev", "prod") for a in ("111122223333", "444455556666") for r in ("me-central-1", "eu-west-1")}
    assert len(names) == 8
    assert bucket_name("mlplat", "prod", "datasets", ACCOUNT, REGION) == "mlplat-prod-datasets-111122223333-me-central-1"


def test_bucket_name_too_long_is_refused():
    with pytest.raises(ValueError, match="breaks S3's naming rules"):
        bucket_name("mlplat", "a-very-long-stack-name-for-testing", "checkpoints", ACCOUNT, REGION)


def test_data_bucket_policy_denies_plain_http_and_other_keys():
    """Its statements; what AWS decides with them, request by request, is tests/iam's."""
    policy = statements(bucket_policy("b", KEY, account=ACCOUNT))
    assert set(policy) == {"DenyInsecureTransport", "DenyObjectsNotEncryptedWithKms",
                           "DenyObjectsEncryptedWithAnotherKey", "DenyKmsWithoutTheBucketKey"}
    tls = policy["DenyInsecureTransport"]
    assert tls["Effect"] == "Deny" and tls["Principal"] == "*" and tls["Action"] == "s3:*"
    assert tls["Resource"] == ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_audit_bucket_policy_lets_only_its_trail_write_and_exempts_only_digests():
    trail_arn = f"arn:aws:cloudtrail:{REGION}:{ACCOUNT}:trail/t"
    policy = statements(bucket_policy("audit", KEY, account=ACCOUNT, trail=TrailDelivery(trail_arn, ACCOUNT)))
    digests = f"arn:aws:s3:::audit/cloudtrail/AWSLogs/{ACCOUNT}/CloudTrail-Digest/*"
    for sid in ("DenyObjectsNotEncryptedWithKms", "DenyObjectsEncryptedWithAnotherKey", "DenyKmsWithoutTheBucketKey"):
        assert policy[sid]["NotResource"] == digests and "Resource" not in policy[sid]
    assert policy["OnlyCloudTrailWritesDigests"]["Resource"] == digests
    write = policy["CloudTrailWrite"]
    assert write["Resource"] == f"arn:aws:s3:::audit/cloudtrail/AWSLogs/{ACCOUNT}/*"
    assert write["Condition"]["StringEquals"]["aws:SourceArn"] == trail_arn
    assert policy["CloudTrailAclCheck"]["Condition"] == {"StringEquals": {"aws:SourceArn": trail_arn}}


def test_access_log_bucket_accepts_only_the_platforms_buckets():
    policy = statements(bucket_policy("logs", KEY, account=ACCOUNT, log_delivery_sources=("a", "b")))
    delivery = policy["S3ServerAccessLogDelivery"]
    assert delivery["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert delivery["Condition"] == {"ArnLike": {"aws:SourceArn": ["arn:aws:s3:::a", "arn:aws:s3:::b"]},
                                     "StringEquals": {"aws:SourceAccount": ACCOUNT}}


def test_vpc_endpoint_restriction_is_optional_and_spares_aws_services():
    assert "ObjectAccessOnlyThroughTheVpcEndpoint" not in statements(bucket_policy("b", KEY, account=ACCOUNT))
    rule = statements(bucket_policy("b", KEY, account=ACCOUNT, vpc_endpoint_id="vpce-1"))[
        "ObjectAccessOnlyThroughTheVpcEndpoint"]
    assert rule["Effect"] == "Deny" and rule["Resource"] == "arn:aws:s3:::b/*"
    assert rule["Condition"]["StringNotEqualsIfExists"] == {"aws:SourceVpce": "vpce-1"}
    assert rule["Condition"]["BoolIfExists"] == {"aws:PrincipalIsAWSService": "false", "aws:ViaAWSService": "false"}
    assert not any(a in ("s3:*", "s3:PutBucketPolicy") for a in rule["Action"])


def test_lifecycle_rules():
    rules = {r.id: r for r in lifecycle_rules(30)}
    assert rules["expire-noncurrent-versions"].noncurrent_days == 30
    assert rules["abort-incomplete-multipart-uploads"].abort_multipart_days == 7
    assert "expire-objects" not in rules
    assert {r.id: r for r in lifecycle_rules(30, expire_days=365)}["expire-objects"].expire_days == 365


@pytest.mark.parametrize("days", [0, -1, 1.5, "30", True])
def test_lifecycle_period_must_be_positive(days):
    with pytest.raises(ValueError, match="must be a whole number of days, 1 or more"):
        lifecycle_rules(days)


def test_trail_logs_object_access_on_data_buckets_only():
    selectors = event_selectors(["d", "m"])
    assert selectors[0]["field_selectors"] == [{"field": "eventCategory", "equals": ["Management"]}]
    fields = {f["field"]: f for f in selectors[1]["field_selectors"]}
    assert fields["resources.type"]["equals"] == ["AWS::S3::Object"]
    assert fields["resources.ARN"]["starts_withs"] == ["arn:aws:s3:::d/", "arn:aws:s3:::m/"]


# --- registry -------------------------------------------------------------------------


def test_ecr_lifecycle_policy():
    rules = lifecycle_policy(14, 20)["rules"]
    assert [r["rulePriority"] for r in rules] == [1, 2]
    assert rules[0]["selection"] == {"tagStatus": "untagged", "countType": "sinceImagePushed",
                                     "countUnit": "days", "countNumber": 14}
    assert rules[1]["selection"]["countType"] == "imageCountMoreThan" and rules[1]["selection"]["countNumber"] == 20
    with pytest.raises(ValueError, match="untagged_days must be a whole number, 1 or more"):
        lifecycle_policy(0, 20)


def test_registry_plan_maps_every_image_to_an_in_region_repository_of_its_environment():
    repositories = [image.repository("prod") for image in IMAGES.values()]
    charts = [chart.mirror_repository("prod") for chart in CHARTS.values()]
    assert len(set(repositories + charts)) == len(repositories + charts)
    # Two environments in one account never share a repository.
    assert not set(repositories + charts) & {i.repository("dev") for i in IMAGES.values()}
    built = {"training": f"0.1.0-abc@sha256:{'1' * 64}", "serving": f"0.1.0-abc@sha256:{'2' * 64}",
             "checks": f"0.1.0-abc@sha256:{'3' * 64}", "tracking": f"0.1.0-abc@sha256:{'4' * 64}",
             "features": f"0.1.0-abc@sha256:{'5' * 64}", "rollouts-gatewayapi-plugin": f"0.1.0-abc@sha256:{'6' * 64}",
             "pipelines": f"0.1.0-abc@sha256:{'7' * 64}"}
    for name, image in IMAGES.items():
        assert image.name == name and image.tag
        uri = image_uri(name, ACCOUNT, REGION, "prod", built)
        host = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
        if image.built_here:
            assert image.upstream(REGION) == "" and image.repository("prod") == f"mlplat/prod/{name}"
            assert uri == f"{host}/mlplat/prod/{name}:{built[name]}"
        else:
            assert image.repository("prod") == f"mlplat/prod/mirror/{name}"
            assert uri == f"{host}/mlplat/prod/mirror/{name}:{image.tag}" + (f"@{image.digest}" if image.digest else "")
            assert image.upstream(REGION).endswith(f":{image.tag}")
            assert "." in image.upstream(REGION).split("/", 1)[0], f"{name}: name the upstream registry host"
    with pytest.raises(PlanError, match="mlplat:platformImages.training is not set"):
        image_uri("training", ACCOUNT, REGION, "prod", {})


def test_the_efa_plugin_is_copied_from_the_eks_registry_of_the_stacks_own_region():
    assert IMAGES["aws-efa-k8s-device-plugin"].upstream("me-central-1") == (
        "759879836304.dkr.ecr.me-central-1.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20")
    with pytest.raises(PlanError, match="no EKS add-on registry is known for region xx-west-9"):
        IMAGES["aws-efa-k8s-device-plugin"].upstream("xx-west-9")


def test_unpinned_lists_exactly_the_mirrors_without_a_digest():
    # The images and charts listed here await a registry that answers.
    for site in SITES:  # each site's plan: what the environments there run
        assert unpinned(site) == [f"image {n}" for n, i in IMAGES.items()
                                  if site in i.sites and not i.built_here and not i.digest] + \
            [f"chart {n}" for n, c in CHARTS.items() if site in c.sites and not c.digest]
    assert unpinned() == unpinned("aws")
    assert all(DIGEST.match(c.digest) for c in CHARTS.values() if c.digest)
    assert all(DIGEST.match(i.digest) for i in IMAGES.values() if i.digest)


def test_registry_plan_covers_what_the_platform_runs():
    needed = {"k8s-device-plugin", "node-feature-discovery", "gpu-operator", "dcgm-exporter",
              "aws-efa-k8s-device-plugin", "prometheus", "alertmanager", "prometheus-operator",
              "prometheus-config-reloader", "node-exporter", "kube-state-metrics", "kueue", "jobset", "thanos",
              "node-feature-discovery-0.17",
              "aws-fsx-csi-driver", "tritonserver", "pytorch", "training", "serving", "checks"}
    assert needed <= set(IMAGES)


# --- Lustre ---------------------------------------------------------------------------


@pytest.mark.parametrize("gib", [1200, 2400, 4800, 9600, 72000])
def test_lustre_capacities_fsx_accepts(gib):
    assert lustre_spec.capacity_error(gib) is None


@pytest.mark.parametrize("gib", [0, 1000, 1300, 3600, -2400, 2400.0, "2400"])
def test_lustre_capacities_fsx_refuses(gib):
    assert "is not a PERSISTENT_2 capacity; allowed: 1200 or a multiple of 2400" in lustre_spec.capacity_error(gib)


def test_lustre_throughputs():
    assert [t for t in (50, 125, 200, 250, 500, 1000, 1200) if lustre_spec.throughput_error(t) is None] == [
        125, 250, 500, 1000]


def test_lustre_security_group_rules_are_lustre_ports_only():
    rules = lustre_spec.file_system_rules()
    assert {(r.from_port, r.to_port) for r in rules} == {(988, 988), (1018, 1023)}
    assert {(r.direction, r.peer) for r in rules} == {("ingress", "nodes"), ("ingress", "self"),
                                                      ("egress", "nodes"), ("egress", "self")}
    assert len(rules) == 8
    assert [r.description for r in lustre_spec.client_rules()] == [
        "Lustre TCP 988 from the Lustre file system", "Lustre TCP 1018-1023 from the Lustre file system"]


# --- config: one line naming the key and what is allowed ------------------------------

REPO = Path(__file__).resolve().parents[2]


def config_error(stack: str, storage: dict) -> str:
    raw = yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    raw["mlplat:storage"] = storage
    with pytest.raises(ConfigError) as err:
        parse_config(raw, f"stacks/Pulumi.{stack}.yaml", from_stack_file=True)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        ({"lustre": {"enabled": True, "storageCapacityGiB": 2000}},
         "mlplat:storage.lustre.storageCapacityGiB: 2000 GiB is not a PERSISTENT_2 capacity; allowed: 1200 or a "
         "multiple of 2400 (2400, 4800, 7200, ...)"),
        ({"lustre": {"enabled": True, "perUnitStorageThroughput": 300}},
         "mlplat:storage.lustre.perUnitStorageThroughput: 300 is not a PERSISTENT_2 throughput; allowed: 125, 250, "
         "500, 1000 (MB/s per TiB)"),
        ({"auditObjectLock": {"days": 30}},
         "mlplat:storage.auditObjectLock.mode: is missing; an Object Lock retention needs a mode; allowed: "
         "GOVERNANCE, COMPLIANCE"),
        ({"auditObjectLock": {"mode": "STRICT", "days": 30}},
         "mlplat:storage.auditObjectLock.mode: 'STRICT' is not allowed; allowed: 'GOVERNANCE' or 'COMPLIANCE'"),
        ({"auditObjectLock": {"mode": "COMPLIANCE", "days": 0}},
         "mlplat:storage.auditObjectLock.days: 0 is not a positive whole number of days; allowed: 1 or more"),
        ({"noncurrentVersionDays": -7},
         "mlplat:storage.noncurrentVersionDays: -7 is not a positive whole number of days; allowed: 1 or more"),
        ({"noncurrentVersionDays": "ninety"},
         "mlplat:storage.noncurrentVersionDays: 'ninety' is not a positive whole number of days; allowed: 1 or more"),
    ],
)
def test_bad_storage_config_is_one_line(storage, message):
    assert config_error("staging", storage) == f"stacks/Pulumi.staging.yaml: {message}"


def test_lustre_needs_a_gpu_pool_pinned_to_a_zone():
    assert config_error("dev", {"lustre": {"enabled": True}}) == (
        "stacks/Pulumi.dev.yaml: mlplat:storage.lustre.enabled: Lustre scratch goes in the GPU pool's zone, but no "
        "gpu pool is pinned to one; set placementGroupZoneId (or zoneId) on a gpu pool, or set lustre.enabled: false")
