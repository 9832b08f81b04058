"""Every request path the platform relies on, and the abuses it must refuse: the one table
of what AWS must decide with the policies prod's cloud layer writes. Reviewed like code;
tests/iam/test_paths.py runs it through the real evaluator, and a preview diff runs it on
both sides of a change (infra/preview/request_paths.py), with each tenant's generated paths
(`tenant_paths`).

Names resolve against the stack (infra/checks/iam/stack.py):
- principal: `role:<resource name>` (a role the stack creates, with its inline policies),
  a service principal (`logging.s3.amazonaws.com`), or an ARN;
- resource: `bucket:<purpose>` or `bucket:<purpose>/<key>` (with that bucket's policy),
  `key:<data class>` (with the key's policy), `trust:<role resource name>` (assuming it,
  against its trust policy), `secret:<admin|database|tenant|pipelines/tenant>` (a tracking
  server secret, or a tenant's pipeline-engine database secret: no resource policy), `cache:<group|tenant>` (the feature store's replication
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


def pod(namespace: str, service_account: str) -> dict[str, str]:
    """What EKS Pod Identity's request carries when it assumes a role for a pod: the
    account, and the session tags naming the pod's namespace and service account."""
    return {"aws:SourceAccount": "{account}", "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account}


@dataclass(frozen=True)
class Path:
    name: str
    principal: str
    action: str
    resource: str
    expect: str  # ALLOWED or DENIED (explicitly or implicitly); "" for no expectation (compared only)
    context: Mapping[str, Any] = field(default_factory=dict)  # on top of TLS (aws:SecureTransport true)
    service_grant: bool = False
    tenant: str = ""  # a generated path: the tenant whose data it asks for


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
    Path("training pods read their tenant's datasets", "role:training-gpt2-smoke-identity", "s3:GetObject",
         "bucket:datasets/research/tokens/shard-0001.bin", ALLOWED),
    Path("training pods list their tenant's datasets", "role:training-gpt2-smoke-identity", "s3:ListBucket",
         "bucket:datasets", ALLOWED, {"s3:prefix": "research/tokens/"}),
    Path("the checkpoint writer names the checkpoints key", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:checkpoints/runs/research/0123abcd/step-100/model.pt", ALLOWED,
         {SSE: "aws:kms", SSE_KEY: "{key:checkpoints}"}),
    Path("the checkpoint writer relies on default encryption", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:checkpoints/runs/research/0123abcd/step-100/model.pt", ALLOWED),
    Path("a resumed run reads its tenant's checkpoint", "role:training-gpt2-smoke-identity", "s3:GetObject",
         "bucket:checkpoints/runs/research/0123abcd/step-100/model.pt", ALLOWED),
    Path("the publisher (CI, as the deployer) uploads a model with no encryption header", DEPLOYER,
         "s3:PutObject", "bucket:models/triton/gpt2/1/model.onnx", ALLOWED, service_grant=True),
    Path("the publisher reads the checkpoint it exports", DEPLOYER, "s3:GetObject",
         "bucket:checkpoints/runs/research/0123abcd/step-100/model.pt", ALLOWED, service_grant=True),
    Path("the serving init container fetches the model repository", "role:inference-gpt-identity", "s3:GetObject",
         "bucket:models/triton/gpt2/1/model.onnx", ALLOWED),
    Path("the request logger writes its model's sampled requests", "role:inference-gpt-requests", "s3:PutObject",
         "bucket:datasets/request-logs/gpt/date=2026-11-24/200000-pod-1234abcd.parquet", ALLOWED,
         {SSE: "aws:kms", SSE_KEY: "{key:datasets}"}),
    Path("the drift check reads the model's request logs", "role:inference-gpt-drift", "s3:GetObject",
         "bucket:datasets/request-logs/gpt/date=2026-11-24/x.parquet", ALLOWED),
    Path("the drift check reads its tenant's datasets (its reference)", "role:inference-gpt-drift", "s3:GetObject",
         "bucket:datasets/serving/tokens/shard-0001.bin", ALLOWED),
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
         "bucket:checkpoints/runs/research/x.pt", DENIED, {SSE: "aws:kms", SSE_KEY: "{key:models}"}),
    Path("an upload with SSE-S3 is refused", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:checkpoints/runs/research/x.pt", DENIED, {SSE: "AES256"}),
    Path("aws:kms without a key (S3 would use aws/s3) is refused", "role:training-gpt2-smoke-identity",
         "s3:PutObject", "bucket:checkpoints/runs/research/x.pt", DENIED, {SSE: "aws:kms"}),
    Path("another account reads nothing", f"arn:aws:iam::{OTHER_ACCOUNT}:role/reader", "s3:GetObject",
         "bucket:datasets/research/tokens/shard-0001.bin", DENIED, service_grant=True),
    Path("training pods cannot change datasets", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:datasets/research/tokens/shard-0001.bin", DENIED),
    Path("the serving pods' role cannot read the research tenant's datasets", "role:inference-gpt-identity",
         "s3:GetObject", "bucket:datasets/research/tokens/shard-0001.bin", DENIED),
    Path("the serving pods' role cannot write the research tenant's checkpoints", "role:inference-gpt-identity",
         "s3:PutObject", "bucket:checkpoints/runs/research/0123abcd/step-100/model.pt", DENIED),
    Path("a pod using the node role reads no data", "role:nodes", "s3:GetObject",
         "bucket:datasets/research/tokens/shard-0001.bin", DENIED),
    # --- One tenant's roles on another's data, models and runs ---------------------------
    Path("a training role cannot read another tenant's datasets", "role:training-gpt2-smoke-identity",
         "s3:GetObject", "bucket:datasets/applied/tokens/shard-0001.bin", DENIED),
    Path("a training role cannot list another tenant's datasets", "role:training-gpt2-smoke-identity",
         "s3:ListBucket", "bucket:datasets", DENIED, {"s3:prefix": "applied/"}),
    Path("a training role cannot list the whole datasets bucket", "role:training-gpt2-smoke-identity",
         "s3:ListBucket", "bucket:datasets", DENIED),
    Path("a training role cannot list every tenant's runs (what the store scope check asks)",
         "role:training-gpt2-smoke-identity", "s3:ListBucket", "bucket:checkpoints", DENIED, {"s3:prefix": "runs/"}),
    Path("a training role lists its own runs", "role:training-gpt2-smoke-identity", "s3:ListBucket",
         "bucket:checkpoints", ALLOWED, {"s3:prefix": "runs/research/"}),
    Path("a training role cannot list its name without the slash (that lists runs/research-2/ too)",
         "role:training-gpt2-smoke-identity", "s3:ListBucket", "bucket:checkpoints", DENIED,
         {"s3:prefix": "runs/research"}),
    Path("the drift role cannot list its model's name without the slash (that lists gpt2's logs too)",
         "role:inference-gpt-drift", "s3:ListBucket", "bucket:datasets", DENIED, {"s3:prefix": "request-logs/gpt"}),
    Path("a training role cannot read datasets outside any tenant's prefix", "role:training-gpt2-smoke-identity",
         "s3:GetObject", "bucket:datasets/shared/shard-0001.bin", DENIED),
    Path("a training role cannot write another tenant's checkpoints", "role:training-gpt2-smoke-identity",
         "s3:PutObject", "bucket:checkpoints/runs/applied/0123abcd/step-100/model.pt", DENIED),
    Path("a training role cannot read another tenant's checkpoints", "role:training-gpt2-smoke-identity",
         "s3:GetObject", "bucket:checkpoints/runs/serving/0123abcd/step-100/model.pt", DENIED),
    Path("a training role cannot overwrite the served model (a Python backend would run in Triton)",
         "role:training-gpt2-smoke-identity", "s3:PutObject", "bucket:models/triton/gpt/2/model.py", DENIED),
    Path("a training role cannot read the served model", "role:training-gpt2-smoke-identity", "s3:GetObject",
         "bucket:models/triton/gpt/1/model.onnx", DENIED),
    Path("a training role cannot read MLflow's artifacts past the server's permissions",
         "role:training-gpt2-smoke-identity", "s3:GetObject", "bucket:models/mlflow/7/0123abcd/artifacts/model.pt",
         DENIED),
    Path("a training role cannot write MLflow's artifacts", "role:training-gpt2-smoke-identity", "s3:PutObject",
         "bucket:models/mlflow/7/0123abcd/artifacts/model.pt", DENIED),
    Path("the drift role cannot read another tenant's raw datasets", "role:inference-gpt-drift", "s3:GetObject",
         "bucket:datasets/research/tokens/shard-0001.bin", DENIED),
    Path("the drift role cannot list another tenant's datasets", "role:inference-gpt-drift", "s3:ListBucket",
         "bucket:datasets", DENIED, {"s3:prefix": "research/"}),
    Path("the drift role cannot read another model's request logs", "role:inference-gpt-drift", "s3:GetObject",
         "bucket:datasets/request-logs/other/date=2026-11-24/x.parquet", DENIED),
    Path("a feature-store role cannot read a tenant's runs", "role:features-applied-identity", "s3:GetObject",
         "bucket:checkpoints/runs/research/0123abcd/step-100/model.pt", DENIED),
    # An account role that an identity policy lets at everything: the buckets keep it out.
    Path("an account role cannot overwrite the served model", "arn:aws:iam::{account}:role/developer",
         "s3:PutObject", "bucket:models/triton/gpt/2/model.py", DENIED, service_grant=True),
    Path("an account role cannot read MLflow's artifacts around the server", "arn:aws:iam::{account}:role/developer",
         "s3:GetObject", "bucket:models/mlflow/7/0123abcd/artifacts/model.pt", DENIED, service_grant=True),
    Path("an account role cannot read a tenant's runs", "arn:aws:iam::{account}:role/developer", "s3:GetObject",
         "bucket:checkpoints/runs/research/0123abcd/step-100/model.pt", DENIED, service_grant=True),
    Path("the serving pods read the model, but cannot change it", "role:inference-gpt-identity", "s3:PutObject",
         "bucket:models/triton/gpt/2/model.py", DENIED),
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
          "kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::{bucket:checkpoints}/runs/research/x.pt"}),
    Path("S3 decrypts datasets for the training role", "role:training-gpt2-smoke-identity", "kms:Decrypt",
         "key:datasets", ALLOWED,
         {"kms:ViaService": "s3.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
          "kms:EncryptionContext:aws:s3:arn": "arn:aws:s3:::{bucket:datasets}/research/tokens/shard-0001.bin"}),
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
         "s3:GetObject", "bucket:datasets/research/tokens/shard-0001.bin", DENIED),
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
    Path("a training role still reads its tenant's training shards", "role:training-gpt2-smoke-identity",
         "s3:GetObject", "bucket:datasets/research/tokens/shard-0001.bin", ALLOWED),
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
         "trust:features-research-identity", ALLOWED, pod("research", "feature-store")),
    Path("ElastiCache takes its grant on the features key", DEPLOYER, "kms:CreateGrant", "key:features",
         ALLOWED, {"kms:ViaService": "elasticache.{region}.amazonaws.com", "kms:CallerAccount": "{account}",
                   "kms:GrantIsForAWSResource": "true"}, service_grant=True),
    # --- Self-service jobs: each GPU tenant's `trainer` (infra/jobs.py) ----------------------
    Path("a tenant's own job reads its datasets", "role:training-research-trainer", "s3:GetObject",
         "bucket:datasets/research/tokens/shard-0001.bin", ALLOWED),
    Path("a tenant's own job writes its checkpoints", "role:training-research-trainer", "s3:PutObject",
         "bucket:checkpoints/runs/research/exp-1/step-100/model.pt", ALLOWED,
         {SSE: "aws:kms", SSE_KEY: "{key:checkpoints}"}),
    Path("a tenant's own job signs in to MLflow as its tenant", "role:training-research-trainer",
         "secretsmanager:GetSecretValue", "secret:research", ALLOWED),
    Path("a tenant's own job cannot write another tenant's checkpoints", "role:training-research-trainer",
         "s3:PutObject", "bucket:checkpoints/runs/applied/exp-1/step-100/model.pt", DENIED,
         {SSE: "aws:kms", SSE_KEY: "{key:checkpoints}"}),
    Path("a tenant's own job cannot read another tenant's datasets", "role:training-research-trainer",
         "s3:GetObject", "bucket:datasets/applied/tokens/shard-0001.bin", DENIED),
    Path("a tenant's own job cannot read its tenant's features", "role:training-research-trainer",
         "s3:GetObject", "bucket:datasets/features/research/registry.pb", DENIED),
    Path("a tenant's own job cannot read another tenant's tracking user", "role:training-research-trainer",
         "secretsmanager:GetSecretValue", "secret:applied", DENIED),
    Path("EKS Pod Identity assumes a tenant's trainer role for its trainer account", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:training-research-trainer", ALLOWED, pod("research", "trainer")),
    Path("a tenant's trainer role is not for another tenant's trainer account", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:training-research-trainer", DENIED, pod("applied", "trainer")),
    # --- The pipeline engine and its steps: the research tenant's golden path -------------
    Path("a pipeline's features step reads its tenant's registry", "role:pipelines-research-steps", "s3:GetObject",
         "bucket:datasets/features/research/registry.pb", ALLOWED),
    Path("a pipeline's dataset step writes a dataset version", "role:pipelines-research-steps", "s3:PutObject",
         "bucket:datasets/features/research/datasets/churn/0123/data.parquet", ALLOWED),
    Path("a pipeline's train step writes its tenant's checkpoints", "role:pipelines-research-steps",
         "s3:PutObject", "bucket:checkpoints/runs/research/golden/step-200/model.pt", ALLOWED,
         {SSE: "aws:kms", SSE_KEY: "{key:checkpoints}"}),
    Path("a pipeline's evaluate step reads its tenant's checkpoints", "role:pipelines-research-steps",
         "s3:GetObject", "bucket:checkpoints/runs/research/golden/step-200/model.pt", ALLOWED),
    Path("a pipeline's steps connect to the online store as their tenant", "role:pipelines-research-steps",
         "elasticache:Connect", "cache:research", ALLOWED),
    Path("a pipeline's steps sign in to MLflow as their tenant", "role:pipelines-research-steps",
         "secretsmanager:GetSecretValue", "secret:research", ALLOWED),
    Path("a pipeline's steps cannot write another tenant's checkpoints", "role:pipelines-research-steps",
         "s3:PutObject", "bucket:checkpoints/runs/applied/golden/step-200/model.pt", DENIED,
         {SSE: "aws:kms", SSE_KEY: "{key:checkpoints}"}),
    Path("a pipeline's steps cannot read another tenant's features", "role:pipelines-research-steps",
         "s3:GetObject", "bucket:datasets/features/applied/registry.pb", DENIED),
    Path("a pipeline's steps cannot connect as another tenant's user", "role:pipelines-research-steps",
         "elasticache:Connect", "cache:applied", DENIED),
    Path("a pipeline's steps cannot read another tenant's tracking user", "role:pipelines-research-steps",
         "secretsmanager:GetSecretValue", "secret:applied", DENIED),
    Path("a pipeline's steps cannot read their engine's database secret", "role:pipelines-research-steps",
         "secretsmanager:GetSecretValue", "secret:pipelines/research", DENIED),
    # prod serves `gpt`; research's pipeline exports `research-churn` to its own runs.
    Path("a pipeline that does not publish the served model cannot write its repository",
         "role:pipelines-research-steps", "s3:PutObject", "bucket:models/triton/gpt/2/model.onnx", DENIED,
         {SSE: "aws:kms", SSE_KEY: "{key:models}"}),
    Path("the engine reads its database secret", "role:pipelines-research-engine", "secretsmanager:GetSecretValue",
         "secret:pipelines/research", ALLOWED),
    Path("the engine cannot read its tenant's data", "role:pipelines-research-engine", "s3:GetObject",
         "bucket:datasets/features/research/registry.pb", DENIED),
    Path("the engine cannot read its tenant's tracking user", "role:pipelines-research-engine",
         "secretsmanager:GetSecretValue", "secret:research", DENIED),
    Path("the tracking server makes the engine's database password", "role:tracking-identity",
         "secretsmanager:PutSecretValue", "secret:pipelines/research", ALLOWED),
    Path("EKS Pod Identity assumes the pipeline steps' role for their service account", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:pipelines-research-steps", ALLOWED, pod("research", "pipeline-steps")),
    Path("the pipeline steps' role is not for another tenant's namespace", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:pipelines-research-steps", DENIED, pod("applied", "pipeline-steps")),
    Path("the pipeline steps' role is not for the engine's pods", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:pipelines-research-steps", DENIED, pod("research", "pipeline-engine")),
    Path("EKS Pod Identity assumes the engine's role for its service account", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:pipelines-research-engine", ALLOWED, pod("research", "pipeline-engine")),
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
         "trust:training-gpt2-smoke-identity", ALLOWED, pod("research", "gpt2-smoke")),
    Path("EKS Pod Identity tags the training role's session", "pods.eks.amazonaws.com", "sts:TagSession",
         "trust:training-gpt2-smoke-identity", ALLOWED, pod("research", "gpt2-smoke")),
    Path("EKS Pod Identity assumes the serving role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:inference-gpt-identity", ALLOWED, pod("inference", "triton")),
    Path("the training role is not for another namespace's service account of the same name",
         "pods.eks.amazonaws.com", "sts:AssumeRole", "trust:training-gpt2-smoke-identity", DENIED,
         pod("applied", "gpt2-smoke")),
    Path("the training role is not for another service account in its namespace", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:training-gpt2-smoke-identity", DENIED, pod("research", "default")),
    Path("the training role is not for a session without Pod Identity's tags", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:training-gpt2-smoke-identity", DENIED, {"aws:SourceAccount": "{account}"}),
    Path("a feature-store role is not for another tenant's namespace", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:features-research-identity", DENIED, pod("applied", "feature-store")),
    Path("EKS Pod Identity assumes the drift check's role in the serving namespace", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:inference-gpt-drift", ALLOWED, pod("inference", "model-drift-gpt")),
    Path("the drift check's role is not for its tenant's namespace, where its developers run pods",
         "pods.eks.amazonaws.com", "sts:AssumeRole", "trust:inference-gpt-drift", DENIED,
         pod("serving", "model-drift-gpt")),
    Path("EC2 assumes the node role", "ec2.amazonaws.com", "sts:AssumeRole", "trust:nodes", ALLOWED),
    Path("EKS assumes the cluster role", "eks.amazonaws.com", "sts:AssumeRole", "trust:cluster-control-plane",
         ALLOWED),
    Path("EKS Pod Identity assumes the VPC CNI's role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:cluster-vpc-cni", ALLOWED, pod("kube-system", "aws-node")),
    Path("EKS Pod Identity assumes the EBS CSI driver's role", "pods.eks.amazonaws.com", "sts:AssumeRole",
         "trust:core-addons-ebs-csi", ALLOWED, pod("kube-system", "ebs-csi-controller-sa")),
    Path("VPC flow logs assume their role", "vpc-flow-logs.amazonaws.com", "sts:AssumeRole", "trust:network-flow-logs",
         ALLOWED, {"aws:SourceAccount": "{account}",
                   "aws:SourceArn": "arn:aws:ec2:{region}:{account}:vpc-flow-log/fl-0123456789abcdef0"}),
    Path("the deploy project's CodeBuild assumes the deploy runner's role", "codebuild.amazonaws.com",
         "sts:AssumeRole", "trust:deploy-runner-role", ALLOWED,
         {"aws:SourceAccount": "{account}", "aws:SourceArn": "arn:aws:codebuild:{region}:{account}:project/mlplat-prod-deploy"}),
    Path("Pod Identity for another account's cluster cannot assume a pod's role", "pods.eks.amazonaws.com",
         "sts:AssumeRole", "trust:training-gpt2-smoke-identity", DENIED,
         {**pod("research", "gpt2-smoke"), "aws:SourceAccount": OTHER_ACCOUNT}),
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


# What each tenant's roles are asked, of their own tenant's data and of every other's:
# (what, action, resource with {tenant}, context). Another tenant's must all be Denied
# (tests/iam/test_paths.py); a tenant's own are compared between two previews only, as
# roles differ in what they may do with their tenant's data.
TENANT_REQUESTS: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    ("reads", "s3:GetObject", "bucket:datasets/{tenant}/tokens/shard-0001.bin", {}),
    ("lists", "s3:ListBucket", "bucket:datasets", {"s3:prefix": "{tenant}/"}),
    ("reads", "s3:GetObject", "bucket:datasets/features/{tenant}/registry.pb", {}),
    ("writes", "s3:PutObject", "bucket:datasets/features/{tenant}/sources/customers.parquet", {}),
    ("reads", "s3:GetObject", "bucket:checkpoints/runs/{tenant}/0123abcd/step-100/model.pt", {}),
    ("writes", "s3:PutObject", "bucket:checkpoints/runs/{tenant}/0123abcd/step-100/model.pt", {}),
    ("reads", "secretsmanager:GetSecretValue", "secret:{tenant}", {}),
    ("connects as", "elasticache:Connect", "cache:{tenant}", {}),
)


ACCOUNT_ROLE = "arn:aws:iam::{account}:role/developer"
OUTSIDE_PRINCIPALS = ((ACCOUNT_ROLE, "an account role"), (f"arn:aws:iam::{OTHER_ACCOUNT}:root", "another account"))
ACCOUNT_REQUESTS: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    ("reads", "s3:GetObject", "bucket:checkpoints/runs/{tenant}/0123abcd/step-100/model.pt", {}),
    ("writes", "s3:PutObject", "bucket:checkpoints/runs/{tenant}/0123abcd/step-100/model.pt", {}),
    ("reads", "s3:GetObject", "bucket:datasets/features/{tenant}/registry.pb", {}),
    ("writes", "s3:PutObject", "bucket:datasets/features/{tenant}/sources/customers.parquet", {}),
)


def tenant_paths(tenant_roles: Mapping[str, Mapping[str, str]]) -> tuple[Path, ...]:
    """Every tenant role's requests on every tenant's data, and an account role's and another
    account's on each tenant's runs and feature store: `tenant_roles` is {tenant: {role
    resource name: IAM role name}} (infra/checks/iam/stack.py finds them)."""
    tenants = sorted(tenant_roles)
    found = []
    for owner in tenants:
        for resource_name, role in sorted(tenant_roles[owner].items()):
            for target in tenants:
                for verb, action, resource, context in TENANT_REQUESTS:
                    where = resource.format(tenant=target)
                    shown = where.split(":", 1)[1]
                    found.append(Path(
                        f"{role} ({owner}) {verb} {target}'s {shown} ({action})", f"role:{resource_name}", action,
                        where, "" if target == owner else DENIED,
                        {k: v.format(tenant=target) for k, v in context.items()}, tenant=target))
        # And the account's other principals, which the buckets' owner-only Denies keep out
        # of a tenant's runs and feature store whatever their own policies allow.
        for principal, who in OUTSIDE_PRINCIPALS:
            for verb, action, resource, context in ACCOUNT_REQUESTS:
                where = resource.format(tenant=owner)
                found.append(Path(f"{who} {verb} {owner}'s {where.split(':', 1)[1]} ({action})", principal, action,
                                  where, DENIED, context, service_grant=True, tenant=owner))
    return tuple(found)
