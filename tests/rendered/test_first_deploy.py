"""A brand-new environment comes up: no Kubernetes object, ours or a chart's, makes the
first `pulumi up` wait for a published model, a dataset or a joined GPU node."""

from __future__ import annotations

import copy

import pytest

from infra.checks.first_deploy import SKIP_AWAIT, SKIP_AWAIT_REASONS, waits
from infra.preview.engine import kubernetes_objects
from tests.conftest import VARIANTS, preview

DATA_BUCKETS = ("models", "datasets")  # filled after the deploy: by training, export and data loads
GPU_PRESENT = "nvidia.com/gpu.present"


def data_locations(result) -> list[str]:
    """s3://<bucket> of the buckets whose contents arrive only after the deploy, as the
    program will create them."""
    buckets = {r.name: r.inputs(mask_secrets=False)["bucket"] for r in result.registrations
               if r.type == "aws:s3/bucket:Bucket"}
    return [f"s3://{buckets[name]}" for name in DATA_BUCKETS]


def gpu_node_labels(result) -> dict[str, frozenset[str]]:
    """Node labels (key -> values) that only the GPU node groups carry, from the node groups
    the program will create."""
    groups = [r.inputs(mask_secrets=False).get("labels") or {} for r in result.registrations
              if r.type == "aws:eks/nodeGroup:NodeGroup"]
    gpu = [labels for labels in groups if labels.get(GPU_PRESENT) == "true"]
    other = [labels for labels in groups if labels.get(GPU_PRESENT) != "true"]
    keys = {key for labels in gpu for key in labels}
    return {key: frozenset(labels[key] for labels in gpu if key in labels) -
            frozenset(labels[key] for labels in other if key in labels) for key in keys}


def first_deploy_waits(result, objects=None) -> list[str]:
    return waits(objects if objects is not None else kubernetes_objects(result.registrations),
                 data_locations=data_locations(result), gpu_node_labels=gpu_node_labels(result))


@pytest.mark.parametrize(("stack", "mode"), VARIANTS, ids=[f"{s}-{m}" for s, m in VARIANTS])
def test_a_new_environment_waits_on_no_model_dataset_or_gpu_node(stack, mode):
    result = preview(stack, mode)
    assert first_deploy_waits(result) == []


def _inference_deployment(objects):
    return next(i for i, (owner, o) in enumerate(objects)
                if owner == "program" and o["kind"] == "Deployment" and o["metadata"]["namespace"] == "inference")


def test_serving_created_with_replicas_would_wait_for_the_model_and_a_gpu_node():
    result = preview("prod")
    objects = copy.deepcopy(kubernetes_objects(result.registrations))
    index = _inference_deployment(objects)
    name = objects[index][1]["metadata"]["name"]
    del objects[index][1]["spec"]["replicas"]  # the defect: the API server's default, one replica
    models = data_locations(result)[0]
    assert first_deploy_waits(result, objects) == [
        f"program: Deployment inference/{name}: waits for data in {models} (container reads it at start) and "
        "a GPU node (triton asks for nvidia.com/gpu), which a new environment does not have"]


def test_cpu_serving_created_with_replicas_would_wait_for_the_model_only():
    result = preview("smb")
    objects = copy.deepcopy(kubernetes_objects(result.registrations))
    index = _inference_deployment(objects)
    objects[index][1]["spec"]["replicas"] = 2
    [line] = first_deploy_waits(result, objects)
    assert f"waits for data in {data_locations(result)[0]} (container reads it at start), which" in line
    assert "GPU" not in line


def test_a_job_pinned_to_a_gpu_pool_waits_and_skip_await_needs_a_reason():
    result = preview("prod")
    labels = gpu_node_labels(result)
    assert "mlplat.io/pool" in labels and "mlplat.io/gpu-model" in labels
    pool = sorted(labels["mlplat.io/pool"])[0]
    system = sorted(_pools(result) - labels["mlplat.io/pool"])[0]
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
