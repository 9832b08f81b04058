"""`mlplat:training`: the job each stack runs, and every mistake as one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError, load_stack, parse_config
from infra.training_plan import resolve_training

REPO = Path(__file__).resolve().parents[2]


def raw_stack(name: str) -> dict:
    return yaml.safe_load((REPO / "stacks" / f"Pulumi.{name}.yaml").read_text())["config"]


def error(stack: str, training: dict | None = None, mutate=None) -> str:
    raw = raw_stack(stack)
    if training is not None:
        raw["mlplat:training"] = training
    if mutate is not None:
        mutate(raw)
    with pytest.raises(ConfigError) as err:
        parse_config(raw, f"stacks/Pulumi.{stack}.yaml", from_stack_file=True)
    return str(err.value)


def test_defaults_follow_the_pools_and_tenants():
    prod = resolve_training(load_stack("prod"))
    assert (prod.pool.name, prod.tenant.name, prod.nodes, prod.min_nodes) == ("train-p5", "research", 2, 2)
    assert prod.lustre and prod.collective_check and prod.min_busbw_gbps == 300.0
    staging = resolve_training(load_stack("staging"))
    assert (staging.pool.name, staging.nodes, staging.min_busbw_gbps) == ("gpu-efa", 2, 37.5)
    dev = resolve_training(load_stack("dev"))
    assert (dev.pool.name, dev.nodes, dev.lustre, dev.collective_check) == ("gpu", 1, False, False)
    assert resolve_training(load_stack("smb")) is None  # no GPU pool


def test_turned_off():
    raw = raw_stack("prod")
    raw["mlplat:training"] = {"enabled": False}
    assert resolve_training(parse_config(raw, "prod")) is None


def test_explicit_settings_are_kept():
    raw = raw_stack("prod")
    raw["mlplat:training"] = {"tenant": "applied", "nodes": 4, "minNodes": 2, "minBusBandwidthGBps": 350}
    job = resolve_training(parse_config(raw, "prod"))
    assert (job.tenant.name, job.nodes, job.min_nodes, job.min_busbw_gbps) == ("applied", 4, 2, 350.0)


@pytest.mark.parametrize("stack, training, message", [
    ("prod", {"pool": "inference"},
     "mlplat:training.pool: 'inference' is not a gpu pool; allowed: train-p5"),
    ("prod", {"tenant": "ops"},
     "mlplat:training.tenant: 'ops' is not a tenant; allowed: research, applied, serving"),
    ("prod", {"tenant": "serving"},
     "mlplat:training.tenant: 'serving' may not use p5.48xlarge GPUs (pool 'train-p5'); give it a gpu quota and the "
     "type in its instanceTypes, or pick another tenant"),
    ("prod", {"nodes": 17},
     "mlplat:training.nodes: 17 is more than pool 'train-p5' holds (maxSize 16)"),
    ("prod", {"nodes": 2, "minNodes": 3},
     "mlplat:training.minNodes: 3 is above nodes 2; set minNodes <= nodes"),
    ("dev", {"nodes": 2},
     "mlplat:training.nodes: 2 nodes need a shared file system for checkpoints; set storage.lustre.enabled: true "
     "or run on 1 node"),
    ("staging", {"nodes": 2, "dataPath": "tokens/"},
     "mlplat:training.dataPath: 'tokens/' is not an absolute path, e.g. /fsx/datasets/tokens"),
    ("prod", {"name": "GPT2"},
     "mlplat:training.name: 'GPT2' does not match ^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$"),
    ("prod", {"precision": "fp8"},
     "mlplat:training.precision: 'fp8' is not allowed; allowed: 'bf16', 'fp16' or 'fp32'"),
])
def test_mistakes_are_one_line_naming_the_key(stack, training, message):
    assert error(stack, training) == f"stacks/Pulumi.{stack}.yaml: {message}"


def test_a_job_bigger_than_the_quota_is_refused():
    # research + applied (one cohort) hold 128 GPUs; 16 p5 nodes ask for 128 GPUs but 2448
    # CPUs, more than the cohort's 1536.
    got = error("prod", {"nodes": 16})
    assert got == ("stacks/Pulumi.prod.yaml: mlplat:training.nodes: 16 x p5.48xlarge ask for 2448 cpu, more than "
                   "tenant 'research' can be admitted (1536, quotas.cpu with its cohort); lower nodes or raise the quota")


def test_no_tenant_for_the_pool():
    def drop_gpu_tenants(raw):
        raw["mlplat:tenants"] = [t for t in raw["mlplat:tenants"] if t["name"] == "serving"]

    got = error("prod", mutate=drop_gpu_tenants)
    assert got == ("stacks/Pulumi.prod.yaml: mlplat:training.tenant: no tenant has a GPU quota for pool 'train-p5' "
                   "(p5.48xlarge); add one to mlplat:tenants or set training.enabled: false")


def test_unknown_training_key():
    assert error("prod", {"node": 2}) == ("stacks/Pulumi.prod.yaml: mlplat:training.node: unknown key; remove it or "
                                          "check its spelling")


# --- elastic batch planning --------------------------------------------------------------


def _with_pool_max(raw: dict, size: int) -> None:
    for pool in raw["mlplat:nodePools"]:
        if pool["name"] == "train-p5":
            pool["maxSize"] = max(pool.get("maxSize", 0), size)


@pytest.mark.parametrize("min_nodes, nodes, accumulation", [
    (2, 3, {2: 3, 3: 2}),  # the job the issue shrank from 3 to 2: lcm(2, 3) = 6
    (2, 4, {2: 6, 3: 4, 4: 3}),
    (1, 1, {1: 1}),
])
def test_the_global_batch_is_kept_at_every_node_count_by_gradient_accumulation(min_nodes, nodes, accumulation):
    from infra.training_plan import plan_global_batch

    per_node = 16 * 8  # micro-batch x p5 GPUs
    batch = plan_global_batch(None, 16, 8, min_nodes, nodes)
    # What the trainer computes at each world size: a whole number of passes, the same batch.
    assert {n: batch // (per_node * n) for n in range(min_nodes, nodes + 1)} == accumulation
    assert all(batch % (per_node * n) == 0 for n in range(min_nodes, nodes + 1))


def test_the_stack_renders_the_planned_batch_into_the_trainers_arguments():
    raw = raw_stack("prod")
    raw["mlplat:training"] = {"nodes": 3, "minNodes": 2}
    _with_pool_max(raw, 3)
    job = resolve_training(parse_config(raw, "prod"))
    assert job.global_batch == 16 * 8 * 6


def test_a_global_batch_some_node_counts_cannot_keep_is_refused_naming_them():
    def three_nodes(raw):
        raw["mlplat:training"] = {"nodes": 4, "minNodes": 2, "globalBatch": 1024}
        _with_pool_max(raw, 4)

    assert error("prod", mutate=three_nodes) == (
        "stacks/Pulumi.prod.yaml: mlplat:training.globalBatch: 1024 sequences cannot be kept at 3 node(s): at each "
        "count n from minNodes to nodes it must divide into passes of microBatch x GPUs x n (128 x n); use a multiple "
        "of 1536, or narrow minNodes..nodes")
