"""The feature store as each environment's preview sends it: the online store and the
tenants' users and roles in the cloud layer, each tenant's project in the cluster layer,
the freshness alert evaluated by Prometheus's own rule tester, and the pack's verdict."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from infra.descriptor import OUTPUT
from infra.preview.report import kubernetes_objects
from tests.conftest import STACKS, both_layers, preview
from tests.helpers import role_policy

GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
USER = "aws:elasticache/user:User"


def _inputs(result, type_: str) -> list[dict]:
    return [r.inputs(mask_secrets=False) for r in result.registrations if r.type == type_]


@pytest.mark.parametrize("stack", STACKS)
def test_the_online_store_is_private_tls_only_under_its_key_and_kept(stack):
    cloud = preview(stack)
    keys = cloud.stack_outputs[OUTPUT]["keys"]
    [group] = _inputs(cloud, GROUP)
    assert group["transitEncryptionEnabled"] is True and group["transitEncryptionMode"] == "required"
    assert group["atRestEncryptionEnabled"] is True and group["kmsKeyId"] == keys["features"]
    assert group["engine"] == "redis" and int(group["engineVersion"].split(".")[0]) >= 7  # IAM auth needs 7
    assert "authToken" not in group and group["snapshotRetentionLimit"] >= 1
    assert {c["destinationType"] for c in group["logDeliveryConfigurations"]} == {"cloudwatch-logs"}
    assert [r.name for r in cloud.registrations if r.type == GROUP and r.protect] == ["features"]
    [firewall] = [sg for sg in _inputs(cloud, "aws:ec2/securityGroup:SecurityGroup")
                  if sg.get("description", "").startswith("Feast")]
    [rule] = firewall["ingress"]
    assert (rule["fromPort"], rule["toPort"]) == (6379, 6379) and "cidrBlocks" not in rule
    [subnets] = [r for r in cloud.registrations if r.type == "aws:elasticache/subnetGroup:SubnetGroup"]
    private = {r.urn for r in cloud.registrations if r.type == "aws:ec2/subnet:Subnet"
               and r.inputs()["tags"].get("mlplat.io/tier") == "private"}
    assert set(subnets.property_dependencies["subnetIds"]) == private and private


@pytest.mark.parametrize("stack", STACKS)
def test_each_tenant_has_an_iam_user_for_its_project_and_the_default_user_is_off(stack):
    cloud = preview(stack)
    descriptor = cloud.stack_outputs[OUTPUT]
    tenants = {t["name"] for t in descriptor["settings"]["tenants"]}
    users = {u["userName"]: u for u in _inputs(cloud, USER)}
    assert users["default"]["accessString"].startswith("off")
    features = descriptor["features"]
    assert set(features["users"]) == set(features["projects"]) == tenants
    for tenant, user_id in features["users"].items():
        user = users[user_id]
        assert user["userId"] == user_id and user["authenticationMode"] == {"type": "iam"}
        assert "passwords" not in user
        # Its keys are its project's: Feast's keys end with the project name.
        acl = user["accessString"].split()
        assert [rule for rule in acl if rule.startswith("~")] == [f"~*{features['projects'][tenant]}"]
        assert acl[0] == "on" and "-@all" in acl and {"-scan", "-randomkey"} <= set(acl)
    [members] = _inputs(cloud, "aws:elasticache/userGroup:UserGroup")
    assert len(members["userIds"]) == len(tenants) + 1


def test_each_tenants_role_reaches_its_prefix_and_its_user_only():
    cloud = preview("prod")
    features = cloud.stack_outputs[OUTPUT]["features"]
    datasets = cloud.stack_outputs[OUTPUT]["buckets"]["datasets"]
    for tenant in features["users"]:
        statements = {s["Sid"]: s for s in role_policy(cloud, f"-{tenant}-features")["Statement"]}
        assert statements["ReadWriteFeatures"]["Resource"] == [f"arn:aws:s3:::{datasets}/features/{tenant}/*"]
        connect = statements["ConnectAsTenantUser"]["Resource"]
        assert connect[1].endswith(f":user:{features['users'][tenant]}") and len(connect) == 2


@pytest.mark.parametrize("environment", STACKS)
def test_each_tenant_gets_a_server_and_a_queued_materialization(environment):
    cloud, cluster = both_layers(environment)
    descriptor = cloud.stack_outputs[OUTPUT]
    objects = {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): m
               for m in kubernetes_objects(cluster)}
    for tenant, project in descriptor["features"]["projects"].items():
        config = yaml.safe_load(objects[("ConfigMap", tenant, "feature-store")]["data"]["feature_store.yaml"])
        assert config["project"] == project
        assert config["registry"]["path"] == f"s3://{descriptor['buckets']['datasets']}/features/{tenant}/registry.pb"
        store = config["online_store"]
        assert store["connection_string"] == f"{descriptor['features']['host']}:6379,ssl=true"
        assert store["user"] == descriptor["features"]["users"][tenant]
        assert store["cache_name"] == descriptor["features"]["replicationGroupId"]
        server = objects[("Deployment", tenant, "feature-server")]
        pod = server["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "feature-store" and pod["automountServiceAccountToken"] is False
        assert "@sha256:" in pod["containers"][0]["image"] and "/features:" in pod["containers"][0]["image"]
        assert objects[("Service", tenant, "feature-server")]["spec"]["type"] == "ClusterIP"
        cron = objects[("CronJob", tenant, "materialize-features")]
        assert cron["spec"]["concurrencyPolicy"] == "Forbid"
        job = cron["spec"]["jobTemplate"]
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
        assert objects[("LocalQueue", tenant, "default")]
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:2] == ["materialize", "--config"]
        # Only the server and the job may reach Redis, inside the VPC.
        fence = objects[("NetworkPolicy", tenant, "allow-feature-store")]["spec"]
        assert fence["podSelector"]["matchLabels"] == {"mlplat.io/feature-store": "true"}
        assert fence["egress"][0]["ports"] == [{"protocol": "TCP", "port": 6379}]
        assert objects[("PodMonitor", tenant, "feature-server")]
    assert ("PrometheusRule", "monitoring", "feature-freshness") in objects
    # No other policy of any namespace lets a pod out to Redis's port.
    def reaches_redis(rule: dict) -> bool:
        ports = rule.get("ports") or []
        to_port = not ports or any(p.get("port") in (6379, None) for p in ports)
        # A rule with no `to` allows every destination; one with an ipBlock may be the VPC.
        outside = not rule.get("to") or any("ipBlock" in peer for peer in rule["to"])
        return to_port and outside

    to_redis = [key for key, m in objects.items() if m["kind"] == "NetworkPolicy"
                for rule in m["spec"].get("egress", []) if reaches_redis(rule)]
    assert {name for _, _, name in to_redis} == {"allow-feature-store"}
    assert {ns for _, ns, _ in to_redis} == set(descriptor["features"]["projects"])


@pytest.mark.parametrize("environment", ["prod", "smb"])
def test_both_layers_pass_the_pack_with_the_feature_store(environment):
    cloud, cluster = both_layers(environment)
    for result in (cloud, cluster):
        assert result.verdict.mandatory == [] and result.exit_code == 0
    assert _inputs(cloud, GROUP)
    assert {m["kind"] for m in kubernetes_objects(cluster) if m["metadata"]["name"] in
            ("feature-server", "materialize-features")} == {"Deployment", "Service", "CronJob",
                                                               "PodDisruptionBudget", "PodMonitor"}


def test_the_freshness_alert_fires_when_materialization_is_late(tmp_path):
    """promtool (Prometheus's own rule evaluator) runs the rendered rule on series where one
    view is materialized on time and another stops being materialized."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Prometheus's tools (Debian/Ubuntu: sudo apt-get install "
                    "prometheus), as `make services` does", pytrace=False)
    _, cluster = both_layers("prod")
    [rule] = [m for m in kubernetes_objects(cluster) if m["kind"] == "PrometheusRule"
              and m["metadata"]["name"] == "feature-freshness"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    late = [int(r["expr"].rsplit(">", 1)[1]) for g in rule["spec"]["groups"] for r in g["rules"]
            if r["alert"] == "FeatureMaterializationLate"][0]
    # Freshness sampled every minute: on time, the gauge climbs to an hour and drops back
    # when the hourly job lands; late, it climbs on and passes `late` seconds.
    minutes = late // 60 + 30
    on_time = " ".join(str((m % 60) * 60) for m in range(minutes))
    stale = " ".join(str(m * 60) for m in range(minutes))
    series = [
        {"series": 'feast_feature_freshness_seconds{namespace="research",project="research",'
                   'feature_view="on_time"}', "values": on_time},
        {"series": 'feast_feature_freshness_seconds{namespace="research",project="research",'
                   'feature_view="stale"}', "values": stale},
        {"series": 'up{job="research/feature-server"}', "values": " ".join(["1"] * minutes)},
    ]
    fired = {"eval_time": f"{minutes - 1}m", "alertname": "FeatureMaterializationLate", "exp_alerts": [{
        "exp_labels": {"severity": "warning", "component": "features", "namespace": "research",
                       "project": "research", "feature_view": "stale"},
        "exp_annotations": {
            "summary": "Features of research/stale are stale",
            "description": rule["spec"]["groups"][0]["rules"][0]["annotations"]["description"]
            .replace("{{ $value | humanizeDuration }}", _humanize((minutes - 1) * 60))
            .replace("{{ $labels.namespace }}", "research")}}]}
    quiet = {"eval_time": f"{late // 60 - 10}m", "alertname": "FeatureMaterializationLate", "exp_alerts": []}
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [fired, quiet]}]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _humanize(seconds: int) -> str:
    """Prometheus's humanizeDuration for whole minutes below a day: `2h 4m 0s`."""
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60}m 0s" if hours else f"{rest // 60}m 0s"
