"""The preview's model of the API server's validation, against what a real one accepts: the
Kubernetes documentation's own example of each kind the model judges passes, and each object
the API server refuses for a rule of the model is refused with that rule's name."""

from __future__ import annotations

import copy

import pytest

from infra.checks.apiserver import problems

NGINX = {"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}

# The Kubernetes documentation's examples (concepts/workloads, concepts/services-networking).
DOCUMENTED = {
    "Deployment": {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx-deployment", "labels": {"app": "nginx"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [NGINX]}}},
    },
    "StatefulSet": {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "nginx"}}, "serviceName": "nginx", "replicas": 3,
            "minReadySeconds": 10,
            "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {
                "terminationGracePeriodSeconds": 10,
                "containers": [{"name": "nginx", "image": "registry.k8s.io/nginx-slim:0.24",
                                "ports": [{"containerPort": 80, "name": "web"}],
                                "volumeMounts": [{"name": "www", "mountPath": "/usr/share/nginx/html"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "www"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": "my-storage-class",
                "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    },
    "DaemonSet": {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "fluentd-elasticsearch", "namespace": "kube-system",
                     "labels": {"k8s-app": "fluentd-logging"}},
        "spec": {"selector": {"matchLabels": {"name": "fluentd-elasticsearch"}}, "template": {
            "metadata": {"labels": {"name": "fluentd-elasticsearch"}},
            "spec": {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                                      "effect": "NoSchedule"},
                                     {"key": "node-role.kubernetes.io/master", "operator": "Exists",
                                      "effect": "NoSchedule"}],
                     "containers": [{"name": "fluentd-elasticsearch",
                                     "image": "quay.io/fluentd_elasticsearch/fluentd:v5.0.1",
                                     "resources": {"limits": {"memory": "200Mi"},
                                                   "requests": {"cpu": "100m", "memory": "200Mi"}},
                                     "volumeMounts": [{"name": "varlog", "mountPath": "/var/log"}]}],
                     "terminationGracePeriodSeconds": 30,
                     "volumes": [{"name": "varlog", "hostPath": {"path": "/var/log"}}]}}},
    },
    "ReplicaSet": {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "frontend", "labels": {"app": "guestbook", "tier": "frontend"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"tier": "frontend"}}, "template": {
            "metadata": {"labels": {"tier": "frontend"}},
            "spec": {"containers": [{"name": "php-redis", "image": "us-docker.pkg.dev/google-samples/containers/gke/"
                                                                   "gb-frontend:v5"}]}}},
    },
    "Job": {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
        "spec": {"backoffLimit": 4, "template": {"spec": {
            "containers": [{"name": "pi", "image": "perl:5.34.0",
                            "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]}],
            "restartPolicy": "Never"}}},
    },
    "CronJob": {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "hello"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "hello", "image": "busybox:1.28", "imagePullPolicy": "IfNotPresent",
                            "command": ["/bin/sh", "-c", "date; echo Hello from the Kubernetes cluster"]}],
            "restartPolicy": "OnFailure"}}}}},
    },
    "Pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nginx"}, "spec": {"containers": [NGINX]}},
    "Service": {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "my-service"},
        "spec": {"selector": {"app.kubernetes.io/name": "MyApp"},
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 9376},
                           {"name": "https", "protocol": "TCP", "port": 443, "targetPort": 9377}]},
    },
}


@pytest.mark.parametrize("kind", sorted(DOCUMENTED))
def test_the_documented_example_of_each_kind_is_accepted(kind):
    assert problems(DOCUMENTED[kind]) == []


def _edit(kind: str, change) -> dict:
    obj = copy.deepcopy(DOCUMENTED[kind])
    change(obj)
    return obj


def _pod(obj: dict) -> dict:
    spec = obj["spec"]
    while "containers" not in spec:
        spec = (spec.get("template") or spec.get("jobTemplate"))["spec"]
    return spec


REFUSED = [
    # A StatefulSet mounting a volume that neither its template nor its claim templates define.
    ("StatefulSet", lambda o: o["spec"].pop("volumeClaimTemplates"), "ValidateVolumeMounts"),
    ("StatefulSet", lambda o: o["spec"]["volumeClaimTemplates"][0]["metadata"].update(name="data"),
     "ValidateVolumeMounts"),
    ("Deployment", lambda o: _pod(o).update(restartPolicy="Never"), "ValidatePodTemplateSpec"),
    ("Job", lambda o: _pod(o).update(restartPolicy="Always"), "ValidateJobSpec"),
    ("Deployment", lambda o: o["spec"]["selector"]["matchLabels"].update(app="other"),
     "ValidatePodTemplateSpecForReplicaSet"),
    ("Pod", lambda o: o["spec"]["containers"].append(dict(NGINX)), "validateContainers"),
    ("Service", lambda o: o["spec"]["ports"][1].pop("name"), "ValidateService"),
    ("DaemonSet", lambda o: _pod(o)["volumes"][0]["hostPath"].update(type="Folder"), "validateHostPathType"),
]


@pytest.mark.parametrize(("kind", "change", "rule"), REFUSED, ids=[f"{k}-{r}" for k, _c, r in REFUSED])
def test_what_the_api_server_refuses_is_refused_by_its_rule(kind, change, rule):
    assert rule in {p.rule for p in problems(_edit(kind, change))}
