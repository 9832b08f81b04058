"""The MLflow tracking server as each environment's preview sends it: the database and its
secrets in the cloud layer, the server in the cluster layer, the training jobs pointed at
it, and the pack's verdict on all of it."""

from __future__ import annotations


import pytest

from infra.descriptor import OUTPUT
from infra.preview.report import kubernetes_objects
from tests.conftest import STACKS, both_layers, preview
from tests.helpers import role_policy


def _inputs(result, type_: str) -> list[dict]:
    return [r.inputs(mask_secrets=False) for r in result.registrations if r.type == type_]


@pytest.mark.parametrize("stack", STACKS)
def test_the_database_is_private_encrypted_tls_only_and_kept(stack):
    cloud = preview(stack)
    [db] = _inputs(cloud, "aws:rds/instance:Instance")
    keys = cloud.stack_outputs[OUTPUT]["keys"]
    assert db["engine"] == "postgres" and db["publiclyAccessible"] is False
    assert db["storageEncrypted"] is True and db["kmsKeyId"] == keys["tracking"]
    assert db["manageMasterUserPassword"] is True and db["masterUserSecretKmsKeyId"] == keys["tracking"]
    assert "password" not in db and db["performanceInsightsKmsKeyId"] == keys["tracking"]
    assert db["deletionProtection"] is True and db["backupRetentionPeriod"] >= 7 and db["skipFinalSnapshot"] is False
    assert "replicateSourceDb" not in db
    [group] = _inputs(cloud, "aws:rds/parameterGroup:ParameterGroup")
    assert db["parameterGroupName"] == group["name"]
    assert {"name": "rds.force_ssl", "value": "1", "applyMethod": "pending-reboot"} in group["parameters"]
    # Reachable from the cluster's security group only, on PostgreSQL's port.
    [firewall] = [sg for sg in _inputs(cloud, "aws:ec2/securityGroup:SecurityGroup")
                  if sg.get("description", "").startswith("MLflow")]
    [rule] = firewall["ingress"]
    assert (rule["fromPort"], rule["toPort"]) == (5432, 5432) and "cidrBlocks" not in rule
    assert len(rule["securityGroups"]) == 1
    # Its subnets are the private ones.
    [subnets] = [r for r in cloud.registrations if r.type == "aws:rds/subnetGroup:SubnetGroup"]
    private = {r.urn for r in cloud.registrations if r.type == "aws:ec2/subnet:Subnet"
               and r.inputs()["tags"].get("mlplat.io/tier") == "private"}
    assert set(subnets.property_dependencies["subnetIds"]) == private and private
    protected = {r.name for r in cloud.registrations if r.type == "aws:rds/instance:Instance" and r.protect}
    assert protected == {"tracking"}
    [logs] = [g for g in _inputs(cloud, "aws:cloudwatch/logGroup:LogGroup") if g["name"].startswith("/aws/rds/")]
    assert logs["kmsKeyId"] == keys["logs"] and logs["retentionInDays"] > 0


@pytest.mark.parametrize("stack", STACKS)
def test_user_secrets_are_empty_under_the_tracking_key(stack):
    cloud = preview(stack)
    secrets = [s for s in _inputs(cloud, "aws:secretsmanager/secret:Secret") if "/tracking/" in s["name"]]
    tenants = {t["name"] for t in cloud.stack_outputs[OUTPUT]["settings"]["tenants"]}
    assert {s["name"].rsplit("/", 1)[-1] for s in secrets} == {"admin", *tenants}
    assert {s["kmsKeyId"] for s in secrets} == {cloud.stack_outputs[OUTPUT]["keys"]["tracking"]}
    assert all("replicas" not in s for s in secrets)
    assert not _inputs(cloud, "aws:secretsmanager/secretVersion:SecretVersion")  # no value passes through Pulumi


def test_the_training_role_reads_its_own_tenants_secret_only():
    cloud = preview("prod")
    statements = role_policy(cloud, "-research-gpt2-smoke")["Statement"]
    [read] = [s for s in statements if s.get("Sid") == "ReadTrackingUser"]
    assert [r.rsplit(":", 1)[-1].rsplit("-", 1)[0] for r in read["Resource"]] == ["mlplat-prod/tracking/tenant/research"]


@pytest.mark.parametrize("environment", STACKS)
def test_the_server_runs_on_the_cpu_or_system_pool_and_admits_tenants_only(environment):
    cloud, cluster = both_layers(environment)
    manifests = {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): m
                 for m in kubernetes_objects(cluster)}
    deployment = manifests[("Deployment", "mlflow", "mlflow")]
    pools = {p["role"]: p["instanceType"] for p in reversed(cloud.stack_outputs[OUTPUT]["settings"]["nodePools"])}
    [term] = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == [pools.get("cpu", pools["system"])]
    if environment == "smb":
        assert term["matchExpressions"][0]["values"] == ["c7i.2xlarge"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    tracking = cloud.stack_outputs[OUTPUT]["tracking"]
    assert env["MLPLAT_DB_SECRET_ARN"] == tracking["masterSecretArn"]
    assert env["MLPLAT_ARTIFACTS"] == f"s3://{cloud.stack_outputs[OUTPUT]['buckets']['models']}/mlflow"
    assert not any("PASSWORD" in name for name in env)
    assert "@sha256:" in container["image"]
    tenants = sorted(t["name"] for t in cloud.stack_outputs[OUTPUT]["settings"]["tenants"])
    admit = manifests[("NetworkPolicy", "mlflow", "allow-tenants")]["spec"]["ingress"]
    assert admit[0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == tenants
    assert manifests[("NetworkPolicy", "mlflow", "default-deny")]["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert manifests[("Service", "mlflow", "mlflow")]["spec"]["type"] == "ClusterIP"


@pytest.mark.parametrize("environment", ["prod", "staging"])
def test_training_jobs_are_tracked_as_their_tenant(environment):
    cloud, cluster = both_layers(environment)
    jobsets = [m for m in kubernetes_objects(cluster)
               if m["kind"] == "JobSet" and not m["metadata"]["name"].endswith("allreduce")]
    [jobset] = jobsets
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    tenant = jobset["metadata"]["namespace"]
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.mlflow.svc.cluster.local:5000"
    assert env["MLFLOW_TRACKING_USERNAME"] == tenant
    assert env["MLPLAT_TRACKING_SECRET_ARN"] == cloud.stack_outputs[OUTPUT]["tracking"]["tenantSecretArns"][tenant]
    assert env["MLPLAT_CHECKPOINT_UPLOAD"] == f"s3://{cloud.stack_outputs[OUTPUT]['buckets']['checkpoints']}/runs/{tenant}"
    assert env["MLPLAT_IMAGE"] == container["image"]


@pytest.mark.parametrize("environment", ["prod", "staging", "smb"])
def test_both_layers_pass_the_pack(environment):
    for result in both_layers(environment):
        assert result.verdict.mandatory == [] and result.exit_code == 0
    kinds = {r.type for r in both_layers(environment)[0].registrations} | \
        {f"{m['kind']}/{m['metadata']['name']}" for m in kubernetes_objects(both_layers(environment)[1])}
    assert {"aws:rds/instance:Instance", "aws:rds/parameterGroup:ParameterGroup", "Deployment/mlflow"} <= kinds
