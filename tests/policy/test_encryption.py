"""Encryption at rest with customer-managed keys, service by service."""

from __future__ import annotations

from platform_policies import encryption as enc

from tests.policy.cases import KEY_ARN
from tests.policy.harness import NOT_APPLICABLE, check

LT = "aws:ec2/launchTemplate:LaunchTemplate"


def _root(encrypted: str = "true", key: str | None = KEY_ARN) -> dict:
    ebs = {"encrypted": encrypted, "volumeSize": 200, "volumeType": "gp3"}
    if key:
        ebs["kmsKeyId"] = key
    return {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": ebs}]}


def test_launch_template_block_devices_are_strings():
    assert check(enc.block_storage_encrypted_with_cmk, LT, _root()) == []
    [message] = check(enc.block_storage_encrypted_with_cmk, LT, _root(encrypted="false"), name="gpu")
    assert message == ("aws:ec2/launchTemplate:LaunchTemplate 'gpu': blockDeviceMappings[0].ebs.encrypted is 'false'; "
                       'set it to "true"')
    [message] = check(enc.block_storage_encrypted_with_cmk, LT, _root(key=None))
    assert "blockDeviceMappings[0].ebs.kmsKeyId" in message
    [message] = check(enc.block_storage_encrypted_with_cmk, LT, {"imageId": "ami-1"})
    assert "no EBS block device mapping" in message


def test_instances_and_node_groups():
    instance = {"rootBlockDevice": {"encrypted": True, "kmsKeyId": KEY_ARN},
                "ebsBlockDevices": [{"deviceName": "/dev/sdf", "encrypted": True}]}
    [message] = check(enc.block_storage_encrypted_with_cmk, "aws:ec2/instance:Instance", instance)
    assert "ebsBlockDevices[0].kmsKeyId" in message
    assert check(enc.block_storage_encrypted_with_cmk, "aws:eks/nodeGroup:NodeGroup",
                 {"launchTemplate": {"id": "lt-1", "version": "1"}}) == []
    assert check(enc.block_storage_encrypted_with_cmk, "aws:eks/nodeGroup:NodeGroup", {"diskSize": 100})
    assert check(enc.block_storage_encrypted_with_cmk, "aws:ebs/encryptionByDefault:EncryptionByDefault",
                 {"enabled": False})


def test_file_systems():
    lustre = "aws:fsx/lustreFileSystem:LustreFileSystem"
    [message] = check(enc.file_systems_encrypted_with_cmk, lustre, {"storageCapacity": 1200})
    assert "SCRATCH_1 (default)" in message
    assert check(enc.file_systems_encrypted_with_cmk, lustre, {"deploymentType": "PERSISTENT_2"})
    efs = "aws:efs/fileSystem:FileSystem"
    assert check(enc.file_systems_encrypted_with_cmk, efs, {"encrypted": True, "kmsKeyId": KEY_ARN}) == []
    assert len(check(enc.file_systems_encrypted_with_cmk, efs, {})) == 2
    assert check(enc.file_systems_encrypted_with_cmk, "aws:fsx/openZfsFileSystem:OpenZfsFileSystem", {})


def test_eks_secrets():
    cluster = "aws:eks/cluster:Cluster"
    wrong = {"encryptionConfig": {"resources": ["configmaps"], "provider": {"keyArn": KEY_ARN}}}
    [message] = check(enc.eks_secrets_encrypted_with_cmk, cluster, wrong)
    assert "must include \"secrets\"" in message


def test_logs_registries_databases_messaging():
    assert check(enc.logs_encrypted_with_cmk, "aws:cloudtrail/trail:Trail", {"kmsKeyId": KEY_ARN}) == []
    assert check(enc.logs_encrypted_with_cmk, "aws:cloudtrail/trail:Trail", {"s3BucketName": "audit"})
    repo = "aws:ecr/repository:Repository"
    [message] = check(enc.registries_encrypted_with_cmk, repo, {"name": "x"})
    assert "AWS-owned key" in message
    [message] = check(enc.registries_encrypted_with_cmk, repo, {"encryptionConfigurations": [{"encryptionType": "KMS"}]})
    assert "kmsKey" in message
    table = "aws:dynamodb/table:Table"
    assert check(enc.databases_encrypted_with_cmk, table,
                 {"serverSideEncryption": {"enabled": True, "kmsKeyArn": KEY_ARN}}) == []
    assert len(check(enc.databases_encrypted_with_cmk, table, {"hashKey": "id"})) == 2
    assert check(enc.databases_encrypted_with_cmk, "aws:elasticache/cluster:Cluster", {"engine": "memcached"})
    assert check(enc.databases_encrypted_with_cmk, "aws:elasticache/cluster:Cluster", {"replicationGroupId": "g"}) \
        == []
    assert check(enc.messaging_encrypted_with_cmk, "aws:sns/topic:Topic", {"kmsMasterKeyId": "alias/aws/sns"})


def test_rotation():
    key = "aws:kms/key:Key"
    assert check(enc.kms_keys_rotate, key, {}) != []
    assert check(enc.kms_keys_rotate, key, {"customerMasterKeySpec": "RSA_4096", "keyUsage": "SIGN_VERIFY"}) \
        == NOT_APPLICABLE
    assert check(enc.kms_keys_rotate, "aws:kms/externalKey:ExternalKey", {})
