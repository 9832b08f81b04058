"""What an environment's training job needs from the platform before it can run, read from what
the engine receives: Kueue can admit every resource its pods ask for, and on Lustre the
tenant's directory is made (owned by the pods' UID) before the JobSet is created. Every
Kubernetes object is the cluster layer's (`<env>-cluster`); where there is Lustre is the
cloud layer's descriptor."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from tests.conftest import DESCRIPTOR, STACKS, preview
from tests.helpers import of_type, one

RELEASE = "kubernetes:helm.sh/v4:Chart"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
JOB = "kubernetes:batch/v1:Job"


def pod_specs(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return [rj["template"]["spec"]["template"]["spec"] for rj in jobset["spec"]["replicatedJobs"]]


def requested(pod: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        resources = container.get("resources", {})
        names |= set(resources.get("requests", {})) | set(resources.get("limits", {}))
    return names


def excluded_prefixes(result) -> list[str]:
    values = one(result, RELEASE, "kueue").inputs()["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    return config.get("resources", {}).get("excludeResourcePrefixes", [])


# Stacks that run a training job, and those of them with Lustre scratch (stacks/*.yaml).
TRAINING_STACKS = ("dev", "staging", "prod")
LUSTRE_STACKS = ("staging", "prod")


def lustre_tenants(result) -> set[str]:
    return {r.inputs()["metadata"]["namespace"] for r in of_type(result, "kubernetes:core/v1:PersistentVolumeClaim")
            if r.inputs()["metadata"]["name"] == "lustre-scratch"}


def cluster(environment: str):
    return preview(f"{environment}-cluster")


def test_the_stack_lists_match_the_stacks():
    assert {s for s in STACKS if of_type(cluster(s), JOBSET)} == set(TRAINING_STACKS)
    assert {s for s in STACKS if lustre_tenants(cluster(s))} == set(LUSTRE_STACKS)
    # The cloud layer makes the file system the cluster layer's claims mount, and no Kubernetes object.
    assert {s for s in STACKS if preview(s).stack_outputs[DESCRIPTOR].get("lustre")} == set(LUSTRE_STACKS)
    for s in STACKS:
        assert of_type(preview(s), JOBSET) == [] and lustre_tenants(preview(s)) == set()


def limit_range_defaults(result, namespace: str) -> set[str]:
    """What the namespace's LimitRange adds to a container that names no such resource:
    the API server applies it at admission, and Kueue applies it too when it sums a
    workload's requests."""
    names: set[str] = set()
    for reg in of_type(result, "kubernetes:core/v1:LimitRange"):
        body = reg.inputs()
        if body["metadata"]["namespace"] == namespace:
            for limit in body["spec"]["limits"]:
                names |= set(limit.get("defaultRequest", {})) | set(limit.get("default", {}))
    return names


@pytest.mark.parametrize("stack", TRAINING_STACKS)
def test_kueue_covers_or_ignores_every_resource_the_pods_ask_for(stack):
    result = cluster(stack)
    excluded = excluded_prefixes(result)
    queues = {q.inputs()["metadata"]["name"]: q.inputs() for q in of_type(result, CLUSTER_QUEUE)}
    for reg in of_type(result, JOBSET):
        body = reg.inputs()
        namespace = body["metadata"]["namespace"]
        covered = {r for g in queues[namespace]["spec"]["resourceGroups"] for r in g["coveredResources"]}
        defaults = limit_range_defaults(result, namespace)
        assert "ephemeral-storage" in defaults  # the quota counts node-local disk
        for pod in pod_specs(body):
            asked = requested(pod) | defaults
            missing = {r for r in asked if r not in covered and not any(r.startswith(p) for p in excluded)}
            assert missing == set(), f"{stack} {body['metadata']['name']}: ClusterQueue {namespace} cannot admit"
            # Pods on EFA pools ask for huge pages, which no ClusterQueue covers.
            efa = "vpc.amazonaws.com/efa" in asked
            assert ("hugepages-2Mi" in asked) == efa and ("hugepages-2Mi" in covered) is False


def lustre_jobs(result) -> list:
    """The Jobs that make the tenants' Lustre directories (other Jobs, such as the inference
    gateway's certificate Job, are not about Lustre)."""
    return [r for r in of_type(result, JOB) if r.inputs()["metadata"]["name"] == "lustre-tenant-directories"]


@pytest.mark.parametrize("stack", LUSTRE_STACKS)
def test_lustre_jobsets_wait_for_their_tenants_directory(stack):
    result = cluster(stack)
    [job] = lustre_jobs(result)
    [container] = job.inputs()["spec"]["template"]["spec"]["containers"]
    made = dict(arg.split("=") for arg in container["command"][4:])  # directory -> its group
    env = {e["name"]: e["value"] for e in container["env"]}
    on_lustre = 0
    for reg in of_type(result, JOBSET):
        body = reg.inputs()
        for pod in pod_specs(body):
            claims = {v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
            if not claims:
                continue  # the all-reduce check writes nothing
            on_lustre += 1
            assert job.urn in reg.dependencies, f"{stack} {body['metadata']['name']} does not wait for {job.name}"
            for mount in (m for c in pod["containers"] for m in c.get("volumeMounts", []) if m["name"] in claims):
                # The tenant's directory on the mount, where the trainer's job directory goes.
                directory = str(PurePosixPath(mount["mountPath"]) / body["metadata"]["namespace"])
                assert directory in made
                # The pods get in by the tenant's group alone: the directory is root's.
                security = pod["securityContext"]
                assert security["runAsGroup"] == security["fsGroup"] == int(made[directory])
                assert security["runAsUser"] != 0 and not security.get("supplementalGroups")
    assert env["OWNER"] == "0" and env["MODE"] == "2770"
    assert on_lustre, f"{stack}: no training pod mounts Lustre"


@pytest.mark.parametrize("stack", STACKS)
def test_every_tenant_gets_a_directory_wherever_there_is_lustre(stack):
    result = cluster(stack)
    tenants = lustre_tenants(result)
    jobs = lustre_jobs(result)
    if not tenants:
        assert jobs == [], f"{stack} has no Lustre claims but makes Lustre directories"
        return
    [job] = jobs
    [container] = job.inputs()["spec"]["template"]["spec"]["containers"]
    made = dict(arg.split("=") for arg in container["command"][4:])
    assert sorted(made) == sorted(f"/fsx/{t}" for t in tenants)
    assert len(set(made.values())) == len(made), "each tenant's directory has a group of its own"
