"""What the Feast feature store is made of, as plain data: the online store in the cloud
layer (ElastiCache for Redis) and, per tenant, its project's objects in the cluster layer
(workloads/features runs in them). Why each store, and why our own Deployment: docs/features.md.

In short:
- Registry: one file per tenant in S3 (`features/<tenant>/registry.pb` in the datasets
  bucket), so the tenant's Pod Identity role, which reaches only its prefix, is also what
  separates projects; a SQL registry would hold every tenant's project in shared tables.
- Offline store: Parquet under the same prefix (Feast's file store over S3): the data
  stays in the datasets bucket under its CMK, and the point-in-time join the tests check is
  the one the pods run.
- Online store: ElastiCache for Redis, TLS required, the `features` CMK at rest, and one
  IAM-authenticated user per tenant whose ACL reaches only its project's keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.addons.queues import LOCAL_QUEUE
from components.specs.cluster import CA_KEY
from components.tenancy_spec import MONITORING_NAMESPACE
from components.training_spec import (
    CONTAINER_SECURITY,
    QUEUE_LABEL,
    RUN_AS,
    instance_type_affinity,
    tenant_pod_security,
)

NAME = "feature-server"
MATERIALIZE = "materialize-features"
SERVICE_ACCOUNT = "feature-store"
CONFIG_MAP = "feature-store"
CONFIG_DIR = "/etc/feast"
PORT = 6566  # Feast's HTTP feature server
METRICS_PORT = 8000  # Feast's Prometheus metrics, feast_feature_freshness_seconds among them
REDIS_PORT = 6379
ENGINE = "redis"
ENGINE_VERSION = "7.1"  # ElastiCache IAM authentication needs Redis OSS 7 or later
PARAMETER_FAMILY = "redis7"
# Where each tenant's project lives in the datasets bucket: features/<tenant>/...
PREFIX = "features"
ROLE_LABEL = "mlplat.io/feature-store"  # pods that may reach the online store
LABELS = {"app.kubernetes.io/part-of": "mlplat-features"}
# The online store class the pods use: Feast's Redis store, authenticated with IAM tokens.
ONLINE_STORE_TYPE = "workloads.features.online.IamRedisOnlineStore"
# ...and its registry store: Feast's S3 store, reading with object permissions alone and
# writing only over the version it read (workloads/features/registry.py).
REGISTRY_STORE_TYPE = "workloads.features.registry.TenantS3RegistryStore"
SERIALIZATION_VERSION = 3
# On a customer's cluster (docs/onprem.md): the online store is the customer's Redis, each
# tenant's user authenticated by a password the pods read from the customer's Secret,
# mounted as a file and read again for every new connection (a rotation needs no restart).
PASSWORD_STORE_TYPE = "workloads.features.online.PasswordFileRedisOnlineStore"
REDIS_PASSWORD_DIR = "/etc/mlplat/feature-store-redis"
REDIS_PASSWORD_FILE = f"{REDIS_PASSWORD_DIR}/password"
# The object store's keys for the tenant's prefix, as an AWS shared-credentials file (the
# descriptor's objectStorage.credentialsSecret, key `credentials`), never in the environment.
STORE_CREDENTIALS_DIR = "/etc/mlplat/object-store"
STORE_CREDENTIALS_KEY = "credentials"
# The customer's CA (objectStorage.caBundle), which signed its Redis's and its store's certificates.
CA_CONFIG_MAP_CUSTOMER = "feature-store-ca"
CUSTOMER_CA_DIR = "/etc/mlplat/feature-store-ca"
CUSTOMER_CA_FILE = f"{CUSTOMER_CA_DIR}/{CA_KEY}"
MAX_ID = 40  # ElastiCache's longest replication group id


def project_name(tenant: str, projects: Mapping[str, str] | None = None) -> str:
    """A tenant's Feast project: named in config, else the tenant with `_` for `-` (Feast
    project names take letters, digits and underscores)."""
    return (projects or {}).get(tenant) or tenant.replace("-", "_")


def key_pattern_overlap(projects: Mapping[str, str]) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """Feast's Redis keys are `<entity key bytes><project>`, so a user whose ACL pattern is
    `*<project>` reads every key ending in it: two projects where one ends with the other
    would share keys. `projects`: tenant -> project; the first such pair, as
    ((tenant, project), (tenant, project))."""
    for a, pa in projects.items():
        for b, pb in projects.items():
            if a != b and pb.endswith(pa):
                return (a, pa), (b, pb)
    return None


def access_string(project: str) -> str:
    """The tenant's Redis ACL: only keys of its project; reads, writes and the connection
    commands, less the dangerous ones (FLUSHALL, KEYS, CONFIG...) and those that take no key
    and so escape the pattern: SCAN and RANDOMKEY would show other projects' key names (their
    entity ids), DBSIZE their count. Feast scans only to delete removed views, which
    `full_scan_for_deletion: false` turns off."""
    return f"on ~*{project} -@all +@read +@write +@connection -@dangerous -scan -randomkey -dbsize"


def user_id(prefix: str, tenant: str) -> str:
    """The tenant's ElastiCache user; with IAM authentication its id is also its name."""
    return f"{prefix}-features-{tenant}"


def role_name(prefix: str, tenant: str) -> str:
    """The IAM name of a tenant's feature-store role (Pod Identity)."""
    return f"{prefix}-{tenant}-features"[:64]


def owned_prefixes(prefix: str, account: str, tenants: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(prefix, role ARN) per tenant: the datasets bucket lets only the tenant's
    feature-store role touch `features/<tenant>/`."""
    return tuple((f"{PREFIX}/{t}/", f"arn:aws:iam::{account}:role/{role_name(prefix, t)}") for t in tenants)


def registry_path(bucket: str, tenant: str) -> str:
    return f"s3://{bucket}/{PREFIX}/{tenant}/registry.pb"


@dataclass(frozen=True)
class CachePlan:
    replication_group_id: str  # e.g. mlplat-prod-features (at most 40 characters)
    node_type: str
    nodes: int
    snapshot_days: int
    log_retention_days: int
    users: dict[str, str]  # tenant -> user id
    projects: dict[str, str]  # tenant -> project


def cache_plan(prefix: str, f: Any, log_retention_days: int, projects: Mapping[str, str]) -> CachePlan:
    """`f`: the stack's FeaturesConfig; `projects`: tenant -> project."""
    return CachePlan(
        replication_group_id=f"{prefix}-features"[:MAX_ID], node_type=f.node_type, nodes=f.nodes,
        snapshot_days=f.snapshot_days, log_retention_days=log_retention_days,
        users={t: user_id(prefix, t) for t in projects}, projects=dict(projects),
    )


def parameters() -> list[dict[str, str]]:
    """No eviction of feature rows under memory pressure (a missing feature is worse than a
    refused write, which the materialization job reports), and idle clients dropped."""
    return [
        {"name": "maxmemory-policy", "value": "noeviction"},
        {"name": "timeout", "value": "300"},
    ]


def log_group_names(group_id: str) -> dict[str, str]:
    """Where ElastiCache delivers the slow log and the engine log; made first so each is
    encrypted and expires."""
    return {kind: f"/aws/elasticache/{group_id}/{kind}" for kind in ("slow-log", "engine-log")}


def tenant_statements(*, datasets_arn: str, datasets_key_arn: str, replication_group_arn: str, user_arn: str,
                      tenant: str) -> list[dict[str, Any]]:
    """A tenant's feature-store role: its prefix in the datasets bucket (sources, registry,
    training datasets), the bucket's key, and connecting to the cache as its own user."""
    prefix = f"{PREFIX}/{tenant}/"
    return [
        {"Sid": "ListFeatures", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [datasets_arn],
         "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}}},
        {"Sid": "ReadWriteFeatures", "Effect": "Allow",
         "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
         "Resource": [f"{datasets_arn}/{prefix}*"]},
        {"Sid": "FeaturesKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
         "Resource": [datasets_key_arn]},
        {"Sid": "ConnectAsTenantUser", "Effect": "Allow", "Action": ["elasticache:Connect"],
         "Resource": [replication_group_arn, user_arn]},
    ]


# --- cluster layer -------------------------------------------------------------------


@dataclass(frozen=True)
class CustomerFeatureStores:
    """On a customer's cluster: its Redis (TLS, a password per tenant's user in the
    customer's Secret of the tenant's namespace) and its S3-compatible store (the registry
    and the offline Parquet under `features/<tenant>/` of the datasets bucket)."""

    redis_port: int
    password_secret: str  # the Secret in the tenant's namespace...
    password_key: str  # ...and its key with the tenant's Redis password
    redis_cidrs: tuple[str, ...]
    endpoint: str  # the object store, https://host[:port]
    credentials_secret: str  # its key `credentials`: an AWS shared-credentials file
    store_cidrs: tuple[str, ...]
    ca_bundle: str  # PEM of the customer's CA

    @property
    def store_port(self) -> int:
        host = self.endpoint.removeprefix("https://")
        return int(host.rsplit(":", 1)[1]) if ":" in host else 443


@dataclass(frozen=True)
class ProjectPlan:
    """One tenant's project: where its stores are and how its server and job run."""

    tenant: str
    project: str
    image: str
    datasets_bucket: str
    redis_host: str
    replication_group_id: str
    user: str
    region: str
    vpc_cidr: str
    instance_types: tuple[str, ...]  # the pool the server and the job run on
    replicas: int
    materialize_every_minutes: int
    cpu: str = "500m"
    cpu_limit: str = "2"
    memory: str = "1Gi"
    workers: int = 2
    customer: CustomerFeatureStores | None = None  # a customer's cluster: its Redis and store
    gid: int = RUN_AS  # the tenant's group (components/training_spec.py tenant_pod_security)


def feature_store_yaml(plan: ProjectPlan) -> dict[str, Any]:
    """The tenant's feature_store.yaml, which the server, the job and the tenant's own
    pipelines read (workloads/features/repo.py checks it before use)."""
    if plan.customer is not None:
        online = _customer_online_store(plan, plan.customer)
    else:
        online = {
            "type": ONLINE_STORE_TYPE,
            "connection_string": f"{plan.redis_host}:{REDIS_PORT},ssl=true",
            "user": plan.user,
            "cache_name": plan.replication_group_id,
            "region": plan.region,
            "full_scan_for_deletion": False,
        }
    return {
        "project": plan.project,
        "provider": "local",
        "registry": {"registry_type": "file", "path": registry_path(plan.datasets_bucket, plan.tenant),
                     "registry_store_type": REGISTRY_STORE_TYPE, "cache_ttl_seconds": 60},
        "offline_store": {"type": "file"},
        "online_store": online,
        "entity_key_serialization_version": SERIALIZATION_VERSION,
    }


def _customer_online_store(plan: ProjectPlan, stores: CustomerFeatureStores) -> dict[str, Any]:
    """The customer's Redis over TLS verified against its CA, as the tenant's user with the
    password from the mounted Secret (the registry and the offline store are on its object
    store: the pods' AWS_ENDPOINT_URL_S3 and FEAST_S3_ENDPOINT_URL name it)."""
    return {
        "type": PASSWORD_STORE_TYPE,
        "connection_string": f"{plan.redis_host}:{stores.redis_port},ssl=true,ssl_ca_certs={CUSTOMER_CA_FILE}",
        "user": plan.user,
        "password_file": REDIS_PASSWORD_FILE,
        "full_scan_for_deletion": False,
    }


def _meta(plan: ProjectPlan, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": plan.tenant, "labels": {**LABELS, "app.kubernetes.io/name": name}}


def service_account(plan: ProjectPlan) -> dict[str, Any]:
    # No Kubernetes API token: the server and the job talk to AWS (Pod Identity) and Redis.
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(plan, SERVICE_ACCOUNT),
            "automountServiceAccountToken": False}


def config_map(plan: ProjectPlan) -> dict[str, Any]:
    import yaml

    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(plan, CONFIG_MAP),
            "data": {"feature_store.yaml": yaml.safe_dump(feature_store_yaml(plan), sort_keys=False)}}


def _pod_spec(plan: ProjectPlan, args: list[str], ports: list[dict[str, Any]], probes: dict[str, Any],
              restart: str | None = None, spread: str | None = None) -> dict[str, Any]:
    env = {"MLPLAT_TENANT": plan.tenant, "MLPLAT_FEATURE_PROJECT": plan.project,
           "MLPLAT_DATASETS_BUCKET": plan.datasets_bucket, "AWS_REGION": plan.region,
           "AWS_DEFAULT_REGION": plan.region, "HOME": "/tmp"}
    spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,
        "securityContext": tenant_pod_security(plan.gid),
        "affinity": instance_type_affinity(plan.instance_types, spread=spread),
        "containers": [{
            "name": "feast",
            "image": plan.image,
            "imagePullPolicy": "IfNotPresent",
            "args": args,
            "ports": ports,
            "env": [{"name": k, "value": v} for k, v in env.items()],
            **probes,
            "resources": {"requests": {"cpu": plan.cpu, "memory": plan.memory},
                          "limits": {"cpu": plan.cpu_limit, "memory": plan.memory}},
            "securityContext": CONTAINER_SECURITY,
            "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "config", "configMap": {"name": CONFIG_MAP}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}],
    }
    if restart:
        spec["restartPolicy"] = restart
    if plan.customer is not None:
        _customer_pod(spec, plan, plan.customer)
    return spec


def _customer_pod(spec: dict[str, Any], plan: ProjectPlan, stores: CustomerFeatureStores) -> None:
    """On a customer's cluster: the store's endpoint for every S3 client in the pod (boto3,
    Feast's registry, the Parquet readers), its CA, and the credentials as mounted files."""
    [container] = spec["containers"]
    container["env"] += [{"name": k, "value": v} for k, v in {
        "AWS_ENDPOINT_URL_S3": stores.endpoint, "FEAST_S3_ENDPOINT_URL": stores.endpoint,
        "AWS_CA_BUNDLE": CUSTOMER_CA_FILE,
        "AWS_SHARED_CREDENTIALS_FILE": f"{STORE_CREDENTIALS_DIR}/{STORE_CREDENTIALS_KEY}",
    }.items()]
    container["volumeMounts"] += [{"name": "redis", "mountPath": REDIS_PASSWORD_DIR, "readOnly": True},
                                  {"name": "store", "mountPath": STORE_CREDENTIALS_DIR, "readOnly": True},
                                  {"name": "ca", "mountPath": CUSTOMER_CA_DIR, "readOnly": True}]
    spec["volumes"] += [
        {"name": "redis", "secret": {"secretName": stores.password_secret, "defaultMode": 0o440,
                                     "items": [{"key": stores.password_key, "path": "password"}]}},
        {"name": "store", "secret": {"secretName": stores.credentials_secret, "defaultMode": 0o440,
                                     "items": [{"key": STORE_CREDENTIALS_KEY, "path": STORE_CREDENTIALS_KEY}]}},
        {"name": "ca", "configMap": {"name": CA_CONFIG_MAP_CUSTOMER}},
    ]


def _pod_labels(name: str) -> dict[str, str]:
    return {**LABELS, "app.kubernetes.io/name": name, ROLE_LABEL: "true"}


def deployment(plan: ProjectPlan) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 3}
    spec = _pod_spec(
        plan, ["serve", "--config", f"{CONFIG_DIR}/feature_store.yaml", "--port", str(PORT),
               "--workers", str(plan.workers)],
        [{"name": "http", "containerPort": PORT}, {"name": "metrics", "containerPort": METRICS_PORT}],
        {"readinessProbe": probe, "livenessProbe": {**probe, "initialDelaySeconds": 30, "failureThreshold": 6}},
        spread=NAME)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _awaited(plan, _meta(plan, NAME)),
        "spec": {"replicas": plan.replicas, "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                 "template": {"metadata": {"labels": _pod_labels(NAME)}, "spec": spec}},
    }


def _awaited(plan: ProjectPlan, meta: dict[str, Any]) -> dict[str, Any]:
    """On a customer's cluster the first deploy does not wait for the server: its Redis
    password and store credentials are the customer's Secrets in the tenant's namespace,
    which can be made only once this layer has made it (infra/checks/first_deploy.py)."""
    if plan.customer is not None:
        meta["annotations"] = {"pulumi.com/skipAwait": "true"}
    return meta


def service(plan: ProjectPlan) -> dict[str, Any]:
    """In-cluster only: ClusterIP, and the tenant's default-deny admits its own pods alone."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": _awaited(plan, _meta(plan, NAME)),
            "spec": {"type": "ClusterIP", "selector": {"app.kubernetes.io/name": NAME},
                     "ports": [{"name": "http", "port": PORT, "targetPort": "http"},
                               {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}]}}


def disruption_budget(plan: ProjectPlan) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(plan, NAME),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                     "unhealthyPodEvictionPolicy": "AlwaysAllow"}}


def schedule(every_minutes: int) -> str:
    """A cron schedule for `every_minutes`: a divisor of an hour, or whole hours dividing a
    day (the config refuses others)."""
    if every_minutes < 60:
        return f"*/{every_minutes} * * * *"
    hours = every_minutes // 60
    return {1: "0 * * * *", 24: "0 0 * * *"}.get(hours, f"0 */{hours} * * *")


def materialize_job(plan: ProjectPlan) -> dict[str, Any]:
    """Materialization as a CronJob whose Jobs Kueue admits into the tenant's queue (CPU
    and memory from its quota); one at a time, and a late run is skipped, not stacked."""
    spec = _pod_spec(plan, ["materialize", "--config", f"{CONFIG_DIR}/feature_store.yaml"], [], {}, "Never")
    labels = {**_pod_labels(MATERIALIZE), QUEUE_LABEL: LOCAL_QUEUE}
    return {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": _meta(plan, MATERIALIZE),
        "spec": {
            "schedule": schedule(plan.materialize_every_minutes),
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {"backoffLimit": 2, "activeDeadlineSeconds": plan.materialize_every_minutes * 60,
                         "ttlSecondsAfterFinished": 86400,
                         "template": {"metadata": {"labels": _pod_labels(MATERIALIZE)}, "spec": spec}},
            },
        },
    }


def network_policy(plan: ProjectPlan) -> dict[str, Any]:
    """The tenant's default-deny, extended: the server and the job (and no other pod) may
    reach the online store inside the VPC. HTTPS to S3, DNS and the Pod Identity agent the
    tenant's policies already allow; the server is reached from the tenant's own pods only.
    On a customer's cluster: the customer's Redis and its object store, at their CIDRs only."""
    if plan.customer is not None:
        stores = plan.customer
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "allow-feature-store", "namespace": plan.tenant},
                "spec": {"podSelector": {"matchLabels": {ROLE_LABEL: "true"}}, "policyTypes": ["Egress"],
                         "egress": [{"to": [{"ipBlock": {"cidr": c}} for c in stores.redis_cidrs],
                                     "ports": [{"protocol": "TCP", "port": stores.redis_port}]},
                                    {"to": [{"ipBlock": {"cidr": c}} for c in stores.store_cidrs],
                                     "ports": [{"protocol": "TCP", "port": stores.store_port}]}]}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "allow-feature-store", "namespace": plan.tenant},
            "spec": {"podSelector": {"matchLabels": {ROLE_LABEL: "true"}}, "policyTypes": ["Egress"],
                     "egress": [{"to": [{"ipBlock": {"cidr": plan.vpc_cidr}}],
                                 "ports": [{"protocol": "TCP", "port": REDIS_PORT}]}]}}


def pod_monitor(plan: ProjectPlan) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": _meta(plan, NAME),
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                     "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}]}}


def customer_ca(plan: ProjectPlan) -> dict[str, Any]:
    """The customer's CA in the tenant's namespace, for its Redis's and its store's TLS."""
    if plan.customer is None:
        raise ValueError(f"{plan.tenant}: the customer's CA exists only on a customer's cluster")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CA_CONFIG_MAP_CUSTOMER, "namespace": plan.tenant, "labels": LABELS},
            "data": {CA_KEY: plan.customer.ca_bundle}}


def project_objects(plan: ProjectPlan) -> list[dict[str, Any]]:
    """Fences and identity first (on a customer's cluster its CA too), then what runs in them."""
    first = [network_policy(plan), service_account(plan), config_map(plan)]
    if plan.customer is not None:
        first.append(customer_ca(plan))
    return [*first, deployment(plan), service(plan), disruption_budget(plan), materialize_job(plan),
            pod_monitor(plan)]


FRESHNESS = "feast_feature_freshness_seconds"


def freshness_rules(late_after_minutes: int) -> dict[str, Any]:
    """Feast's own gauge (seconds since a feature view's last materialized end time): late
    when it passes `late_after_minutes`; missing, per namespace, where a tenant's server runs
    but reports no view."""
    late = late_after_minutes * 60
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "feature-freshness", "namespace": MONITORING_NAMESPACE, "labels": LABELS},
        "spec": {"groups": [{"name": "feature-freshness", "rules": [
            {"alert": "FeatureMaterializationLate",
             "expr": f"max by (namespace, project, feature_view) ({FRESHNESS}) > {late}",
             "for": "5m",
             "labels": {"severity": "warning", "component": "features"},
             "annotations": {
                 "summary": "Features of {{ $labels.project }}/{{ $labels.feature_view }} are stale",
                 "description": f"The last materialization ended {{{{ $value | humanizeDuration }}}} ago, more than "
                                f"{late_after_minutes} minutes: check the {MATERIALIZE} CronJob in "
                                "{{ $labels.namespace }}."}},
            {"alert": "FeatureFreshnessMissing",
             "expr": f'count by (namespace) (up{{job=~".*/{NAME}"}} == 1) '
                     f"unless count by (namespace) ({FRESHNESS})",
             "for": "6h",
             "labels": {"severity": "info", "component": "features"},
             "annotations": {
                 "summary": "{{ $labels.namespace }}'s feature server runs, but no view was ever materialized",
                 "description": "Its server reports no freshness: either no feature view is applied yet, or no "
                                f"materialization has succeeded since; check the {MATERIALIZE} CronJob."}},
        ]}]},
    }

