"""One passing and one failing resource (or small stack) for every rule of the pack.

The same table drives the direct calls (tests/policy/test_rule_table.py) and the pack
process over gRPC (tests/policy/test_pack_grpc.py), so both prove every rule both ways.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

KEY_ARN = "arn:aws:kms:me-central-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ECR = "111122223333.dkr.ecr.me-central-1.amazonaws.com"
# The registry rules' setting in an AWS environment's policy config: its own account's ECR.
ACCOUNT_REGISTRY = {"allowedRegistries": [ECR]}
TAGS = {"data-classification": "restricted", "owner": "ml-platform"}


@dataclass(frozen=True)
class Case:
    rule: str
    type: str
    props: dict[str, Any]
    fails: bool
    name: str = "r"
    provider: dict[str, Any] | None = field(default_factory=lambda: {"region": "me-central-1"})
    # The rule's own settings (policies/config/<env>.json's entry for it); None: its defaults.
    config: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return f"{self.rule}:{'fail' if self.fails else 'pass'}:{self.name}"


# The restricted Pod Security profile's pod-level settings: non-root, the runtime's seccomp filter.
RESTRICTED_POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def _pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"containers": [container], "securityContext": RESTRICTED_POD_SECURITY, "automountServiceAccountToken": False,
            **spec}


def deployment(pod_spec: dict[str, Any], name: str = "app", namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}},
                                                                          "spec": pod_spec}},
    }


GOOD_CONTAINER = {
    "name": "app",
    "image": f"{ECR}/mlplat/serve:1.4.2@sha256:{'e' * 64}",
    "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}},
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]}},
}
# The restricted Pod Security profile, whole: non-root, the runtime's seccomp filter, no
# escalation, every capability dropped.
GOOD_POD = _pod(GOOD_CONTAINER)
GPU_CONTAINER = {**GOOD_CONTAINER, "resources": {"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 8}}}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
NAMESPACE = "kubernetes:core/v1:Namespace"


def namespace(name: str, level: str | None) -> dict[str, Any]:
    labels = {"pod-security.kubernetes.io/enforce": level} if level else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


DAEMONSET = "kubernetes:apps/v1:DaemonSet"
HELM = "kubernetes:helm.sh/v3:Release"
HELM_CHART = "kubernetes:helm.sh/v4:Chart"

RESOURCE_CASES: list[Case] = [
    # --- residency
    Case("aws-resources-in-allowed-regions", "aws:s3/bucket:Bucket", {"bucket": "b"}, False),
    Case("aws-resources-in-allowed-regions", "aws:s3/bucket:Bucket", {"bucket": "b", "region": "eu-west-1"}, True),
    Case("availability-zones-in-allowed-regions", "aws:ec2/subnet:Subnet", {"availabilityZoneId": "mec1-az2"}, False),
    Case("availability-zones-in-allowed-regions", "aws:ec2/subnet:Subnet", {"availabilityZoneId": "mes1-az1"}, True),
    Case("no-cross-region-replication", "aws:dynamodb/table:Table",
         {"replicas": [{"regionName": "me-central-1"}]}, False),
    Case("no-cross-region-replication", "aws:dynamodb/table:Table", {"replicas": [{"regionName": "eu-west-1"}]}, True),
    Case("dynamodb-single-region-tables", "aws:dynamodb/table:Table", {"hashKey": "id"}, False),
    # A replica in an allowed region still makes a global table.
    Case("dynamodb-single-region-tables", "aws:dynamodb/table:Table",
         {"replicas": [{"regionName": "me-central-1"}]}, True),
    Case("dynamodb-single-region-tables", "aws:dynamodb/globalTable:GlobalTable", {"name": "t"}, True, name="global"),
    Case("dynamodb-single-region-tables", "aws:dynamodb/tableReplica:TableReplica", {"globalTableArn": "arn"}, True,
         name="replica"),
    Case("no-data-paths-abroad", "aws:cloudwatch/eventTarget:EventTarget",
         {"rule": "r", "arn": "arn:aws:events:me-central-1:111122223333:event-bus/default"}, False),
    Case("no-data-paths-abroad", "aws:cloudwatch/eventTarget:EventTarget",
         {"rule": "r", "arn": "arn:aws:events:us-east-1:111122223333:event-bus/default"}, True),
    Case("kms-keys-single-region", "aws:kms/key:Key", {"multiRegion": False, "enableKeyRotation": True}, False),
    Case("kms-keys-single-region", "aws:kms/key:Key", {"multiRegion": True, "enableKeyRotation": True}, True),
    Case("no-global-edge-data-paths", "aws:cloudfront/distribution:Distribution",
         {"origins": [{"domainName": "api-123.me-central-1.elb.amazonaws.com", "originId": "api"}]}, False),
    Case("no-global-edge-data-paths", "aws:cloudfront/distribution:Distribution",
         {"origins": [{"domainName": "data.s3.me-central-1.amazonaws.com", "originId": "data"}]}, True),
    # --- encryption at rest
    Case("block-storage-encrypted-with-cmk", "aws:ebs/volume:Volume",
         {"encrypted": True, "kmsKeyId": KEY_ARN, "size": 100, "tags": TAGS}, False),
    Case("block-storage-encrypted-with-cmk", "aws:ebs/volume:Volume", {"encrypted": True, "size": 100}, True),
    Case("file-systems-encrypted-with-cmk", "aws:fsx/lustreFileSystem:LustreFileSystem",
         {"deploymentType": "PERSISTENT_2", "kmsKeyId": KEY_ARN}, False),
    Case("file-systems-encrypted-with-cmk", "aws:fsx/lustreFileSystem:LustreFileSystem",
         {"deploymentType": "SCRATCH_2"}, True),
    Case("eks-secrets-encrypted-with-cmk", "aws:eks/cluster:Cluster",
         {"encryptionConfig": {"resources": ["secrets"], "provider": {"keyArn": KEY_ARN}},
          "vpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": False}}, False),
    Case("eks-secrets-encrypted-with-cmk", "aws:eks/cluster:Cluster",
         {"vpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": False}}, True),
    Case("logs-encrypted-with-cmk", "aws:cloudwatch/logGroup:LogGroup", {"kmsKeyId": KEY_ARN}, False),
    Case("logs-encrypted-with-cmk", "aws:cloudwatch/logGroup:LogGroup", {"retentionInDays": 365}, True),
    Case("registries-encrypted-with-cmk", "aws:ecr/repository:Repository",
         {"encryptionConfigurations": [{"encryptionType": "KMS", "kmsKey": KEY_ARN}]}, False),
    Case("registries-encrypted-with-cmk", "aws:ecr/repository:Repository",
         {"encryptionConfigurations": [{"encryptionType": "AES256"}]}, True),
    Case("databases-encrypted-with-cmk", "aws:rds/instance:Instance",
         {"storageEncrypted": True, "kmsKeyId": KEY_ARN, "instanceClass": "db.r7g.large"}, False),
    Case("databases-encrypted-with-cmk", "aws:rds/instance:Instance",
         {"storageEncrypted": True, "kmsKeyId": "alias/aws/rds", "instanceClass": "db.r7g.large"}, True),
    Case("messaging-encrypted-with-cmk", "aws:sqs/queue:Queue", {"kmsMasterKeyId": KEY_ARN}, False),
    Case("messaging-encrypted-with-cmk", "aws:sqs/queue:Queue", {"sqsManagedSseEnabled": True}, True),
    Case("kms-keys-rotate", "aws:kms/key:Key", {"enableKeyRotation": True}, False),
    Case("kms-keys-rotate", "aws:kms/key:Key", {"enableKeyRotation": False}, True),
    # --- encryption in transit
    Case("load-balancer-listeners-tls", "aws:lb/listener:Listener",
         {"protocol": "HTTPS", "port": 443, "sslPolicy": "ELBSecurityPolicy-TLS13-1-2-2021-06"}, False),
    Case("load-balancer-listeners-tls", "aws:lb/listener:Listener",
         {"protocol": "HTTPS", "port": 443, "sslPolicy": "ELBSecurityPolicy-2016-08"}, True),
    Case("elasticache-encrypted-in-transit", "aws:elasticache/replicationGroup:ReplicationGroup",
         {"transitEncryptionEnabled": True, "atRestEncryptionEnabled": True, "kmsKeyId": KEY_ARN}, False),
    Case("elasticache-encrypted-in-transit", "aws:elasticache/replicationGroup:ReplicationGroup",
         {"transitEncryptionEnabled": False, "atRestEncryptionEnabled": True, "kmsKeyId": KEY_ARN}, True),
    # --- exposure
    Case("eks-endpoint-private", "aws:eks/cluster:Cluster",
         {"vpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": False}}, False),
    Case("eks-endpoint-private", "aws:eks/cluster:Cluster",
         {"vpcConfig": {"endpointPrivateAccess": True, "endpointPublicAccess": True,
                        "publicAccessCidrs": ["0.0.0.0/0"]}}, True),
    Case("no-public-ips-on-nodes", "aws:ec2/launchTemplate:LaunchTemplate",
         {"networkInterfaces": [{"associatePublicIpAddress": "false", "interfaceType": "efa"}]}, False),
    Case("no-public-ips-on-nodes", "aws:ec2/launchTemplate:LaunchTemplate",
         {"networkInterfaces": [{"associatePublicIpAddress": "true"}]}, True),
    # Judged on one resource, so `Analyze` refuses them before they exist (not only AnalyzeStack).
    Case("no-world-open-ports", "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
         {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0", "securityGroupId": "sg-1"}, True),
    Case("no-world-open-ports", "aws:ec2/securityGroup:SecurityGroup",
         {"vpcId": "vpc-1", "ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22,
                                         "cidrBlocks": ["0.0.0.0/0"]}]}, True),
    Case("no-world-open-ports", "aws:ec2/securityGroupRule:SecurityGroupRule",
         {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22, "ipv6CidrBlocks": ["::/0"],
          "securityGroupId": "sg-1"}, True),
    Case("no-world-open-ports", "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
         {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": "10.0.0.0/16", "securityGroupId": "sg-1"},
         False),
    Case("no-world-open-ports", "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
         {"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": "0.0.0.0/0", "securityGroupId": "sg-1"},
         False),
    Case("no-open-internet-egress", "aws:ec2/routeTable:RouteTable",
         {"vpcId": "vpc-1", "tags": {"mlplat.io/tier": "private"},
          "routes": [{"cidrBlock": "0.0.0.0/0", "natGatewayId": "nat-1"}]}, True, config={"restricted": True}),
    Case("no-open-internet-egress", "aws:ec2/routeTable:RouteTable",
         {"vpcId": "vpc-1", "tags": {"mlplat.io/tier": "private"},
          "routes": [{"cidrBlock": "0.0.0.0/0", "vpcEndpointId": "vpce-1"}]}, False, config={"restricted": True}),
    Case("s3-public-access-settings", "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
         {"bucket": "data", "blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
          "restrictPublicBuckets": False}, True),
    Case("s3-public-access-settings", "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
         {"bucket": "data", "blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
          "restrictPublicBuckets": True}, False),
    Case("s3-public-access-settings", "aws:s3/bucketAcl:BucketAcl", {"bucket": "data", "acl": "public-read"}, True),
    # EC2 refuses associatePublicIpAddress, even "false", on more than one interface.
    Case("no-public-ips-on-nodes", "aws:ec2/launchTemplate:LaunchTemplate",
         {"networkInterfaces": [{"networkCardIndex": 0, "interfaceType": "efa"},
                                {"networkCardIndex": 1, "interfaceType": "efa-only"}]}, False),
    Case("no-public-ips-on-nodes", "aws:ec2/launchTemplate:LaunchTemplate",
         {"networkInterfaces": [{"associatePublicIpAddress": "false", "interfaceType": "efa"},
                                {"associatePublicIpAddress": "false", "interfaceType": "efa-only"}]}, True),
    # --- databases: private, TLS only, in-region
    Case("databases-private-and-tls", "aws:rds/instance:Instance",
         {"engine": "postgres", "publiclyAccessible": False, "parameterGroupName": "mlplat-db-tls"}, False),
    Case("databases-private-and-tls", "aws:rds/instance:Instance",
         {"engine": "postgres", "publiclyAccessible": True, "parameterGroupName": "mlplat-db-tls"}, True),
    Case("databases-private-and-tls", "aws:rds/instance:Instance",
         {"engine": "postgres", "parameterGroupName": "default.postgres16"}, True),
    Case("databases-private-and-tls", "aws:rds/cluster:Cluster", {"engine": "aurora-postgresql"}, True),
    Case("databases-private-and-tls", "aws:rds/parameterGroup:ParameterGroup",
         {"family": "postgres16", "parameters": [{"name": "rds.force_ssl", "value": "1"}]}, False),
    Case("databases-private-and-tls", "aws:rds/parameterGroup:ParameterGroup",
         {"family": "postgres16", "parameters": [{"name": "rds.force_ssl", "value": "0"}]}, True),
    Case("databases-private-and-tls", "aws:rds/clusterParameterGroup:ClusterParameterGroup",
         {"family": "aurora-mysql8.0", "parameters": []}, True),
    Case("no-cross-region-replication", "aws:rds/instance:Instance",
         {"replicateSourceDb": "arn:aws:rds:me-central-1:111122223333:db:mlflow"}, False),
    Case("no-cross-region-replication", "aws:rds/instance:Instance",
         {"replicateSourceDb": "arn:aws:rds:eu-west-1:111122223333:db:mlflow"}, True),
    Case("no-cross-region-replication", "aws:rds/globalCluster:GlobalCluster",
         {"globalClusterIdentifier": "mlflow", "engine": "aurora-postgresql"}, True),
    Case("no-cross-region-replication", "aws:rds/snapshotCopy:SnapshotCopy",
         {"sourceDbSnapshotIdentifier": "mlflow-1", "targetDbSnapshotIdentifier": "mlflow-1-copy",
          "destinationRegion": "eu-west-1"}, True),
    Case("secrets-encrypted-with-cmk", "aws:secretsmanager/secret:Secret", {"kmsKeyId": KEY_ARN}, False),
    Case("secrets-encrypted-with-cmk", "aws:secretsmanager/secret:Secret", {"name": "db"}, True),
    Case("secrets-encrypted-with-cmk", "aws:secretsmanager/secret:Secret", {"kmsKeyId": "alias/aws/secretsmanager"},
         True),
    # --- Kubernetes
    Case("k8s-images-from-allowed-registries", DEPLOYMENT, deployment(GOOD_POD), False, provider=None,
         config=ACCOUNT_REGISTRY),
    Case("k8s-images-from-allowed-registries", DEPLOYMENT,
         deployment(_pod({**GOOD_CONTAINER, "image": "docker.io/library/nginx:1.27"})), True, provider=None,
         config=ACCOUNT_REGISTRY),
    Case("k8s-images-from-allowed-registries", DEPLOYMENT,
         deployment(_pod({**GOOD_CONTAINER, "image": f"999999999999.dkr.ecr.me-central-1.amazonaws.com/mlplat/serve"
                                                     f"@sha256:{'e' * 64}"})), True, provider=None,
         config=ACCOUNT_REGISTRY, name="another-account"),
    Case("k8s-images-pinned", DEPLOYMENT, deployment(GOOD_POD), False, provider=None),
    Case("k8s-images-pinned", DEPLOYMENT,
         deployment(_pod({**GOOD_CONTAINER, "image": f"{ECR}/mlplat/serve:latest"})), True, provider=None),
    Case("k8s-images-pinned", DEPLOYMENT,
         deployment(_pod({**GOOD_CONTAINER, "image": f"{ECR}/mlplat/serve:1.4.2"})), True, provider=None),
    Case("k8s-charts-from-allowed-registries", HELM_CHART,
         {"chart": f"oci://{ECR}/mlplat/prod/charts/kueue", "version": "0.18.2"}, False, provider=None,
         config=ACCOUNT_REGISTRY),
    Case("k8s-charts-from-allowed-registries", HELM_CHART,
         {"chart": "oci://registry.k8s.io/kueue/charts/kueue", "version": "0.18.2"}, True, provider=None),
    Case("k8s-charts-from-allowed-registries", HELM_CHART,
         {"chart": "kube-prometheus-stack", "version": "88.3.0",
          "repositoryOpts": {"repo": "https://prometheus-community.github.io/helm-charts"}}, True, provider=None),
    Case("k8s-containers-have-limits", DEPLOYMENT, deployment(GOOD_POD), False, provider=None),
    Case("k8s-containers-have-limits", DEPLOYMENT,
         deployment(_pod({**GOOD_CONTAINER, "resources": {"requests": {"cpu": "1"}}})), True, provider=None),
    Case("k8s-gpu-pods-use-limits-and-tolerate-taint", DEPLOYMENT,
         deployment(_pod(GPU_CONTAINER, tolerations=[GPU_TOLERATION])), False, provider=None),
    Case("k8s-gpu-pods-use-limits-and-tolerate-taint", DEPLOYMENT, deployment(_pod(GPU_CONTAINER)), True,
         provider=None),
    Case("k8s-pod-security-standards", DEPLOYMENT, deployment(GOOD_POD), False, provider=None),
    Case("k8s-pod-security-standards", DEPLOYMENT, deployment({**GOOD_POD, "hostNetwork": True}), True,
         provider=None),
    Case("k8s-namespaces-enforce-pod-security", NAMESPACE, namespace("team-a", "restricted"), False, provider=None),
    Case("k8s-namespaces-enforce-pod-security", NAMESPACE, namespace("team-a", None), True, provider=None),
    Case("k8s-namespaces-enforce-pod-security", NAMESPACE, namespace("monitoring", "privileged"), True,
         provider=None, name="weaker-without-an-entry"),
    Case("k8s-namespaces-enforce-pod-security", NAMESPACE, namespace("monitoring", "privileged"), False,
         provider=None, name="weaker-with-an-entry", config={"weakerNamespaces": [
             {"namespace": "monitoring", "level": "privileged", "reason": "node exporter: host namespaces"}]}),
    Case("k8s-namespaces-enforce-pod-security", NAMESPACE, namespace("monitoring", "privileged"), True,
         provider=None, name="weaker-than-its-entry", config={"weakerNamespaces": [
             {"namespace": "monitoring", "level": "baseline", "reason": "node exporter: host namespaces"}]}),
    Case("k8s-no-workloads-in-default-namespace", DEPLOYMENT, deployment(GOOD_POD), False, provider=None),
    Case("k8s-no-workloads-in-default-namespace", DEPLOYMENT, deployment(GOOD_POD, namespace="default"), True,
         provider=None),
    Case("k8s-service-account-tokens-where-needed", DEPLOYMENT, deployment(GOOD_POD), False, provider=None),
    Case("k8s-service-account-tokens-where-needed", DEPLOYMENT,
         deployment({**GOOD_POD, "automountServiceAccountToken": True}), False, provider=None, name="says-it-needs-one"),
    Case("k8s-service-account-tokens-where-needed", DEPLOYMENT,
         deployment({k: v for k, v in GOOD_POD.items() if k != "automountServiceAccountToken"}), True, provider=None),
    Case("no-external-access", "aws:kms/key:Key", {"policy": json.dumps({"Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "kms:Decrypt", "Resource": "*",
        "Condition": {"StringEquals": {"kms:CallerAccount": "111122223333",
                                       "kms:ViaService": "s3.me-central-1.amazonaws.com"}}}]})}, False,
         config={"trustedAccounts": ["111122223333"]}),
    Case("no-external-access", "aws:kms/key:Key", {"policy": json.dumps({"Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "kms:*", "Resource": "*"}]})}, True,
         config={"trustedAccounts": ["111122223333"]}),
    # --- the feature server stays in the cluster
    Case("feature-server-in-cluster", "kubernetes:core/v1:Service", {
        "metadata": {"name": "feature-server", "namespace": "research",
                     "labels": {"app.kubernetes.io/part-of": "mlplat-features"}},
        "spec": {"type": "ClusterIP", "ports": [{"port": 6566}]}}, False, provider=None),
    Case("feature-server-in-cluster", "kubernetes:core/v1:Service", {
        "metadata": {"name": "feature-server", "namespace": "research"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 6566}]}}, True, provider=None),
    Case("feature-server-in-cluster", "kubernetes:networking.k8s.io/v1:Ingress", {
        "metadata": {"name": "features", "namespace": "research"},
        "spec": {"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                "backend": {"service": {"name": "feature-server"}}}]}}]}},
         True, name="ingress", provider=None),
    Case("feature-server-in-cluster", "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", {
        "metadata": {"name": "features", "namespace": "research"},
        "spec": {"rules": [{"backendRefs": [{"name": "feature-server", "port": 6566}]}]}},
         True, name="route", provider=None),
    # --- tags
    Case("storage-and-compute-tagged", "aws:efs/fileSystem:FileSystem", {"encrypted": True, "kmsKeyId": KEY_ARN},
         False, provider={"region": "me-central-1", "defaultTags": json.dumps({"tags": TAGS})}),
    Case("storage-and-compute-tagged", "aws:efs/fileSystem:FileSystem",
         {"encrypted": True, "kmsKeyId": KEY_ARN, "tags": {"owner": "ml-platform"}}, True),
]


@dataclass(frozen=True)
class StackResource:
    type: str
    name: str
    props: dict[str, Any]
    # property -> (type, name) of the other resources in the same case it depends on
    depends: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


@dataclass(frozen=True)
class StackCase:
    rule: str
    resources: list[StackResource]
    fails: bool
    # (type, name) of the resource the violation is reported on, when the case fails
    culprit: tuple[str, str] | None = None
    config: dict[str, Any] | None = None  # the rule's own settings, as in Case

    @property
    def id(self) -> str:
        return f"{self.rule}:{'fail' if self.fails else 'pass'}"


BUCKET = "aws:s3/bucket:Bucket"
SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
LB = "aws:lb/loadBalancer:LoadBalancer"


def sse(algorithm: str = "aws:kms", key: str | None = KEY_ARN) -> dict[str, Any]:
    default: dict[str, Any] = {"sseAlgorithm": algorithm}
    if key is not None:
        default["kmsMasterKeyId"] = key
    return {"bucket": "data", "rules": [{"applyServerSideEncryptionByDefault": default, "bucketKeyEnabled": True}]}


def tls_policy(bucket: str = "data", secure: str = "false") -> dict[str, Any]:
    arn = f"arn:aws:s3:::{bucket}"
    return {"bucket": bucket, "policy": json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [arn, f"{arn}/*"], "Condition": {"Bool": {"aws:SecureTransport": secure}}}]})}


def access_block(**overrides: bool) -> dict[str, Any]:
    flags = {"blockPublicAcls": True, "blockPublicPolicy": True, "ignorePublicAcls": True,
             "restrictPublicBuckets": True, **overrides}
    return {"bucket": "data", **flags}


def ingress(port: int, cidr: str = "0.0.0.0/0") -> dict[str, Any]:
    return {"ipProtocol": "tcp", "fromPort": port, "toPort": port, "cidrIpv4": cidr, "securityGroupId": "sg-1"}


DATA_BUCKET = StackResource(BUCKET, "data", {"bucket": "data"})

STACK_CASES: list[StackCase] = [
    StackCase("s3-buckets-encrypted-with-cmk",
              [DATA_BUCKET, StackResource(SSE, "data", sse(), {"bucket": [(BUCKET, "data")]})], False),
    StackCase("s3-buckets-encrypted-with-cmk",
              [DATA_BUCKET, StackResource(SSE, "data", sse("AES256", None), {"bucket": [(BUCKET, "data")]})], True,
              culprit=(SSE, "data")),
    StackCase("s3-buckets-tls-only", [DATA_BUCKET, StackResource(POLICY, "data", tls_policy(), {"bucket": [(BUCKET, "data")]})],
              False),
    StackCase("s3-buckets-tls-only",
              [DATA_BUCKET, StackResource(POLICY, "data", tls_policy(secure="true"), {"bucket": [(BUCKET, "data")]})], True,
              culprit=(BUCKET, "data")),
    StackCase("s3-buckets-block-public-access",
              [DATA_BUCKET, StackResource(PAB, "data", access_block(), {"bucket": [(BUCKET, "data")]})], False),
    StackCase("s3-buckets-block-public-access", [DATA_BUCKET], True, culprit=(BUCKET, "data")),
    StackCase("no-world-open-ingress",
              [StackResource(SG, "alb", {"vpcId": "vpc-1"}),
               StackResource(LB, "alb", {"loadBalancerType": "application", "internal": False},
                             {"securityGroups": [(SG, "alb")]}),
               StackResource(INGRESS, "https", ingress(443), {"securityGroupId": [(SG, "alb")]})], False),
    StackCase("no-world-open-ingress",
              [StackResource(SG, "nodes", {"vpcId": "vpc-1"}),
               StackResource(INGRESS, "https", ingress(443), {"securityGroupId": [(SG, "nodes")]})], True,
              culprit=(INGRESS, "https")),
    # SSH is no-world-open-ports' to refuse, on the rule itself: not reported twice.
    StackCase("no-world-open-ingress",
              [StackResource(SG, "nodes", {"vpcId": "vpc-1"}),
               StackResource(INGRESS, "ssh", ingress(22), {"securityGroupId": [(SG, "nodes")]})], False),
]


# --- A stack on a customer's own in-country cluster (issue 21) -------------------------------
# Its rules judge only where the config says deployment: customer-cluster (policies/config/
# onprem.json); images and charts come from the customer's registry through the Kubernetes
# rules, with that registry allowed instead of the in-region ECR.

HARBOR = "harbor.dc1.example.ae"
OBJECT_STORE = "https://s3.dc1.example.ae"
CUSTOMER = {"deployment": "customer-cluster"}
ENDPOINTS = {**CUSTOMER, "allowedEndpoints": [OBJECT_STORE]}
CUSTOMER_REGISTRY = {"allowedRegistries": [f"{HARBOR}/mlplat/onprem"]}
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SECRET = "kubernetes:core/v1:Secret"
SERVICE = "kubernetes:core/v1:Service"
K8S_INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
GATEWAY = "kubernetes:gateway.networking.k8s.io/v1:Gateway"
GATEWAY_CLASS = "kubernetes:gateway.networking.k8s.io/v1:GatewayClass"
ENVOY_PROXY = "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy"
CLUSTER_POLICY = "kubernetes:nvidia.com/v1:ClusterPolicy"
NIC_CLUSTER_POLICY = "kubernetes:mellanox.com/v1alpha1:NicClusterPolicy"
K8S_PROVIDER = "pulumi:providers:kubernetes"

HARBOR_CONTAINER = {**GOOD_CONTAINER, "image": f"{HARBOR}/mlplat/onprem/serve:1.4.2@sha256:{'e' * 64}"}
HARBOR_MIRROR = f"{HARBOR}/mlplat/onprem/mirror"


def with_env(container: dict[str, Any], **env: str) -> dict[str, Any]:
    return {**container, "env": [{"name": k, "value": v} for k, v in env.items()]}


def config_map(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data}


def feature_store(endpoint: str) -> dict[str, Any]:
    text = (f"project: research\nprovider: local\nregistry:\n  path: s3://features/research/registry.pb\n"
            f"offline_store:\n  type: file\n  s3_endpoint_override: {endpoint}\n")
    return config_map("feature-store", "research", {"feature_store.yaml": text})


def platform_config_map(**data: str) -> dict[str, Any]:
    return config_map("mlplat-platform", "mlplat-system", data)


STATED = {"objectStore.endpoint": OBJECT_STORE,
          "objectStore.encryptionAtRest": "Ceph RGW SSE-S3, keys in the customer's HashiCorp Vault"}


def service(service_type: str = "ClusterIP", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "triton", "namespace": "inference"},
            "spec": {"type": service_type, "selector": {"app": "triton"}, "ports": [{"port": 8001}], **spec}}


def envoy_proxy(service_spec: dict[str, Any] | None) -> dict[str, Any]:
    kubernetes: dict[str, Any] = {"envoyDeployment": {"replicas": 2}}
    if service_spec is not None:
        kubernetes["envoyService"] = service_spec
    return {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
            "metadata": {"name": "mlplat-proxy", "namespace": "envoy-gateway-system"},
            "spec": {"provider": {"type": "Kubernetes", "kubernetes": kubernetes}}}


def gateway_class(parameters: dict[str, Any] | None,
                  controller: str = "gateway.envoyproxy.io/gatewayclass-controller") -> dict[str, Any]:
    spec: dict[str, Any] = {"controllerName": controller}
    if parameters is not None:
        spec["parametersRef"] = parameters
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "mlplat-envoy"}, "spec": spec}


PROXY_REF = {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": "mlplat-proxy",
             "namespace": "envoy-gateway-system"}


def cluster_policy(**components: dict[str, Any]) -> dict[str, Any]:
    """A ClusterPolicy as the GPU Operator chart renders it: every component listed with an
    image, most switched off."""
    spec: dict[str, Any] = {
        "operator": {"defaultRuntime": "containerd"},
        "sandboxWorkloads": {"enabled": False},
        "sandboxDevicePlugin": {"repository": "nvcr.io/nvidia", "image": "kubevirt-gpu-device-plugin",
                                "version": "v1.5.0"},
        "gds": {"enabled": False, "repository": "nvcr.io/nvidia/cloud-native", "image": "nvidia-fs",
                "version": "2.27.3"},
        "driver": {"enabled": True, "repository": HARBOR_MIRROR, "image": "driver",
                   "version": f"580.126.20@sha256:{'a' * 64}",
                   "manager": {"repository": HARBOR_MIRROR, "image": "k8s-driver-manager",
                               "version": f"sha256:{'b' * 64}"}},
        **components,
    }
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": spec}


def daemon_set(pod: dict[str, Any], name: str = "rdma-shared-dp", namespace: str = "nvidia-network-operator"):
    return {**deployment(pod, name, namespace), "kind": "DaemonSet"}


CUSTOMER_CASES: list[Case] = [
    # Images and charts only from the customer's registry (a repository prefix of it: other
    # projects of the registry, e.g. a proxy cache of Docker Hub, are not allowed).
    Case("k8s-images-from-allowed-registries", DEPLOYMENT, deployment(_pod(HARBOR_CONTAINER)), False, name="harbor",
         provider=None, config=CUSTOMER_REGISTRY),
    Case("k8s-images-from-allowed-registries", DEPLOYMENT, deployment(GOOD_POD), True, name="ecr-on-a-customer-cluster",
         provider=None, config=CUSTOMER_REGISTRY),
    Case("k8s-images-from-allowed-registries", DEPLOYMENT,
         deployment(_pod({**HARBOR_CONTAINER, "image": f"{HARBOR}/dockerhub-proxy/library/nginx@sha256:{'e' * 64}"})),
         True, name="harbor-proxy-cache", provider=None, config=CUSTOMER_REGISTRY),
    Case("k8s-charts-from-allowed-registries", HELM_CHART,
         {"chart": f"oci://{HARBOR}/mlplat/onprem/charts/network-operator", "version": "26.4.1"}, False, name="harbor",
         provider=None, config=CUSTOMER_REGISTRY),
    Case("k8s-charts-from-allowed-registries", HELM,
         {"chart": "network-operator", "version": "26.4.1", "repositoryOpts": {"repo": "https://helm.ngc.nvidia.com/nvidia"}},
         True, name="ngc", provider=None, config=CUSTOMER_REGISTRY),
    # The GPU Operator pulls what its ClusterPolicy names: judged on the components it deploys.
    Case("k8s-images-from-allowed-registries", CLUSTER_POLICY, cluster_policy(), False, name="cluster-policy",
         provider=None, config=CUSTOMER_REGISTRY),
    Case("k8s-images-from-allowed-registries", CLUSTER_POLICY,
         cluster_policy(toolkit={"enabled": True, "repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit",
                                 "version": "v1.19.1"}), True, name="cluster-policy-toolkit-from-ngc",
         provider=None, config=CUSTOMER_REGISTRY),
    Case("k8s-images-pinned", NIC_CLUSTER_POLICY,
         {"apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy", "metadata": {"name": "nic-cluster-policy"},
          "spec": {"ofedDriver": {"image": "doca-driver", "repository": HARBOR_MIRROR, "version": f"sha256:{'c' * 64}"}}},
         False, name="nic-cluster-policy", provider=None),
    Case("k8s-images-pinned", NIC_CLUSTER_POLICY,
         {"apiVersion": "mellanox.com/v1alpha1", "kind": "NicClusterPolicy", "metadata": {"name": "nic-cluster-policy"},
          "spec": {"rdmaSharedDevicePlugin": {"image": "k8s-rdma-shared-dev-plugin", "repository": HARBOR_MIRROR,
                                              "version": "v1.5.3"}}},
         True, name="nic-cluster-policy-by-tag", provider=None),
    # No AWS resource at all: every resource is judged, AWS ones fail.
    Case("no-aws-resources-on-customer-cluster", SERVICE, service(), False, provider=None, config=CUSTOMER),
    Case("no-aws-resources-on-customer-cluster", "aws:s3/bucket:Bucket", {"bucket": "data"}, True, config=CUSTOMER),
    Case("no-aws-resources-on-customer-cluster", "pulumi:providers:aws", {"region": "me-central-1"}, True,
         name="aws-provider", provider=None, config=CUSTOMER),
    # Object-store endpoints only from the allow-list, over TLS.
    Case("object-store-endpoints-allowed", DEPLOYMENT,
         deployment(_pod(with_env(HARBOR_CONTAINER, AWS_ENDPOINT_URL_S3=OBJECT_STORE, MLPLAT_ARTIFACTS="s3://models/mlflow"))),
         False, provider=None, config=ENDPOINTS),
    Case("object-store-endpoints-allowed", DEPLOYMENT,
         deployment(_pod(with_env(HARBOR_CONTAINER, MLFLOW_S3_ENDPOINT_URL="http://s3.dc1.example.ae"))),
         True, name="plain-http", provider=None, config=ENDPOINTS),
    Case("object-store-endpoints-allowed", DEPLOYMENT,
         deployment(_pod(with_env(HARBOR_CONTAINER, AWS_ENDPOINT_URL="https://minio.elsewhere.example.com"))),
         True, name="not-allowed", provider=None, config=ENDPOINTS),
    Case("object-store-endpoints-allowed", DEPLOYMENT,
         deployment(_pod({**HARBOR_CONTAINER, "args": ["mlflow", "server", "--artifacts-destination", "s3://models/mlflow"]})),
         True, name="s3-without-endpoint", provider=None, config=ENDPOINTS),
    Case("object-store-endpoints-allowed", CONFIG_MAP, feature_store(OBJECT_STORE), False, name="feature-store",
         provider=None, config=ENDPOINTS),
    Case("object-store-endpoints-allowed", CONFIG_MAP, feature_store("https://s3.amazonaws.com"), True,
         name="feature-store-to-aws", provider=None, config=ENDPOINTS),
    # Nothing exposed outside the cluster.
    Case("nothing-exposed-outside-the-cluster", SERVICE, service(), False, provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", SERVICE, service("LoadBalancer"), True, name="load-balancer",
         provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", SERVICE, service("NodePort"), True, name="node-port", provider=None,
         config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", K8S_INGRESS, {
        "metadata": {"name": "mlflow", "namespace": "mlflow"},
        "spec": {"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                "backend": {"service": {"name": "mlflow", "port": {"number": 5000}}}}]}}]}},
         True, name="ingress", provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", ENVOY_PROXY, envoy_proxy({"type": "ClusterIP"}), False,
         name="envoy-proxy", provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", ENVOY_PROXY, envoy_proxy(None), True, name="envoy-proxy-default",
         provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", GATEWAY_CLASS, gateway_class(PROXY_REF), False, name="gateway-class",
         provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", GATEWAY_CLASS, gateway_class(None), True,
         name="gateway-class-without-proxy", provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", DAEMONSET, daemon_set({**GOOD_POD, "hostNetwork": True}), True,
         name="host-network", provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", DEPLOYMENT,
         deployment(_pod({**HARBOR_CONTAINER, "ports": [{"containerPort": 9100, "hostPort": 9100}]})), True,
         name="host-port", provider=None, config=CUSTOMER),
    Case("nothing-exposed-outside-the-cluster", CLUSTER_POLICY,
         cluster_policy(dcgmExporter={"enabled": True, "repository": HARBOR_MIRROR, "image": "dcgm-exporter",
                                      "version": f"sha256:{'d' * 64}", "hostNetwork": True}),
         True, name="cluster-policy-host-network", provider=None, config=CUSTOMER),
    # The object store's encryption at rest, stated and named.
    Case("object-store-encryption-named", CONFIG_MAP, platform_config_map(**STATED), False, provider=None,
         config=CUSTOMER),
    Case("object-store-encryption-named", CONFIG_MAP,
         platform_config_map(**{**STATED, "objectStore.encryptionAtRest": "none"}), True, name="none", provider=None,
         config=CUSTOMER),
    Case("object-store-encryption-named", CONFIG_MAP, platform_config_map(**{"objectStore.endpoint": OBJECT_STORE}),
         True, name="unstated", provider=None, config=CUSTOMER),
]
RESOURCE_CASES += CUSTOMER_CASES

K8S_CLUSTER = StackResource(K8S_PROVIDER, "cluster", {"kubeconfig": "{}", "context": "dc1"})
STACK_CASES += [
    StackCase("object-store-encryption-stated",
              [K8S_CLUSTER, StackResource(CONFIG_MAP, "platform", platform_config_map(**STATED))], False,
              config=CUSTOMER),
    StackCase("object-store-encryption-stated",
              [K8S_CLUSTER, StackResource(CONFIG_MAP, "feature-store", feature_store(OBJECT_STORE))], True,
              culprit=(K8S_PROVIDER, "cluster"), config=CUSTOMER),
]
