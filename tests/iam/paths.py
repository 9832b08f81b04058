"""Every request path the platform relies on, and the abuses it must refuse: the one table
of what AWS must decide with the policies prod's cloud layer writes. Reviewed like code;
tests/iam/test_paths.py runs it through the real evaluator.

Names resolve against the stack (tests/iam/policies.py):
- principal: `role:<resource name>` (a role the stack creates, with its inline policies),
  a service principal (`logging.s3.amazonaws.com`), or an ARN;
- resource: `bucket:<purpose>` or `bucket:<purpose>/<key>` (with that bucket's policy),
  `key:<data class>` (with the key's policy), `trust:<role resource name>` (assuming it,
  against its trust policy), `secret:<admin|database|tenant>` (a tracking server secret,
  which has no resource policy), `cache:<group|tenant>` (the feature store's replication
  group, or a tenant's ElastiCache user: no resource policy either).

Where AWS's own managed policy gives a service-linked role its permission (the FSx and Auto
Scaling roles) or the account does (the deployer), we do not write it and cannot read it
offline: `service_grant` stands in an identity policy allowing exactly that request, so the
path shows whether the policies we write let the caller through. A service's later use of
a key through the grant it took is KMS's grant, which no policy decides: the table checks
that the grant can be taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ALLOWED, DENIED = "Allowed", "Denied"
OTHER_ACCOUNT = "999999999999"
FSX_SERVICE_ROLE = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-0"
AUTOSCALING_ROLE = "role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
# The role `pulumi up` runs as for the cloud layer (prod's cluster.deployerRole); its own
# permissions are the account's, not the stack's.
DEPLOYER = "arn:aws:iam::{account}:role/mlplat-deployer"
SSE = "s3:x-amz-server-side-encryption"
SSE_KEY = "s3:x-amz-server-side-encryption-aws-kms-key-id"


@dataclass(frozen=True)
class Path:
    name: str
    principal: str
    action: str
    resource: str
    expect: str  # ALLOWED or DENIED (explicitly or implicitly)
    context: Mapping[str, Any] = field(default_factory=dict)  # on top of TLS (aws:SecureTransport true)
    service_grant: bool = False


PATHS: tuple[Path, ...] = (
    # --- Buckets: the writes and reads the platform makes ---------------------------------
    Path("S3 server access logs reach the access-logs bucket", "logging.s3.amazonaws.com", "s3:PutObject",
         "bucket:access-logs/datasets/2026-11-24-00-00-00-0000", ALLOWED,
         {"aws:SourceAccount": "{account}", "aws:SourceArn": "arn:aws:s3:::{bucket:datasets}"}),
    Path("CloudTrail checks the audit bucket's ACL", "cloudtrail.amazonaws.com", "s3:GetBucketAcl", "bucket:audit",
         ALLOWED, {"aws:SourceArn": "{trail}"}),
    Path("CloudTrail writes its logs into the audit bucket", "cloudtrail.amazonaws.com", "s3:PutObject",
         "bucket:audit/cloudtrail/AWSLogs/{account}/CloudTrail/{region}/2026/11/24/log.json.gz", ALLOWED,
         {"aws:SourceArn": "{trail}", "s3:x-amz-acl": "bucket-owner-full-control", SSE: "aws:kms",
          SSE_KEY: "{key:logs}"}),
    Path("FSx exports to the datasets bucket, relying on default encryption", f"arn:aws:iam::{{account}}:{FSX_SERVICE_ROLE}",
         "s3:PutObject", "bucket:datasets/datasets/shard-0001.bin", ALLOWED, service_grant=True),
    Path("FSx imports from the datasets bucket", f"arn:aws:iam::{{account}}:{FSX_SERVICE_ROLE}", "s3:GetObject",
         "bucket:datasets/datasets/shard-0001.bin", ALLOWED, service_grant=True),
    Path("training pods read datasets", "role:training-gpt2-smoke-identity", "s3:GetObject",
         "bucket:datasets/datasets/shard-0001.bin", ALLOWED),
    Path("the checkpoint writer names the checkpoints key", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:checkpoints/research/gpt2/step-100/model.pt", ALLOWED, {SSE: "aws:kms", SSE_KEY: "{key:checkpoints}"}),
    Path("the checkpoint writer relies on default encryption", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:checkpoints/research/gpt2/step-100/model.pt", ALLOWED),
    Path("the serving publisher uploads a model with no encryption header", "role:training-gpt2-smoke-identity",
         "s3:PutObject", "bucket:models/triton/gpt2/1/model.onnx", ALLOWED),
    Path("the serving init container fetches the model repository", "role:inference-gpt-identity", "s3:GetObject",
         "bucket:models/triton/gpt2/1/model.onnx", ALLOWED),
    Path("the request logger writes its model's sampled requests", "role:inference-gpt-requests", "s3:PutObject",
         "bucket:datasets/request-logs/gpt/date=2026-11-24/200000-pod-1234abcd.parquet", ALLOWED,
         {SSE: "aws:kms", SSE_KEY: "{key:datasets}"}),
    Path("the drift check reads the model's request logs", "role:inference-gpt-drift", "s3:GetObject",
         "bucket:datasets/request-logs/gpt/date=2026-11-24/x.parquet", ALLOWED),
    Path("the drift check reads the training datasets (its reference)", "role:inference-gpt-drift", "s3:GetObject",
         "bucket:datasets/datasets/shard-0001.bin", ALLOWED),
    # --- Buckets: abuses -----------------------------------------------------------------
    Path("the drift check cannot change the request logs", "role:inference-gpt-drift", "s3:PutObject",
         "bucket:datasets/request-logs/gpt/date=2026-11-24/x.parquet", DENIED,
         {SSE: "aws:kms", SSE_KEY: "{key:datasets}"}),
    Path("the drift check cannot read another tenant's feature store", "role:inference-gpt-drift", "s3:GetObject",
         "bucket:datasets/features/research/registry.pb", DENIED),
    Path("the request logger cannot read back what it wrote", "role:inference-gpt-requests", "s3:GetObject",
         "bucket:datasets/request-logs/gpt/date=2026-11-24/x.parquet", DENIED),
    Path("the request logger cannot write the datasets", "role:inference-gpt-requests", "s3:PutObject",
         "bucket:datasets/datasets/shard-0001.bin", DENIED, {SSE: "aws:kms", SSE_KEY: "{key:datasets}"}),
    Path("training pods cannot read the request logs (the bucket keeps the prefix to its owner)",
         "role:training-gpt2-smoke-identity", "s3:GetObject", "bucket:datasets/request-logs/gpt/date=2026-11-24/x.parquet",
         DENIED),
    Path("plain HTTP is refused", "role:training-gpt2-smoke-identity", "s3:GetObject",
         "bucket:datasets/datasets/shard-0001.bin", DENIED, {"aws:SecureTransport": "false"}),
    Path("an upload under another key is refused", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:checkpoints/research/x.pt", DENIED, {SSE: "aws:kms", SSE_KEY: "{key:models}"}),
    Path("an upload with SSE-S3 is refused", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:checkpoints/research/x.pt", DENIED, {SSE: "AES256"}),
    Path("aws:kms without a key (S3 would use aws/s3) is refused", "role:training-gpt2-smoke-identity",
         "s3:PutObject", "bucket:checkpoints/research/x.pt", DENIED, {SSE: "aws:kms"}),
    Path("another account reads nothing", f"arn:aws:iam::{OTHER_ACCOUNT}:role/reader", "s3:GetObject",
         "bucket:datasets/datasets/shard-0001.bin", DENIED, service_grant=True),
    Path("training pods cannot change datasets", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:datasets/datasets/shard-0001.bin", DENIED),
    Path("the serving tenant's role cannot read the research tenant's datasets", "role:inference-gpt-identity",
         "s3:GetObject", "bucket:datasets/datasets/shard-0001.bin", DENIED),
    Path("the serving tenant's role cannot write the research tenant's checkpoints", "role:inference-gpt-identity",
         "s3:PutObject", "bucket:checkpoints/research/gpt2/step-100/model.pt", DENIED),
    Path("a pod using the node role reads no data", "role:nodes", "s3:GetObject",
         "bucket:datasets/datasets/shard-0001.bin", DENIED),
    Path("log delivery for a bucket of another account is refused", "logging.s3.amazonaws.com", "s3:PutObject",
         "bucket:access-logs/x", DENIED, {"aws:SourceAccount": OTHER_ACCOUNT, "aws:SourceArn": "arn:aws:s3:::elsewhere"}),
    Path("nobody but CloudTrail writes digest files", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:audit/cloudtrail/AWSLogs/{account}/CloudTrail-Digest/{region}/d.json.gz", DENIED, service_grant=True),
    # --- Keys: each service that uses them ----------------------------------------------
    Path("S3 encrypts request logs for the request logger", "role:inference-gpt-requests", "kms:GenerateDataKey",
         "key:datasets", ALLOWED, {"kms:ViaService": "s3.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
                                   "kms:EncryptionContext:aws:s3:arn":
                                       "arn:aws:s3:::{bucket:datasets}/request-logs/gpt/date=2026-11-24/x.parquet"}),
    Path("S3 encrypts checkpoints for the training role", "role:training-gpt2-smoke-identity", "kms:GenerateDataKey",
         "key:checkpoints", ALLOWED,
         {"kms:ViaService": "s3.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
          "kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::{bucket:checkpoints}/research/x.pt"}),
    Path("S3 decrypts datasets for the training role", "role:training-gpt2-smoke-identity", "kms:Decrypt",
         "key:datasets", ALLOWED,
         {"kms:ViaService": "s3.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
          "kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::{bucket:datasets}/datasets/shard-0001.bin"}),
    Path("S3 log delivery encrypts with the logs key", "logging.s3.amazonaws.com", "kms:GenerateDataKey",
         "key:logs", ALLOWED, {"aws:SourceAccount": "{account}", "aws:SourceArn": "arn:aws:s3:::{bucket:datasets}"}),
    Path("CloudTrail encrypts its logs", "cloudtrail.amazonaws.com", "kms:GenerateDataKey", "key:logs", ALLOWED,
         {"aws:SourceArn": "{trail}", "aws:SourceAccount": "{account}",
          "kms:EncryptionContext:aws:cloudtrail:arn": "{trail}"}),
    Path("CloudWatch Logs encrypts the workload logs", "logs.{region}.amazonaws.com", "kms:Encrypt", "key:logs",
         ALLOWED, {"kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:{region}:{account}:log-group:/mlplat/prod/x"}),
    Path("FSx writes Lustre data under the datasets key", f"arn:aws:iam::{{account}}:{FSX_SERVICE_ROLE}",
         "kms:GenerateDataKey", "key:datasets", ALLOWED,
         {"kms:ViaService": "s3.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
          "kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::{bucket:datasets}/datasets/shard-0001.bin"}),
    Path("Auto Scaling launches EBS volumes under the volumes key", f"arn:aws:iam::{{account}}:{AUTOSCALING_ROLE}",
         "kms:GenerateDataKeyWithoutPlaintext", "key:volumes", ALLOWED,
         {"kms:ViaService": "ec2.{region}.amazonaws.com", "kms:CallerAccount": "{account}"}),
    Path("Auto Scaling grants EC2 the volumes key for its volumes", f"arn:aws:iam::{{account}}:{AUTOSCALING_ROLE}",
         "kms:CreateGrant", "key:volumes", ALLOWED,
         {"kms:ViaService": "ec2.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
          "kms:GrantIsForAWSResource": "true"}),
    Path("the EBS CSI driver grants EC2 the volumes key for a volume", "role:core-addons-ebs-csi", "kms:CreateGrant",
         "key:volumes", ALLOWED, {"kms:ViaService": "ec2.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
                                  "kms:GrantIsForAWSResource": "true"}),
    Path("EKS takes its grant on the cluster key (secrets encryption)", DEPLOYER, "kms:CreateGrant", "key:cluster",
         ALLOWED, {"kms:ViaService": "eks.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
                   "kms:GrantIsForAWSResource": "true"}, service_grant=True),
    Path("ECR takes its grant on the images key for a repository", DEPLOYER, "kms:CreateGrant", "key:images",
         ALLOWED, {"kms:ViaService": "ecr.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
                   "kms:GrantIsForAWSResource": "true"}, service_grant=True),
    Path("the deploy runner reads its token through Secrets Manager", "role:deploy-runner-role", "kms:Decrypt",
         "key:cluster", ALLOWED, {"kms:ViaService": "secretsmanager.{region}.amazonaws.com",
                                  "kms:CallerAccount": "{account}"}),
    Path("RDS takes its grant on the tracking key for the database", DEPLOYER, "kms:CreateGrant", "key:tracking",
         ALLOWED, {"kms:ViaService": "rds.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
                   "kms:GrantIsForAWSResource": "true"}, service_grant=True),
    Path("Secrets Manager decrypts a tracking user for the training role", "role:training-gpt2-smoke-identity",
         "kms:Decrypt", "key:tracking", ALLOWED, {"kms:ViaService": "secretsmanager.{region}.amazonaws.com",
                                                  "kms:CallerAccount": "{account}"}),
    # --- The tracking server and its users ---------------------------------------------
    Path("the tracking server stores an artifact", "role:tracking-identity", "s3:PutObject",
         "bucket:models/mlflow/1/0123abcd/artifacts/dataset.json", ALLOWED),
    Path("the tracking server cannot change the Triton repository", "role:tracking-identity", "s3:PutObject",
         "bucket:models/triton/gpt/1/model.onnx", DENIED),
    Path("the tracking server reads the database password", "role:tracking-identity",
         "secretsmanager:GetSecretValue", "secret:database", ALLOWED),
    Path("the tracking server fills a tenant's empty secret", "role:tracking-identity",
         "secretsmanager:PutSecretValue", "secret:research", ALLOWED),
    Path("training pods read their tenant's tracking user", "role:training-gpt2-smoke-identity",
         "secretsmanager:GetSecretValue", "secret:research", ALLOWED),
    Path("training pods cannot read another tenant's tracking user", "role:training-gpt2-smoke-identity",
         "secretsmanager:GetSecretValue", "secret:applied", DENIED),
    Path("training pods cannot read the tracking admin", "role:training-gpt2-smoke-identity",
         "secretsmanager:GetSecretValue", "secret:admin", DENIED),
    Path("training pods cannot read the database password", "role:training-gpt2-smoke-identity",
         "secretsmanager:GetSecretValue", "secret:database", DENIED),
    Path("the training role cannot decrypt the tracking key outside Secrets Manager",
         "role:training-gpt2-smoke-identity", "kms:Decrypt", "key:tracking", DENIED,
         {"kms:CallerAccount": "{account}"}),
    # --- The feature store: each tenant's project through its own role ---------------------
    Path("a tenant's feature store reads its registry", "role:features-research-identity", "s3:GetObject",
         "bucket:datasets/features/research/registry.pb", ALLOWED),
    Path("a tenant's feature store writes a training dataset", "role:features-research-identity", "s3:PutObject",
         "bucket:datasets/features/research/datasets/churn/0123/data.parquet", ALLOWED),
    Path("a tenant's feature store cannot read another tenant's registry", "role:features-research-identity",
         "s3:GetObject", "bucket:datasets/features/applied/registry.pb", DENIED),
    Path("a tenant's feature store cannot write another tenant's sources", "role:features-research-identity",
         "s3:PutObject", "bucket:datasets/features/applied/customers/stats.parquet", DENIED),
    Path("a tenant's feature store cannot read the training shards", "role:features-research-identity",
         "s3:GetObject", "bucket:datasets/datasets/shard-0001.bin", DENIED),
    Path("a tenant's feature store lists its own prefix", "role:features-research-identity", "s3:ListBucket",
         "bucket:datasets", ALLOWED, {"s3:prefix": "features/research/datasets/"}),
    # HeadBucket (Feast's own S3 registry store checks it first) is ListBucket with no prefix:
    # refused, so the registry store reads the object alone (workloads/features/registry.py).
    Path("a tenant's feature store cannot list the whole datasets bucket", "role:features-research-identity",
         "s3:ListBucket", "bucket:datasets", DENIED),
    Path("another tenant's feature store cannot read a tenant's features", "role:features-applied-identity",
         "s3:GetObject", "bucket:datasets/features/research/customers/stats.parquet", DENIED),
    # The training roles read the whole datasets bucket; the bucket policy keeps them out of
    # every tenant's feature prefix, their own tenant's included.
    Path("a training role cannot read a tenant's features", "role:training-gpt2-smoke-identity", "s3:GetObject",
         "bucket:datasets/features/research/registry.pb", DENIED),
    Path("a training role still reads the training shards", "role:training-gpt2-smoke-identity", "s3:GetObject",
         "bucket:datasets/datasets/shard-0001.bin", ALLOWED),
    Path("the Lustre link cannot import a tenant's features", f"arn:aws:iam::{{account}}:{FSX_SERVICE_ROLE}",
         "s3:GetObject", "bucket:datasets/features/research/customers/stats.parquet", DENIED, service_grant=True),
    Path("S3 decrypts features for a tenant's feature store", "role:features-research-identity", "kms:Decrypt",
         "key:datasets", ALLOWED,
         {"kms:ViaService": "s3.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
          "kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::{bucket:datasets}/features/research/registry.pb"}),
    Path("a tenant's feature store connects to the online store", "role:features-research-identity",
         "elasticache:Connect", "cache:group", ALLOWED),
    Path("a tenant's feature store connects as its own user", "role:features-research-identity",
         "elasticache:Connect", "cache:research", ALLOWED),
    Path("a tenant's feature store cannot connect as another tenant's user", "role:features-research-identity",
         "elasticache:Connect", "cache:applied", DENIED),
    Path("the training role cannot connect to the online store", "role:training-gpt2-smoke-identity",
         "elasticache:Connect", "cache:research", DENIED),
    Path("EKS Pod Identity assumes a tenant's feature-store role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:features-research-identity", ALLOWED, {"aws:SourceAccount": "{account}"}),
    Path("ElastiCache takes its grant on the features key", DEPLOYER, "kms:CreateGrant", "key:features",
         ALLOWED, {"kms:ViaService": "elasticache.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
                   "kms:GrantIsForAWSResource": "true"}, service_grant=True),
    # --- Keys: abuses --------------------------------------------------------------------
    Path("a key administrator cannot decrypt with the key", "arn:aws:iam::{account}:role/key-admin", "kms:Decrypt",
         "key:datasets", DENIED, service_grant=True),
    Path("a grant for something other than an AWS resource is refused", "role:core-addons-ebs-csi",
         "kms:CreateGrant", "key:volumes", DENIED,
         {"kms:ViaService": "ec2.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
          "kms:GrantIsForAWSResource": "false"}),
    Path("the deploy runner cannot decrypt the cluster key outside Secrets Manager", "role:deploy-runner-role",
         "kms:Decrypt", "key:cluster", DENIED, {"kms:CallerAccount": "{account}"}),
    Path("the training role cannot decrypt outside S3", "role:training-gpt2-smoke-identity", "kms:Decrypt",
         "key:datasets", DENIED),
    Path("another account cannot use a key", f"arn:aws:iam::{OTHER_ACCOUNT}:role/user", "kms:Decrypt",
         "key:datasets", DENIED, {"kms:ViaService": "s3.{region}.amazonaws.com", "kms:CallerAccount": OTHER_ACCOUNT},
         service_grant=True),
    # --- Roles: who may assume them ------------------------------------------------------
    Path("EKS Pod Identity assumes the training role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:training-gpt2-smoke-identity", ALLOWED, {"aws:SourceAccount": "{account}"}),
    Path("EKS Pod Identity tags the training role's session", "pods.eks.amazonaws.com", "sts:TagSession",
         "trust:training-gpt2-smoke-identity", ALLOWED, {"aws:SourceAccount": "{account}"}),
    Path("EKS Pod Identity assumes the serving role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:inference-gpt-identity", ALLOWED, {"aws:SourceAccount": "{account}"}),
    Path("EC2 assumes the node role", "ec2.amazonaws.com", "sts:AssumeRole", "trust:nodes", ALLOWED),
    Path("EKS assumes the cluster role", "eks.amazonaws.com", "sts:AssumeRole", "trust:cluster-control-plane",
         ALLOWED),
    Path("EKS Pod Identity assumes the VPC CNI's role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:cluster-vpc-cni", ALLOWED, {"aws:SourceAccount": "{account}"}),
    Path("EKS Pod Identity assumes the EBS CSI driver's role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:core-addons-ebs-csi", ALLOWED, {"aws:SourceAccount": "{account}"}),
    Path("VPC flow logs assume their role", "vpc-flow-logs.amazonaws.com", "sts:AssumeRole", "trust:network-flow-logs",
         ALLOWED, {"aws:SourceAccount": "{account}",
                   "aws:SourceArn": "arn:aws:ec2:{region}:{account}:vpc-flow-log/fl-0123456789abcdef0"}),
    Path("the deploy project's CodeBuild assumes the deploy runner's role", "codebuild.amazonaws.com",
         "sts:AssumeRole", "trust:deploy-runner-role", ALLOWED,
         {"aws:SourceAccount": "{account}", "aws:SourceArn": "arn:aws:codebuild:{region}:{account}:project/mlplat-prod-deploy"}),
    Path("Pod Identity for another account's cluster cannot assume a pod's role", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:training-gpt2-smoke-identity", DENIED, {"aws:SourceAccount": OTHER_ACCOUNT}),
    Path("another account's flow logs cannot assume the flow-log role", "vpc-flow-logs.amazonaws.com",
         "sts:AssumeRole", "trust:network-flow-logs", DENIED,
         {"aws:SourceAccount": OTHER_ACCOUNT,
          "aws:SourceArn": f"arn:aws:ec2:{{region}}:{OTHER_ACCOUNT}:vpc-flow-log/fl-0123456789abcdef0"}),
    Path("another CodeBuild project cannot assume the deploy runner's role", "codebuild.amazonaws.com",
         "sts:AssumeRole", "trust:deploy-runner-role", DENIED,
         {"aws:SourceAccount": "{account}", "aws:SourceArn": "arn:aws:codebuild:{region}:{account}:project/other"}),
    Path("EC2 cannot assume a pod's role", "ec2.amazonaws.com", "sts:AssumeRole", "trust:training-gpt2-smoke-identity",
         DENIED),
    Path("a user of the account cannot assume a pod's role", "arn:aws:iam::{account}:role/developer", "sts:AssumeRole",
         "trust:training-gpt2-smoke-identity", DENIED, service_grant=True),
)
