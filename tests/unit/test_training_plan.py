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
    assert error("prod", {"node": 2}) == ("stacks/Pulumi.prod.yaml: mlplat:training.node: unknown key; did you mean "
                                          "`nodes`?")


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
        "count n from minNodes to nodes it must divide into passes of microBatch x data-parallel ranks (16 x 24 = 384 "
        "at 3 nodes); use a multiple of 1536, or narrow minNodes..nodes")


# --- the parallel layout, at every node count -----------------------------------------------


def test_model_presets_are_the_trainers():
    from workloads.train.shapes import PRESETS

    for preset in PRESETS:
        raw = raw_stack("prod")
        raw["mlplat:training"] = {"model": preset}
        assert parse_config(raw, "prod").training.model == preset
    assert error("prod", {"model": "gpt-175b"}) == (
        "stacks/Pulumi.prod.yaml: mlplat:training.model: 'gpt-175b' is not a model preset; allowed: "
        f"{', '.join(sorted(PRESETS))}")


def test_the_config_choices_are_the_trainers_and_the_jobs():
    from typing import get_args

    from components.training_spec import FRAMEWORKS
    from infra.config import TrainingConfig, TrainingParallelConfig
    from workloads.train.shapes import PIPELINE_SCHEDULES

    assert get_args(TrainingParallelConfig.model_fields["pp_schedule"].annotation) == PIPELINE_SCHEDULES
    assert get_args(TrainingConfig.model_fields["framework"].annotation) == FRAMEWORKS


def _prod(training: dict, pool_max: int = 0) -> dict:
    raw = raw_stack("prod")
    raw["mlplat:training"] = training
    if pool_max:
        _with_pool_max(raw, pool_max)
    return raw


def _trainers_refusal(world: int, model: str = "gpt2-124m", strategy: str = "ddp", precision: str = "bf16",
                      micro_batches=None, **layout) -> str:
    """The line the trainer itself (workloads/train/shapes.py) gives for this layout."""
    from workloads.train.shapes import PRESETS, Layout, LayoutError, check_layout

    with pytest.raises(LayoutError) as err:
        check_layout(Layout(**layout), world, PRESETS[model](), strategy=strategy, precision=precision,
                     micro_batches=micro_batches)
    return str(err.value)


@pytest.mark.parametrize("training, message", [
    ({"parallel": {"tp": 3}},
     "mlplat:training.parallel.tp: 3 does not divide the 8 GPUs of a p5.48xlarge node; a tensor-parallel group must "
     "sit within one node (it all-reduces every layer over NVLink), so choose a tp that divides 8"),
    ({"parallel": {"ppSchedule": "interleaved"}},
     "mlplat:training.parallel.ppSchedule: interleaved is a pipeline schedule; it needs pp > 1, or leave ppSchedule "
     "at 1f1b"),
    ({"parallel": {"ppSchedule": "gpipe"}},
     "mlplat:training.parallel.ppSchedule: 'gpipe' is not allowed; allowed: '1f1b' or 'interleaved'"),
    ({"parallel": {"tp": 0}},
     "mlplat:training.parallel.tp: 0: Input should be greater than or equal to 1"),
    ({"activationCheckpoint": "some"},
     "mlplat:training.activationCheckpoint: 'some' is not allowed; allowed: 'none', 'selective' or 'full'"),
])
def test_a_layout_the_nodes_cannot_hold_is_one_line(training, message):
    assert error("prod", mutate=lambda raw: raw.update(_prod(training, pool_max=4))) == (
        f"stacks/Pulumi.prod.yaml: {message}")


@pytest.mark.parametrize("training, count, refusal", [
    # 2 x 3 = 6 divides 24 GPUs (3 nodes) but not 16 (2 nodes): the count is named.
    ({"nodes": 3, "minNodes": 2, "parallel": {"tp": 2, "pp": 3}}, 2, {"world": 16, "tp": 2, "pp": 3}),
    # tp x pp spans two nodes: 16 ranks fit 2 and 4 nodes, not 3.
    ({"nodes": 3, "minNodes": 2, "model": "gpt-1.3b", "parallel": {"tp": 8, "pp": 2}}, 3,
     {"world": 24, "model": "gpt-1.3b", "tp": 8, "pp": 2}),
    # A given batch that leaves one micro-batch per step at 2 nodes (pp 2, 8 data-parallel ranks).
    ({"parallel": {"pp": 2}, "globalBatch": 128}, 2, {"world": 16, "pp": 2, "micro_batches": 1}),
    # The model's shape and the strategy are named without a count.
    ({"parallel": {"tp": 8}}, None, {"world": 8, "tp": 8}),
    ({"model": "tiny", "parallel": {"pp": 4}}, None, {"world": 4, "model": "tiny", "pp": 4}),
    ({"parallel": {"dpReplicate": 2}}, None, {"world": 2, "dp_replicate": 2}),
    ({"parallel": {"pp": 2}, "precision": "fp16"}, None, {"world": 2, "pp": 2, "precision": "fp16"}),
    # tp beside data parallelism needs FSDP: at 2 nodes there are 8 data-parallel ranks.
    ({"parallel": {"tp": 2}}, 2, {"world": 16, "tp": 2}),
])
def test_a_layout_the_trainer_would_refuse_is_its_line_naming_the_node_count(training, count, refusal):
    where = f"at {count} node(s) ({refusal['world']} GPUs): " if count else ""
    assert error("prod", mutate=lambda raw: raw.update(_prod(training, pool_max=4))) == (
        f"stacks/Pulumi.prod.yaml: mlplat:training.parallel: {where}{_trainers_refusal(**refusal)}")


@pytest.mark.parametrize("parallel, accumulation", [
    # tp 2 x pp 2 on 8-GPU nodes: 4, 6 and 8 data-parallel ranks at 2, 3 and 4 nodes.
    ({"tp": 2, "pp": 2}, {2: 12, 3: 8, 4: 6}),
    ({"tp": 2, "pp": 2, "ppSchedule": "interleaved"}, {2: 12, 3: 8, 4: 6}),
    ({"tp": 8}, {2: 6, 3: 4, 4: 3}),
])
def test_every_node_count_keeps_the_batch_and_fills_the_pipeline(parallel, accumulation):
    from infra.training_plan import data_parallel_ranks
    from workloads.train.shapes import PRESETS, Layout, check_layout

    job = resolve_training(parse_config(_prod({"nodes": 4, "minNodes": 2, "model": "gpt-1.3b", "strategy": "fsdp",
                                               "parallel": parallel}, pool_max=4), "prod"))
    p = job.settings.parallel
    layout = Layout(p.tp, p.pp, p.dp_replicate, p.pp_schedule)
    got = {}
    for n in range(2, 5):
        passes = 16 * data_parallel_ranks(n, 8, p.tp, p.pp)
        assert job.global_batch % passes == 0
        got[n] = job.global_batch // passes
        check_layout(layout, n * 8, PRESETS["gpt-1.3b"](), strategy="fsdp", micro_batches=got[n])  # as the trainer
    assert got == accumulation
    assert all(a % p.pp == 0 for a in got.values())


def test_the_trainer_is_told_the_layout_only_where_it_is_not_the_default():
    from infra.training import training_plan

    def args(training: dict) -> tuple[str, ...]:
        config = parse_config(_prod(training), "prod")
        return training_plan(config, resolve_training(config), "111122223333", BUILT).train_args

    plain = args({})
    assert not {"--tp", "--pp", "--dp-replicate", "--pp-schedule", "--activation-checkpoint"} & set(plain)
    layered = args({"model": "gpt-1.3b", "strategy": "fsdp", "activationCheckpoint": "selective",
                    "parallel": {"tp": 2, "pp": 2, "dpReplicate": 2, "ppSchedule": "interleaved"}})
    assert [layered[i:i + 2] for i, a in enumerate(layered) if a in ("--tp", "--pp", "--dp-replicate",
                                                                    "--pp-schedule", "--activation-checkpoint")] == [
        ("--tp", "2"), ("--pp", "2"), ("--dp-replicate", "2"), ("--pp-schedule", "interleaved"),
        ("--activation-checkpoint", "selective")]
    # 2 nodes x 8 GPUs / (tp 2 x pp 2) = 4 data-parallel ranks; x pp so the pipeline fills.
    assert layered[layered.index("--global-batch") + 1] == str(16 * 4 * 2)
    assert plain[plain.index("--global-batch") + 1] == str(16 * 16)


BUILT = {"training": f"0.1.0-0a1b2c3d4e5f@sha256:{'1' * 64}", "checks": f"0.1.0-0a1b2c3d4e5f@sha256:{'2' * 64}"}


# --- frameworks ----------------------------------------------------------------------------

IMAGE = f"research/horovod:0.28.1@sha256:{'a' * 64}"


def _framework(name: str, **keys) -> dict:
    return {"framework": name, "image": IMAGE, "command": ["python", "train.py"], **keys}


@pytest.mark.parametrize("training, message", [
    ({"framework": "jax"},
     "mlplat:training.framework: 'jax' is not allowed; allowed: 'torchrun', 'deepspeed', 'horovod' or 'tensorflow'"),
    ({"framework": "mxnet"},
     "mlplat:training.framework: 'mxnet' is not supported: Apache MXNet was retired upstream (moved to the Apache "
     "Attic in 2023); allowed: torchrun, deepspeed, horovod, tensorflow"),
    ({"image": IMAGE},
     "mlplat:training.image: is for framework deepspeed, horovod or tensorflow (the tenant's own image); torchrun "
     "runs the platform's trainer"),
    ({"command": ["python", "train.py"]},
     "mlplat:training.command: is for framework deepspeed, horovod or tensorflow (the tenant's own image); torchrun "
     "runs the platform's trainer"),
    ({"framework": "horovod", "image": IMAGE},
     "mlplat:training.command: is required with framework horovod: your training image and the command each worker "
     "runs"),
    ({"framework": "tensorflow", "command": ["python", "train.py"]},
     "mlplat:training.image: is required with framework tensorflow: your training image and the command each worker "
     "runs"),
    (_framework("deepspeed", command=[]),
     "mlplat:training.command: is empty; give the command each worker runs, e.g. [python, train.py]"),
    (_framework("horovod", parallel={"tp": 2}),
     "mlplat:training.parallel: is a setting of the platform's trainer (framework torchrun); framework horovod runs "
     "your image's command, so set it there"),
    (_framework("tensorflow", strategy="fsdp"),
     "mlplat:training.strategy: is a setting of the platform's trainer (framework torchrun); framework tensorflow "
     "runs your image's command, so set it there"),
    (_framework("deepspeed", compile=True),
     "mlplat:training.compile: is a setting of the platform's trainer (framework torchrun); framework deepspeed runs "
     "your image's command, so set it there"),
    (_framework("deepspeed", globalBatch=256),
     "mlplat:training.globalBatch: is a setting of the platform's trainer (framework torchrun); framework deepspeed "
     "runs your image's command, so set it there"),
    (_framework("deepspeed", nodes=3, minNodes=2),
     "mlplat:training.minNodes: framework deepspeed runs on a fixed number of nodes (DeepSpeed checks its batch size "
     "against the world size it starts with); leave minNodes unset or equal to nodes (3)"),
    (_framework("horovod", nodes=2, minNodes=1),
     "mlplat:training.minNodes: framework horovod runs on a fixed number of nodes (mpirun starts every rank from one "
     "hostfile); leave minNodes unset or equal to nodes (2)"),
    (_framework("tensorflow", image=f"docker.io/tensorflow/tensorflow:2.19.0@sha256:{'a' * 64}"),
     f"mlplat:training.image: 'docker.io/tensorflow/tensorflow:2.19.0@sha256:{'a' * 64}' names a registry "
     "(docker.io); give the repository in the environment's in-region ECR, <repository>:<tag>@sha256:<digest>, after "
     "pushing or mirroring it there"),
    (_framework("tensorflow", image="research/tf:2.19"),
     "mlplat:training.image: 'research/tf:2.19' is not <repository>:<tag>@sha256:<digest>; images are pulled by "
     "digest, e.g. research/horovod:0.28.1@sha256:<64 hex digits>"),
])
def test_a_framework_with_options_it_cannot_use_is_one_line(training, message):
    assert error("prod", mutate=lambda raw: raw.update(_prod(training, pool_max=3))) == (
        f"stacks/Pulumi.prod.yaml: {message}")


def test_frameworks_reach_the_cluster_layer_through_the_descriptor_unchanged():
    """The cluster layer validates the cloud layer's settings again: the trainer's keys,
    unset with another framework, must stay unset there, and torchrun's must all arrive."""
    from infra.config import settings_for_descriptor, settings_from_descriptor

    for training in (_framework("horovod", nodes=2),
                     {"strategy": "fsdp", "parallel": {"tp": 2}, "activationCheckpoint": "full"}):
        config = parse_config(_prod(training), "prod")
        again = settings_from_descriptor(settings_for_descriptor(config), "descriptor")
        assert again.training == config.training
    exported = settings_for_descriptor(parse_config(_prod(_framework("horovod")), "prod"))["training"]
    assert "compile" not in exported and exported["framework"] == "horovod"
