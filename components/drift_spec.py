"""The scheduled drift check of the served model, and where its scores go, as plain data.

A CronJob in the serving namespace, beside the model it watches, runs `python -m
workloads.monitor drift-job` (workloads/monitor/drift_job.py): the served version's
training data, found through the lineage as the model's tenant (its tracking user, its
datasets), against the last days of request logs. It pushes the scores to the Prometheus
Pushgateway in `monitoring` (a batch job is gone before Prometheus could scrape it), and
the `ModelInputDrift` alert fires on a drifted feature.

Why not in the tenant's namespace: whatever a pod there holds, the tenant's developers hold
too (they may run pods under any of its ServiceAccounts and exec into any of its pods), and
the Pushgateway takes any series from whoever reaches it. In the serving namespace, where no
tenant may run a pod, the check's pods are the only ones that can push. Nothing here
imports Pulumi.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from components.features_spec import schedule
from components.request_log_spec import key_prefix
from components.tenancy_spec import MONITORING_NAMESPACE, POD_IDENTITY_AGENT, pods_in
from components.tenant_paths import datasets_prefix, list_condition
from components.tracking_spec import NAME as TRACKING_NAME
from components.tracking_spec import NAMESPACE as TRACKING_NAMESPACE
from components.tracking_spec import PORT as TRACKING_PORT
from components.training_spec import CONTAINER_SECURITY, POD_SECURITY
from workloads.monitor.alarm import MIN_ROWS

PUSHGATEWAY = "pushgateway"
PUSHGATEWAY_PORT = 9091
PUSHGATEWAY_URL = f"http://{PUSHGATEWAY}.{MONITORING_NAMESPACE}.svc.cluster.local:{PUSHGATEWAY_PORT}"
DRIFT_ALERT = "ModelInputDrift"
STALE_ALERT = "ModelDriftCheckMissing"


@dataclass(frozen=True)
class DriftPlan:
    model: str  # the Triton model
    version: int  # the Triton version served
    registered_model: str  # its name in the registry
    tenant: str  # whose model it is: its tracking user, its datasets
    namespace: str  # where the check runs: the serving namespace
    image: str  # the platform's serving image (it carries workloads/monitor)
    logs: str  # s3://<datasets bucket>/request-logs/<model>/
    region: str
    aws_cidrs: tuple[str, ...]  # the AWS APIs it calls (the VPC's interface endpoints, the S3 prefix list)
    every_hours: int = 24
    days: int = 1
    min_rows: int = MIN_ROWS  # fewer logged requests are not judged (docs/monitoring.md: the power)
    tracking_env: tuple[tuple[str, str], ...] = ()  # the tenant's MLflow user (infra/training.py tracking_env)
    # Where training pods read datasets on Lustre, and the bucket that directory mirrors:
    # the check reads the same files from S3 (None: the stack has no Lustre).
    lustre_datasets: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        return drift_name(self.model)


def drift_name(model: str) -> str:
    """The CronJob and its ServiceAccount; a CronJob's name leaves room for its Jobs' suffix."""
    return f"model-drift-{model}"[:52]


def logs_uri(bucket: str, model: str) -> str:
    return f"s3://{bucket}/{key_prefix(model)}"


def role_name(prefix: str, tenant: str, model: str) -> str:
    return f"{prefix}-{tenant}-drift-{model}"[:64]


def pod_labels(model: str) -> dict[str, str]:
    """The check's pods' labels: the Pushgateway and the tracking server admit these, in
    the serving namespace only."""
    return {"app.kubernetes.io/name": "model-drift", "app.kubernetes.io/instance": model,
            "app.kubernetes.io/part-of": "mlplat"}


def command(plan: DriftPlan) -> list[str]:
    return ["python", "-m", "workloads.monitor", "drift-job", "--registered-model", plan.registered_model,
            "--model", plan.model, "--version", str(plan.version), "--logs", plan.logs, "--days", str(plan.days),
            "--min-rows", str(plan.min_rows), "--pushgateway", PUSHGATEWAY_URL,
            *(["--lustre-datasets", "=".join(plan.lustre_datasets)] if plan.lustre_datasets else [])]


def service_account(plan: DriftPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": plan.name, "namespace": plan.namespace, "labels": pod_labels(plan.model)},
            "automountServiceAccountToken": False}


def cron_job(plan: DriftPlan) -> dict[str, Any]:
    """One check at a time; a late one is skipped, not stacked; a run that hangs is ended
    after an hour. Requests equal limits and its scratch is bounded by the emptyDir's size,
    so a check costs at most one core and 4 GiB for an hour a day."""
    resources = {"cpu": "1", "memory": "4Gi"}
    container = {
        "name": "drift",
        "image": plan.image,
        "imagePullPolicy": "Always",
        "command": command(plan),
        "env": [{"name": "AWS_REGION", "value": plan.region}, {"name": "AWS_DEFAULT_REGION", "value": plan.region},
                {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"}, {"name": "HOME", "value": "/tmp"},
                *({"name": k, "value": v} for k, v in plan.tracking_env)],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": CONTAINER_SECURITY,
    }
    pod = {"serviceAccountName": plan.name, "automountServiceAccountToken": False,
           "securityContext": POD_SECURITY,
           "restartPolicy": "Never", "containers": [container],
           "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}]}
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": plan.name, "namespace": plan.namespace, "labels": pod_labels(plan.model)},
        "spec": {
            "schedule": schedule(plan.every_hours * 60),
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": pod_labels(plan.model)},
                "spec": {"backoffLimit": 2, "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 86400,
                         "template": {"metadata": {"labels": pod_labels(plan.model)}, "spec": pod}},
            },
        },
    }


def network_policy(plan: DriftPlan) -> dict[str, Any]:
    """The serving namespace denies both ways and lets every pod resolve names; the check
    also reaches the AWS APIs, the Pod Identity agent, the tracking server and the
    Pushgateway."""
    def tcp(port: int) -> list[dict[str, Any]]:
        return [{"protocol": "TCP", "port": port}]

    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"{plan.name}-egress", "namespace": plan.namespace},
            "spec": {"podSelector": {"matchLabels": pod_labels(plan.model)}, "policyTypes": ["Egress"], "egress": [
                {"to": [{"ipBlock": {"cidr": c}} for c in plan.aws_cidrs], "ports": tcp(443)},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": tcp(80)},
                {"to": [pods_in(TRACKING_NAMESPACE, {"app.kubernetes.io/name": TRACKING_NAME})],
                 "ports": tcp(TRACKING_PORT)},
                {"to": [pods_in(MONITORING_NAMESPACE, {"app.kubernetes.io/name": PUSHGATEWAY})],
                 "ports": tcp(PUSHGATEWAY_PORT)},
            ]}}


def drift_rules(plan: DriftPlan) -> dict[str, Any]:
    """A drifted feature of the served version fires when two checks in a row found it
    drifted: the Pushgateway holds each check's verdict until the next, so a verdict that
    stays 1 past one interval was given again by the next check. One run's chance of a
    false alarm is at most 5% (workloads/monitor/alarm.py); two in a row, about 0.25%. A
    check that stopped reporting fires once two runs are missed."""
    stale_s = 3 * plan.every_hours * 3600  # the last report, then two runs that did not report
    model = f'model="{plan.model}"'
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": plan.name, "namespace": MONITORING_NAMESPACE,
                     "labels": {"app.kubernetes.io/part-of": "mlplat", "app.kubernetes.io/component": "drift"}},
        "spec": {"groups": [{"name": "model-drift", "rules": [
            {"alert": DRIFT_ALERT,
             "expr": f'max by (model, version, column) (mlplat_model_input_drifted{{{model}}}) == 1',
             "for": f"{plan.every_hours + 1}h",
             "labels": {"severity": "warning", "component": "drift"},
             "annotations": {"summary": "The requests to {{ $labels.model }} drifted from its training data",
                             "description": "Feature {{ $labels.column }} of the logged requests differs from the "
                                            "training data of version {{ $labels.version }} in two checks in a "
                                            "row (Evidently's test, held with the run's other columns): "
                                            "retrain, or roll back to a version trained on such data."}},
            {"alert": STALE_ALERT,
             "expr": f"(time() - max by (model) (mlplat_model_drift_check_timestamp_seconds{{{model}}})) > {stale_s} "
                     f'or absent(mlplat_model_drift_check_timestamp_seconds{{{model}}})',
             "for": "15m",
             "labels": {"severity": "warning", "component": "drift"},
             "annotations": {"summary": f"No drift check of {plan.model} has reported for two runs",
                             "description": f"See the {plan.name} CronJob in namespace {plan.namespace}."}},
        ]}]},
    }


def objects(plan: DriftPlan) -> list[dict[str, Any]]:
    return [service_account(plan), network_policy(plan), cron_job(plan)]


# --- The Pushgateway -------------------------------------------------------------------


# What the checks push (workloads/monitor/drift_job.py); the scrape keeps these alone.
PUSHED_METRICS = ("mlplat_model_input_drift_score", "mlplat_model_input_drifted", "mlplat_model_input_drift_rows",
                  "mlplat_model_drift_check_timestamp_seconds")


def pushgateway_objects(image: str, plan: DriftPlan) -> list[dict[str, Any]]:
    """One replica (it holds what batch jobs pushed since it started; each check pushes
    again on its next run). Anything able to reach it can push any series, so: only the
    check's pods reach it (in the serving namespace, by its name, which the API server sets;
    no tenant may run a pod there), and the scrape keeps only the drift series of the
    check's model, under the Pushgateway's own job and instance (honorLabels off): even a
    pod that got in could not feed the canary's abort rule, Triton's autoscaler or another
    model's alert."""
    labels = {"app.kubernetes.io/name": PUSHGATEWAY, "app.kubernetes.io/part-of": "mlplat"}
    meta = {"name": PUSHGATEWAY, "namespace": MONITORING_NAMESPACE, "labels": labels}
    resources = {"cpu": "100m", "memory": "128Mi"}
    container = {
        "name": PUSHGATEWAY, "image": image, "imagePullPolicy": "Always",
        "args": [f"--web.listen-address=:{PUSHGATEWAY_PORT}"],
        "ports": [{"name": "http", "containerPort": PUSHGATEWAY_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "http"}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/-/healthy", "port": "http"}, "periodSeconds": 20},
        "resources": {"requests": dict(resources), "limits": {"cpu": "500m", "memory": "256Mi"}},
        "securityContext": CONTAINER_SECURITY,
    }
    kept = {"sourceLabels": ["__name__", "model"], "separator": ";", "action": "keep",
            "regex": f"({'|'.join(PUSHED_METRICS)});{re.escape(plan.model)}"}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            "replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "automountServiceAccountToken": False,
                "securityContext": {**POD_SECURITY, "runAsUser": 65534, "runAsGroup": 65534, "fsGroup": 65534},
                "containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
            "type": "ClusterIP", "selector": labels,
            "ports": [{"name": "http", "port": PUSHGATEWAY_PORT, "targetPort": "http", "protocol": "TCP"}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": f"{PUSHGATEWAY}-from-drift-checks", "namespace": MONITORING_NAMESPACE},
         "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"], "ingress": [{
             "from": [pods_in(plan.namespace, pod_labels(plan.model))],
             "ports": [{"protocol": "TCP", "port": PUSHGATEWAY_PORT}]}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": meta, "spec": {
            "selector": {"matchLabels": labels},
            # A pushed job or instance label is kept as exported_job / exported_instance;
            # model, version and column are the pushed series' own.
            "endpoints": [{"port": "http", "interval": "30s", "honorLabels": False,
                           "metricRelabelings": [kept]}]}},
    ]


# --- AWS side -------------------------------------------------------------------------


def s3_statements(bucket_arn: str, key_arn: str, tenant: str, model: str) -> list[dict[str, Any]]:
    """Read the model's tenant's datasets (the reference its lineage names; the tenant's
    Lustre datasets directory mirrors that prefix) and the model's request logs; decrypt
    with the datasets key. No other tenant's datasets, no other model's logs."""
    datasets, logs = datasets_prefix(tenant), key_prefix(model)
    return [
        {"Sid": "ListDatasetsAndLogs", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn],
         "Condition": {"StringLike": {"s3:prefix": [*list_condition(datasets)["StringLike"]["s3:prefix"],
                                                    *list_condition(logs)["StringLike"]["s3:prefix"]]}}},
        {"Sid": "ReadDatasetsAndLogs", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": [f"{bucket_arn}/{datasets}*", f"{bucket_arn}/{logs}*"]},
        {"Sid": "DecryptDatasets", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": [key_arn]},
    ]
