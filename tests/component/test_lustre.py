"""`LustreScratch` under mocks, on its own (plain network inputs) and in the stacks; and
a throughput FSx does not accept stopping `mlplat preview` before anything exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from components.lustre import LustreArgs, LustreScratch
from tests.component.recorder import opts, record

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
DATA_KEY = "arn:aws:kms:me-central-1:111122223333:key/datasets"
LOGS_KEY = "arn:aws:kms:me-central-1:111122223333:key/logs"
REPO = Path(__file__).resolve().parents[2]


def args(**overrides) -> LustreArgs:
    values = dict(prefix="mlplat-test", vpc_id="vpc-1", subnet_id="subnet-az1", node_security_group_id="sg-nodes",
                  kms_key_arn=DATA_KEY, datasets_bucket="b-datasets", tenants=("research", "vision"),
                  storage_capacity_gib=2400,
                  per_unit_storage_throughput=500, logs_kms_key_arn=LOGS_KEY, log_retention_days=90)
    return LustreArgs(**{**values, **overrides})


@pytest.fixture(scope="module")
def lustre():
    return record(lambda provider: LustreScratch("lustre", args(), opts=opts(provider)))


def test_persistent_2_with_its_cmk_capacity_and_throughput(lustre):
    fs = lustre.one(FSX)
    inputs = fs.inputs()
    assert inputs["deploymentType"] == "PERSISTENT_2" and inputs["storageType"] == "SSD"
    assert inputs["storageCapacity"] == 2400 and inputs["perUnitStorageThroughput"] == 500
    assert inputs["kmsKeyId"] == DATA_KEY
    assert inputs["subnetIds"] == "subnet-az1"
    assert inputs["fileSystemTypeVersion"] == "2.15"
    assert fs.property_dependencies["securityGroupIds"] == [lustre.one(SG).urn]
    assert fs.protect is True


def test_file_system_logs_to_an_encrypted_fsx_log_group(lustre):
    group = lustre.one("aws:cloudwatch/logGroup:LogGroup").inputs()
    assert group["name"] == "/aws/fsx/mlplat-test-lustre"
    assert group["kmsKeyId"] == LOGS_KEY and group["retentionInDays"] == 90
    log = lustre.one(FSX).inputs()["logConfiguration"]
    assert log == {"level": "WARN_ERROR", "destination": f"arn:aws:logs:me-central-1:111122223333:log-group:{group['name']}"}


def test_each_tenant_links_its_own_directory_to_its_own_prefix(lustre):
    links = {r.inputs()["fileSystemPath"]: r for r in lustre.of_type(DRA)}
    # No link of the whole bucket: it would show every tenant's datasets to every pod that
    # mounts the file system.
    assert {path: r.inputs()["dataRepositoryPath"] for path, r in links.items()} == {
        "/research/datasets": "s3://b-datasets/research/", "/vision/datasets": "s3://b-datasets/vision/"}
    for dra in links.values():
        inputs = dra.inputs()
        # Deletions come in from the bucket but never go out to it: an `rm` on the file system
        # must not delete past training pods' read-only grant.
        assert inputs["s3"] == {"autoImportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]},
                                "autoExportPolicy": {"events": ["NEW", "CHANGED"]}}
        assert inputs["deleteDataInFilesystem"] is False and inputs["batchImportMetaDataOnCreate"] is True
        assert dra.property_dependencies["fileSystemId"] == [lustre.one(FSX).urn]


def test_more_tenants_than_fsx_links_are_refused():
    with pytest.raises(ValueError, match="9 tenants"):
        args(tenants=tuple(f"t{i}" for i in range(9)))


def _rules(lustre, kind):
    sg = lustre.one(SG).urn
    out = set()
    for rule in lustre.of_type(kind):
        inputs = rule.inputs()
        own = "lustre" if rule.property_dependencies.get("securityGroupId") == [sg] else inputs["securityGroupId"]
        peer = "lustre" if rule.property_dependencies.get("referencedSecurityGroupId") == [sg] else inputs.get(
            "referencedSecurityGroupId")
        assert inputs["ipProtocol"] == "tcp"
        assert not {"cidrIpv4", "cidrIpv6", "prefixListId"} & inputs.keys(), "no address ranges, only groups"
        out.add((own, peer, inputs["fromPort"], inputs["toPort"]))
    return out


def test_security_group_allows_only_lustre_ports_with_nodes_and_itself(lustre):
    ports = {(988, 988), (1018, 1023)}
    assert _rules(lustre, INGRESS) == (
        {("lustre", peer, a, b) for peer in ("sg-nodes", "lustre") for a, b in ports}
        | {("sg-nodes", "lustre", a, b) for a, b in ports}  # Lustre servers call back to their clients
    )
    assert _rules(lustre, EGRESS) == {("lustre", peer, a, b) for peer in ("sg-nodes", "lustre") for a, b in ports}
    group = lustre.one(SG).inputs()
    assert group["vpcId"] == "vpc-1" and "ingress" not in group and "egress" not in group


def test_children_are_parented_and_on_the_provider(lustre):
    component = lustre.one("mlplat:storage:LustreScratch")
    [provider] = lustre.of_type("pulumi:providers:aws")
    custom = [r for r in lustre.registrations if r.custom and not r.is_provider]
    assert all(r.parent == component.urn and r.provider_urn == provider.urn for r in custom)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("storage_capacity_gib", 3600, "3600 GiB is not a PERSISTENT_2 capacity"),
    ("per_unit_storage_throughput", 200, "200 is not a PERSISTENT_2 throughput"),
])
def test_args_refuse_what_fsx_refuses(field, value, message):
    with pytest.raises(ValueError, match=message):
        args(**{field: value})


# --- whole stacks ---------------------------------------------------------------------


def test_lustre_only_where_the_stack_turns_it_on(stack_preview):
    file_systems = [r for r in stack_preview.registrations if r.type == FSX]
    assert len(file_systems) == (1 if stack_preview.stack in ("staging", "prod") else 0)


@pytest.mark.parametrize(("stack", "capacity", "throughput"), [("prod", 9600, 500), ("staging", 1200, 250)])
def test_lustre_sits_in_the_gpu_pools_zone(stack, capacity, throughput):
    from tests.conftest import preview

    result = preview(stack)
    [fs] = [r for r in result.registrations if r.type == FSX]
    [subnet_urn] = fs.property_dependencies["subnetIds"]
    subnet = result.by_urn[subnet_urn].inputs()
    assert subnet["availabilityZoneId"] == "mec1-az1"  # placementGroupZoneId of the stack's GPU pool
    assert subnet["mapPublicIpOnLaunch"] is False
    assert fs.inputs()["storageCapacity"] == capacity and fs.inputs()["perUnitStorageThroughput"] == throughput
    [key_urn] = fs.property_dependencies["kmsKeyId"]
    assert key_urn.endswith("::keys-datasets")
    [node_sg] = [r for r in result.registrations if r.type == SG and r.name == "network-nodes"]
    rules = [r for r in result.registrations if r.type == INGRESS and r.name.startswith("lustre-ingress-nodes")]
    assert rules and all(r.property_dependencies["referencedSecurityGroupId"] == [node_sg.urn] for r in rules)


def test_bad_throughput_is_exit_2_one_line_nothing_registered(tmp_path):
    text = (REPO / "stacks" / "Pulumi.staging.yaml").read_text()
    assert "perUnitStorageThroughput: 250" in text
    (tmp_path / "Pulumi.staging.yaml").write_text(text.replace("perUnitStorageThroughput: 250",
                                                               "perUnitStorageThroughput: 300"))
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "preview", "--stack", "staging", "--stacks-dir", str(tmp_path),
         "--json", str(report), "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"mlplat: error: {tmp_path / 'Pulumi.staging.yaml'}: mlplat:storage.lustre.perUnitStorageThroughput: 300 is "
        "not a PERSISTENT_2 throughput; allowed: 125, 250, 500, 1000 (MB/s per TiB)"
    ]
    assert not report.exists()
    assert "Traceback" not in done.stderr
