"""A brand-new environment comes up: no Kubernetes object, ours or a chart's, makes the
first `pulumi up` wait for a published model, a dataset or a joined GPU node."""

from __future__ import annotations

import copy

import pytest

from infra.checks.first_deploy import SKIP_AWAIT, SKIP_AWAIT_REASONS, waits
from infra.preview.engine import kubernetes_objects
from tests.conftest import CUSTOMER_STACKS, VARIANTS, preview

DATA_BUCKETS = ("models", "datasets")  # filled after the deploy: by training, export and data loads
GPU_PRESENT = "nvidia.com/gpu.present"


def data_locations(result) -> list[str]:
    """s3://<bucket> of the buckets whose contents arrive only after the deploy, as the
    program will create them."""
    buckets = {r.name: r.inputs(mask_secrets=False)["bucket"] for r in result.registrations
               if r.type == "aws:s3/bucket:Bucket"}
    return [f"s3://{buckets[name]}" for name in DATA_BUCKETS]


def node_labels(inputs: dict) -> dict[str, str]:
    """The labels a node group's nodes carry: the group's own, and the ones kubelet and EKS
    set (instance type, node group name)."""
    return {**(inputs.get("labels") or {}), "node.kubernetes.io/instance-type": inputs["instanceTypes"][0],
            "eks.amazonaws.com/nodegroup": inputs.get("nodeGroupName") or ""}


def gpu_node_labels(result) -> dict[str, frozenset[str]]:
    """Node labels (key -> values) that only the GPU node groups carry, from the node groups
    the program will create."""
    groups = [node_labels(r.inputs(mask_secrets=False)) for r in result.registrations
              if r.type == "aws:eks/nodeGroup:NodeGroup"]
    gpu = [labels for labels in groups if labels.get(GPU_PRESENT) == "true"]
    other = [labels for labels in groups if labels.get(GPU_PRESENT) != "true"]
    keys = {key for labels in gpu for key in labels}
    return {key: frozenset(labels[key] for labels in gpu if key in labels) -
            frozenset(labels[key] for labels in other if key in labels) for key in keys}


def customer_facts(stack: str) -> tuple[list[str], dict[str, frozenset[str]]]:
    """A customer's cluster: its data buckets and the labels only its GPU groups carry, from
    its descriptor (its GPU nodes are there before the layer, but advertise GPUs only once
    the GPU Operator has built their driver)."""
    from tests.conftest import customer_descriptor

    descriptor = customer_descriptor(stack)
    gpu = [g.selector for g in descriptor.nodes if g.gpus]
    other = [g.selector for g in descriptor.nodes if not g.gpus]
    labels = {key: frozenset(s[key] for s in gpu if key in s) - frozenset(s[key] for s in other if key in s)
              for s in gpu for key in s}
    return [f"s3://{descriptor.buckets[name]}" for name in DATA_BUCKETS], labels


def first_deploy_waits(result, objects=None) -> list[str]:
    """What the cluster layer (`result`) would wait on, against the buckets and node
    groups its cloud layer creates (a customer's: its descriptor's)."""
    if result.stack in CUSTOMER_STACKS:
        locations, labels = customer_facts(result.stack)
    else:
        cloud = preview(result.stack.removesuffix("-cluster"))
        locations, labels = data_locations(cloud), gpu_node_labels(cloud)
    return waits(objects if objects is not None else kubernetes_objects(result.registrations),
                 data_locations=locations, gpu_node_labels=labels)


@pytest.mark.parametrize(("stack", "mode"), VARIANTS, ids=[f"{s}-{m}" for s, m in VARIANTS])
def test_a_new_environment_waits_on_no_model_dataset_or_gpu_node(stack, mode):
    result = preview(stack, mode)
    assert first_deploy_waits(result) == []


def _inference_deployment(objects):
    return next(i for i, (owner, o) in enumerate(objects)
                if owner == "program" and o["kind"] == "Deployment" and o["metadata"]["namespace"] == "inference"
                and o["metadata"]["name"] == "triton")


def test_serving_created_with_replicas_would_wait_for_the_model_and_a_gpu_node():
    result = preview("prod-cluster")
    objects = copy.deepcopy(kubernetes_objects(result.registrations))
    index = _inference_deployment(objects)
    name = objects[index][1]["metadata"]["name"]
    del objects[index][1]["spec"]["replicas"]  # the defect: the API server's default, one replica
    models = data_locations(preview("prod"))[0]
    assert first_deploy_waits(result, objects) == [
        f"program: Deployment inference/{name}: waits for data in {models} (container reads it at start) and "
        "a GPU node (triton asks for nvidia.com/gpu), which a new environment does not have"]


def test_cpu_serving_created_with_replicas_would_wait_for_the_model_only():
    result = preview("smb-cluster")
    objects = copy.deepcopy(kubernetes_objects(result.registrations))
    index = _inference_deployment(objects)
    objects[index][1]["spec"]["replicas"] = 2
    [line] = first_deploy_waits(result, objects)
    assert f"waits for data in {data_locations(preview('smb'))[0]} (container reads it at start), which" in line
    assert "GPU" not in line


def test_a_job_pinned_to_a_gpu_pool_waits_and_skip_await_needs_a_reason():
    result = preview("prod-cluster")
    labels = gpu_node_labels(preview("prod"))
    assert "mlplat.io/pool" in labels and "mlplat.io/gpu-model" in labels
    pool = sorted(labels["mlplat.io/pool"])[0]
    system = sorted(_pools(preview("prod")) - labels["mlplat.io/pool"])[0]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "warm-up", "namespace": "ml"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}], "affinity": {"nodeAffinity": {
               "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                   {"matchExpressions": [{"key": "mlplat.io/pool", "operator": "In", "values": [pool]}]}]}}}}}}}
    assert first_deploy_waits(result, [("program", job)]) == [
        "program: Job ml/warm-up: waits for a GPU node (required node affinity), which a new environment does not have"]
    # A second term any node satisfies: the pod can run without a GPU node.
    either = copy.deepcopy(job)
    either["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"].append({"matchExpressions": [{"key": "mlplat.io/pool", "operator": "In",
                                                           "values": [system]}]})
    assert first_deploy_waits(result, [("program", either)]) == []
    skipped = copy.deepcopy(job)
    skipped["metadata"]["annotations"] = {SKIP_AWAIT: "true"}
    assert first_deploy_waits(result, [("program", skipped)]) == [
        f"program: Job ml/warm-up: sets {SKIP_AWAIT} with no reason listed beside it"]
    assert waits([("program", skipped)], data_locations=[], gpu_node_labels=labels,
                 skip_reasons={**SKIP_AWAIT_REASONS, "Job ml/warm-up": "runs when the pool joins"}) == []


def _pools(result) -> set[str]:
    return {r.inputs(mask_secrets=False)["labels"]["mlplat.io/pool"] for r in result.registrations
            if r.type == "aws:eks/nodeGroup:NodeGroup"}


def test_only_gpu_node_groups_count_as_gpu_nodes():
    result = preview("prod")
    labels = gpu_node_labels(result)
    assert labels[GPU_PRESENT] == frozenset({"true"})
    assert _pools(result) - labels["mlplat.io/pool"], "prod has a pool without GPUs: it is no GPU node"


def test_a_service_waits_for_pods_its_workloads_cannot_start():
    result = preview("prod-cluster")
    objects = copy.deepcopy(kubernetes_objects(result.registrations))
    triton = next(o for owner, o in objects if owner == "program" and o["kind"] == "Service"
                  and o["metadata"]["name"] == "triton-stable")
    dcgm = next(o for owner, o in objects if owner == "release dcgm-exporter" and o["kind"] == "Service")
    for service in (triton, dcgm):
        del service["metadata"]["annotations"][SKIP_AWAIT]  # the defect: the provider waits for a ready pod
    lines = first_deploy_waits(result, objects)
    assert sorted(lines) == [
        "program: Service inference/triton-stable: waits for a ready pod, but Deployment inference/triton has zero "
        "replicas in a new environment",
        "release dcgm-exporter: Service monitoring/dcgm-exporter: waits for a ready pod, but DaemonSet "
        "monitoring/dcgm-exporter waits for a GPU node (required node affinity) in a new environment"]


def test_a_service_with_one_workload_that_can_start_does_not_wait():
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a", "namespace": "ml"},
                  "spec": {"replicas": 0, "template": {"metadata": {"labels": {"app": "x"}},
                                                       "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "b", "namespace": "ml"},
              "spec": {"template": {"metadata": {"labels": {"app": "x", "tier": "b"}},
                                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ml"},
               "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]}}
    assert waits([("program", deployment), ("program", daemon), ("program", service)],
                 data_locations=[], gpu_node_labels={}) == []
    assert waits([("program", deployment), ("program", service)], data_locations=[], gpu_node_labels={}) == [
        "program: Service ml/s: waits for a ready pod, but Deployment ml/a has zero replicas in a new environment"]
    # Pods of another namespace, or a Service selecting pods an operator makes: nothing to judge.
    elsewhere = {**deployment, "metadata": {"name": "a", "namespace": "other"}}
    assert waits([("program", elsewhere), ("program", service)], data_locations=[], gpu_node_labels={}) == []


def test_a_gpu_nodes_daemonset_left_awaited_would_hold_the_update_up():
    """The pool's GPU check and the charts' GPU DaemonSets: each GPU node that joins during
    an update (or fails its check) would hold it up; a DaemonSet for every node would not."""
    result = preview("prod-cluster")
    objects = copy.deepcopy(kubernetes_objects(result.registrations))
    planted = []
    for owner, obj in objects:
        if obj["kind"] == "DaemonSet" and obj["metadata"]["name"] in ("gpu-check-train-p5", "dcgm-exporter"):
            del obj["metadata"]["annotations"][SKIP_AWAIT]  # the defect: awaited
            planted.append(f"{owner}: DaemonSet {obj['metadata']['namespace']}/{obj['metadata']['name']}")
    assert len(planted) == 2
    lines = first_deploy_waits(result, objects)
    assert [line.split(": waits")[0] for line in lines] == planted
    assert all("a GPU node" in line and "joins during the update" in line for line in lines)
    # A DaemonSet for every node, awaited, is fine: system nodes are there from the start.
    every = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "log-agent", "namespace": "ml"},
             "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    assert first_deploy_waits(result, [("program", every)]) == []
