"""What the MLflow tracking server is made of, as plain data: its database in the cloud
layer (RDS PostgreSQL) and its objects in the cluster layer (workloads/tracking/server.py
runs in them).

Why RDS PostgreSQL, one instance (Multi-AZ where the stack asks): MLflow's backend needs a
SQL store and nothing Aurora adds (global databases, fast clones) is wanted here; Aurora's
cluster would also be the one thing that replicates across regions if misconfigured.

Why our own Deployment, not the community chart (charts/mlflow 1.11.5): the chart takes the
database password and the auth app's admin password as values, which would put them in
Pulumi's state and in a Kubernetes Secret; its image is a third-party build. Our image reads
every credential from Secrets Manager through Pod Identity at start and follows rotation
(workloads/tracking/server.py), and is built from the in-region mirror like the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from components.specs.cluster import CA_CONFIG_MAP, CA_DIR, CA_FILE, ca_config_map
from components.tenancy_spec import POD_IDENTITY_AGENT, pod_security_labels, pods_in
from components.training_spec import CONTAINER_SECURITY, POD_SECURITY, instance_type_affinity
from workloads.tracking.server import DSN_FILE_ENV, USERS_DIR_ENV

NAMESPACE = "mlflow"
NAME = "mlflow"
SERVICE_ACCOUNT = "mlflow"
PORT = 5000
DB_PORT = 5432
DB_NAME = "mlflow"
DB_USER = "mlflow"
# Where the server keeps artifacts in the models bucket (proxied: clients never see it).
ARTIFACTS_PREFIX = "mlflow"
# PostgreSQL on RDS: the major version (RDS picks the newest minor and keeps it updated)
# and its parameter-group family.
ENGINE_VERSION = "17"
PARAMETER_FAMILY = "postgres17"
# The RDS certificate authority the server verifies (bundled in the tracking image).
CA_CERT_IDENTIFIER = "rds-ca-rsa2048-g1"
CA_BUNDLE = "/etc/ssl/rds/global-bundle.pem"
# What pods use: the Service, in-cluster only.
SERVER_URI = f"http://{NAME}.{NAMESPACE}.svc.cluster.local:{PORT}"


@dataclass(frozen=True)
class DatabasePlan:
    identifier: str  # the RDS instance identifier, e.g. mlplat-prod-tracking
    instance_class: str
    storage_gib: int
    max_storage_gib: int
    multi_az: bool
    backup_days: int
    log_retention_days: int


def parameters() -> list[dict[str, str]]:
    """The parameter group's settings: TLS only (the pack checks rds.force_ssl), and the
    connections and slow statements logged to CloudWatch under the logs key."""
    return [
        {"name": "rds.force_ssl", "value": "1", "apply_method": "pending-reboot"},
        {"name": "log_connections", "value": "1", "apply_method": "immediate"},
        {"name": "log_min_duration_statement", "value": "1000", "apply_method": "immediate"},
    ]


def log_group_name(identifier: str) -> str:
    """The group RDS exports PostgreSQL's log to; made first so it is encrypted and expires."""
    return f"/aws/rds/instance/{identifier}/postgresql"


@dataclass(frozen=True)
class SecretNames:
    """The server's admin secret and one per tenant, apart: no tenant's name can stand for the
    admin's (a tenant named like a key of one map would have replaced the admin's entry).
    Their values are made by the server when it first starts, never by Pulumi."""

    admin: str
    tenants: dict[str, str]  # tenant -> its user's secret
    # tenant -> its pipeline engine's database password (workloads/tracking/databases.py)
    pipelines: dict[str, str] = field(default_factory=dict)


def secret_names(prefix: str, tenants: tuple[str, ...], pipelines: tuple[str, ...] = ()) -> SecretNames:
    return SecretNames(admin=f"{prefix}/tracking/admin",
                       tenants={t: f"{prefix}/tracking/tenant/{t}" for t in tenants},
                       pipelines={t: f"{prefix}/pipelines/database/{t}" for t in pipelines})


def role_name(prefix: str) -> str:
    """The IAM name of the tracking server's role (Pod Identity)."""
    return f"{prefix}-tracking"[:64]


def server_statements(models_arn: str, models_key_arn: str, tracking_key_arn: str, master_secret_arn: str,
                      made_secret_arns: list[str]) -> list[dict[str, Any]]:
    """The server's role: the models bucket's artifact prefix, the database's RDS-managed
    secret (read), and the admin and tenant secrets (read, and their first value written)."""
    return [
        {"Sid": "ListArtifacts", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [models_arn],
         "Condition": {"StringLike": {"s3:prefix": [f"{ARTIFACTS_PREFIX}/*"]}}},
        {"Sid": "ReadWriteArtifacts", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
         "Resource": [f"{models_arn}/{ARTIFACTS_PREFIX}/*"]},
        {"Sid": "ArtifactsKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
         "Resource": [models_key_arn]},
        {"Sid": "ReadDatabaseSecret", "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"],
         "Resource": [master_secret_arn]},
        {"Sid": "UserSecrets", "Effect": "Allow",
         "Action": ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue", "secretsmanager:DescribeSecret"],
         "Resource": list(made_secret_arns)},
        {"Sid": "SecretsKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
         "Resource": [tracking_key_arn]},
    ]


def tenant_statements(secret_arn: str, tracking_key_arn: str, region: str,
                      what: str = "TrackingUser") -> list[dict[str, Any]]:
    """A tenant's workloads read their own tracking user's secret, and no other (`what`
    names another secret under the tracking key read the same way: the Sids')."""
    return [
        {"Sid": f"Read{what}", "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"],
         "Resource": [secret_arn]},
        {"Sid": f"{what}Key", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": [tracking_key_arn],
         "Condition": {"StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"}}},
    ]


# --- cluster layer -------------------------------------------------------------------


@dataclass(frozen=True)
class CustomerStores:
    """On a customer's cluster (docs/onprem.md): the database and the object store the
    server uses, through the customer's Kubernetes Secrets in the server's namespace."""

    database_secret: str  # the Secret with the PostgreSQL DSN
    database_key: str
    database_port: int
    database_cidrs: tuple[str, ...]
    endpoint: str  # the S3-compatible store, https://
    region: str  # what the store signs for
    credentials_secret: str  # its key `credentials`: an AWS shared-credentials file for the models bucket
    store_cidrs: tuple[str, ...]
    ca_bundle: str  # PEM of the customer's CA (the store's, and the DSN's sslrootcert may name it)

    @property
    def store_port(self) -> int:
        host = self.endpoint.removeprefix("https://")
        return int(host.rsplit(":", 1)[1]) if ":" in host else 443


# The customer's Secret with the server's users: ADMIN_KEY, FLASK_KEY_FILE and
# `tenant.<name>` per tenant (workloads/tracking/server.py settings_from_files).
TRACKING_USERS = "mlflow-users"
USERS_DIR = "/etc/mlplat/tracking-users"
DATABASE_DIR = "/etc/mlplat/tracking-database"
# The object store's keys, as a file (never in the environment): `credentials` of the
# descriptor's objectStorage.credentialsSecret, in the AWS shared-credentials format boto3
# and MLflow's artifact client read.
STORE_CREDENTIALS_DIR = "/etc/mlplat/object-store"
STORE_CREDENTIALS_KEY = "credentials"


@dataclass(frozen=True)
class ServerPlan:
    image: str
    replicas: int
    instance_types: tuple[str, ...]  # the pool it runs on
    db_host: str
    master_secret_arn: str
    admin_secret_arn: str
    tenant_secret_arns: dict[str, str]
    artifacts: str  # s3://<models bucket>/mlflow
    region: str
    vpc_cidr: str
    endpoint_cidrs: tuple[str, ...]  # AWS APIs (interface endpoints, the S3 prefix list)
    tenants: tuple[str, ...]
    # (namespace, pod labels) of platform pods that sign in as a tenant: the drift check,
    # in the serving namespace (components/drift_spec.py).
    monitors: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # tenant -> its pipeline engine's database secret: the server makes each database and role.
    pipeline_secret_arns: dict[str, str] = field(default_factory=dict)
    cpu: str = "1"
    cpu_limit: str = "2"  # gunicorn's workers burst on registry searches
    memory: str = "2Gi"
    customer: CustomerStores | None = None  # a customer's cluster: Secrets, not Secrets Manager



LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "mlplat"}
TENANT_LABEL = "mlplat.io/tenant"


def namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {**pod_security_labels("restricted"),
                                                       "app.kubernetes.io/part-of": "mlplat"}}}


def service_account() -> dict[str, Any]:
    # No Kubernetes API token: the server talks to AWS (Pod Identity) and PostgreSQL only.
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}, "automountServiceAccountToken": False}


def deployment(plan: ServerPlan) -> dict[str, Any]:
    if plan.customer is not None:
        return customer_deployment(plan, plan.customer)
    env = {
        "MLPLAT_DB_HOST": plan.db_host, "MLPLAT_DB_PORT": str(DB_PORT), "MLPLAT_DB_NAME": DB_NAME,
        "MLPLAT_DB_CA_BUNDLE": CA_BUNDLE, "MLPLAT_DB_SECRET_ARN": plan.master_secret_arn,
        "MLPLAT_ADMIN_SECRET_ARN": plan.admin_secret_arn,
        "MLPLAT_TENANT_SECRET_ARNS": json.dumps(plan.tenant_secret_arns, sort_keys=True),
        "MLPLAT_PIPELINE_SECRET_ARNS": json.dumps(plan.pipeline_secret_arns, sort_keys=True),
        "MLPLAT_ARTIFACTS": plan.artifacts, "MLPLAT_PORT": str(PORT), "MLPLAT_WORKERS": "2",
        "AWS_REGION": plan.region, "AWS_DEFAULT_REGION": plan.region,
    }
    probe = {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10, "timeoutSeconds": 3}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": LABELS},
        "spec": {
            "replicas": plan.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "securityContext": POD_SECURITY,
                    "affinity": instance_type_affinity(plan.instance_types, spread=NAME),
                    "containers": [{
                        "name": "mlflow",
                        "image": plan.image,
                        "imagePullPolicy": "IfNotPresent",
                        "ports": [{"name": "http", "containerPort": PORT}],
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                        "readinessProbe": probe,
                        "livenessProbe": {**probe, "initialDelaySeconds": 60, "failureThreshold": 6},
                        "resources": {"requests": {"cpu": plan.cpu, "memory": plan.memory},
                                      "limits": {"cpu": plan.cpu_limit, "memory": plan.memory}},
                        "securityContext": CONTAINER_SECURITY,
                        # The auth config and gunicorn's worker files: the only writable place.
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
                },
            },
        },
    }


def service() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": LABELS},
            "spec": {"type": "ClusterIP", "selector": {"app.kubernetes.io/name": NAME},
                     "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]}}


def disruption_budget() -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}}}}


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def network_policies(plan: ServerPlan) -> list[dict[str, Any]]:
    """Default deny; in: the tenants' namespaces (and the drift check) on the server's port; out: DNS, the
    database inside the VPC, the Pod Identity agent and the AWS APIs (on a customer's
    cluster: its database and its object store)."""
    if plan.customer is not None:
        stores = plan.customer
        return [*network_policies_without_egress(plan), _policy("allow-egress", {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "policyTypes": ["Egress"],
            "egress": [
                _DNS_EGRESS,
                {"to": [{"ipBlock": {"cidr": c}} for c in stores.database_cidrs],
                 "ports": [{"protocol": "TCP", "port": stores.database_port}]},
                {"to": [{"ipBlock": {"cidr": c}} for c in stores.store_cidrs],
                 "ports": [{"protocol": "TCP", "port": stores.store_port}]},
            ],
        })]
    return [
        _policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy("allow-tenants", {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
                {"key": TENANT_LABEL, "operator": "In", "values": sorted(plan.tenants)}]}},
                *(pods_in(namespace, dict(labels)) for namespace, labels in plan.monitors)],
                "ports": [{"protocol": "TCP", "port": PORT}]}],
        }),
        _policy("allow-egress", {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                         "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"ipBlock": {"cidr": plan.vpc_cidr}}], "ports": [{"protocol": "TCP", "port": DB_PORT}]},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": [{"protocol": "TCP", "port": 80}]},
                {"to": [{"ipBlock": {"cidr": c}} for c in plan.endpoint_cidrs],
                 "ports": [{"protocol": "TCP", "port": 443}]},
            ],
        }),
    ]



_DNS_EGRESS = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                       "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
               "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def network_policies_without_egress(plan: ServerPlan) -> list[dict[str, Any]]:
    return [p for p in network_policies(replace(plan, customer=None)) if p["metadata"]["name"] != "allow-egress"]


# --- on a customer's cluster ---------------------------------------------------------


def customer_deployment(plan: ServerPlan, stores: CustomerStores) -> dict[str, Any]:
    """The same server, its credentials mounted from the customer's Secrets (read again
    every round, so a rotation restarts it), its artifacts on the customer's S3-compatible
    store, verified against the customer's CA. The first deploy does not wait for it: the
    Secrets can only be made once this layer has made the namespace (docs/onprem.md)."""
    manifest = deployment(replace(plan, customer=None))
    pod = manifest["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {
        DSN_FILE_ENV: f"{DATABASE_DIR}/dsn", USERS_DIR_ENV: USERS_DIR,
        "MLPLAT_ARTIFACTS": plan.artifacts, "MLPLAT_PORT": str(PORT), "MLPLAT_WORKERS": "2",
        # MLflow's artifact client and boto3 both: the customer's store, never AWS S3.
        "MLFLOW_S3_ENDPOINT_URL": stores.endpoint, "AWS_ENDPOINT_URL_S3": stores.endpoint,
        "AWS_REGION": stores.region, "AWS_DEFAULT_REGION": stores.region, "AWS_CA_BUNDLE": CA_FILE,
        "AWS_SHARED_CREDENTIALS_FILE": f"{STORE_CREDENTIALS_DIR}/{STORE_CREDENTIALS_KEY}",
    }
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    container["volumeMounts"] += [{"name": "database", "mountPath": DATABASE_DIR, "readOnly": True},
                                  {"name": "users", "mountPath": USERS_DIR, "readOnly": True},
                                  {"name": "store", "mountPath": STORE_CREDENTIALS_DIR, "readOnly": True},
                                  {"name": "ca", "mountPath": CA_DIR, "readOnly": True}]
    pod["volumes"] += [
        {"name": "database", "secret": {"secretName": stores.database_secret, "defaultMode": 0o440,
                                        "items": [{"key": stores.database_key, "path": "dsn"}]}},
        {"name": "users", "secret": {"secretName": TRACKING_USERS, "defaultMode": 0o440}},
        {"name": "store", "secret": {"secretName": stores.credentials_secret, "defaultMode": 0o440,
                                     "items": [{"key": STORE_CREDENTIALS_KEY, "path": STORE_CREDENTIALS_KEY}]}},
        {"name": "ca", "configMap": {"name": CA_CONFIG_MAP}},
    ]
    manifest["metadata"]["annotations"] = {"pulumi.com/skipAwait": "true"}
    return manifest


def customer_objects(plan: ServerPlan) -> list[dict[str, Any]]:
    """What the server needs in its namespace on a customer's cluster: the customer's CA."""
    return [] if plan.customer is None else [ca_config_map(NAMESPACE, plan.customer.ca_bundle)]
