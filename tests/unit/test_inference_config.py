"""`mlplat:inference`: the served model's settings are checked with Triton's rules and
against the stack's pools before anything is registered; each mistake is one line."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from components.inference_spec import adapter_rules, s3_statements, source_cidrs
from infra.config import ConfigError, load_stack, parse_config
from infra.inference_plan import resolve_inference
from tests.unit.test_config import raw_stack

REPO = Path(__file__).resolve().parents[2]


def refused(stack: str, **inference) -> str:
    raw = raw_stack(stack)
    raw["mlplat:inference"] = {**(raw.get("mlplat:inference") or {}), **inference}
    with pytest.raises(ConfigError) as err:
        parse_config(raw, f"stacks/Pulumi.{stack}.yaml", from_stack_file=True)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_prod_serves_on_the_inference_pool_and_smb_on_the_cpu_pool():
    prod = resolve_inference(load_stack("prod"))
    assert (prod.device, prod.pool.name, prod.gpus) == ("gpu", "inference", 1)
    # A g6e.2xlarge (8 vCPU, 64 GiB, one GPU) leaves a fifth of its CPU and a quarter of
    # its memory to the node.
    assert (prod.cpu, prod.memory_gi) == (6, 48)
    smb = resolve_inference(load_stack("smb"))
    assert (smb.device, smb.pool.name, smb.gpus, smb.cpu, smb.memory_gi) == ("cpu", "cpu", 0, 2, 4)
    assert resolve_inference(load_stack("dev")) is None and resolve_inference(load_stack("staging")) is None


# The four mistakes the issue names, as a user sees them.


def test_model_name_triton_would_reject():
    assert refused("prod", modelName="gpt/2") == (
        "stacks/Pulumi.prod.yaml: mlplat:inference.modelName: model name 'gpt/2' is not servable: use 1-63 "
        "letters, digits, '_', '-' or '.', starting and ending with a letter or digit (it is a directory, a URL path "
        "segment and a Kubernetes label value)")


def test_preferred_batch_size_above_the_maximum():
    assert refused("prod", maxBatchSize=16, preferredBatchSizes=[8, 32]) == (
        "stacks/Pulumi.prod.yaml: mlplat:inference.preferredBatchSizes: preferred batch size 32 is above the max "
        "batch size 16; use sizes from 1 to 16")


def test_queue_delay_below_zero():
    assert refused("smb", maxQueueDelayMicroseconds=-50) == (
        "stacks/Pulumi.smb.yaml: mlplat:inference.maxQueueDelayMicroseconds: max queue delay -50 us is below zero; "
        "use 0 or more microseconds")


def test_gpu_instances_on_the_smb_stack():
    assert refused("smb", device="gpu") == (
        "stacks/Pulumi.smb.yaml: mlplat:inference.device: 'gpu' is not available: the smb stack is CPU-only; use "
        "'cpu' (ONNX Runtime on the CPU pool)")


def test_preview_exits_2_with_nothing_registered(tmp_path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (REPO / "stacks" / "Pulumi.smb.yaml").read_text().replace("    device: cpu\n", "    device: gpu\n")
    assert "device: gpu" in text
    (stacks / "Pulumi.smb.yaml").write_text(text)
    done = subprocess.run([sys.executable, "-m", "infra.cli", "preview", "--stack", "smb", "--stacks-dir",
                           str(stacks), "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith(
        "mlplat:inference.device: 'gpu' is not available: the smb stack is CPU-only; use 'cpu' (ONNX Runtime on "
        "the CPU pool)")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stdout == ""


# Fit against the stack.


def test_gpu_needs_an_inference_pool():
    raw = raw_stack("dev")
    raw["mlplat:inference"] = {"device": "gpu"}
    with pytest.raises(ConfigError, match=r"mlplat:inference.device: 'gpu' is not available: GPU serving needs a "
                                          r"node pool with role 'inference' and this stack has none; use 'cpu'"):
        parse_config(raw, "stacks/Pulumi.dev.yaml", from_stack_file=True)


def test_cpu_needs_a_cpu_pool():
    assert refused("prod", device="cpu").endswith(
        "mlplat:inference.device: 'cpu' serving needs a node pool with role 'cpu'; this stack has none")


def test_more_replicas_than_the_pool_can_hold():
    assert refused("prod", maxReplicas=9) == (
        "stacks/Pulumi.prod.yaml: mlplat:inference.maxReplicas: 9 replicas can never all run: pool 'inference' "
        "holds at most 8 (8 x g6e.2xlarge, 1 per node)")
    # Three 2-core replicas fit a c7i.2xlarge (6 of its 8 cores are left to pods); smb has four.
    assert refused("smb", maxReplicas=13).endswith("holds at most 12 (4 x c7i.2xlarge, 3 per node)")


def test_repository_copy_bigger_than_a_nodes_disk():
    # c7i.2xlarge has no instance store: the 50 GiB root volume, half of it left to pods.
    assert refused("smb", repositoryGiPerReplica=24) == (
        "stacks/Pulumi.smb.yaml: mlplat:inference.repositoryGiPerReplica: a replica's 26 GiB of local disk (24 for "
        "the repository copy + 2) does not fit a c7i.2xlarge node of pool 'cpu' (at most 25 GiB are left to pods); "
        "lower it or give the pool a larger rootVolumeGib")


def test_disk_limits_replicas_per_node():
    # 20 GiB copies: one replica per 25 GiB of a node's disk, so 4 nodes hold 4, not 6.
    assert refused("smb", repositoryGiPerReplica=20) == (
        "stacks/Pulumi.smb.yaml: mlplat:inference.maxReplicas: 6 replicas can never all run: pool 'cpu' holds at "
        "most 4 (4 x c7i.2xlarge, 1 per node)")
    # A g6e.2xlarge has one instance-store disk, which nodeadm only mounts: kubelet stays on
    # the 200 GiB root volume, 100 GiB of it left to pods.
    assert resolve_inference(load_stack("prod")).repository_gi == 20
    assert refused("prod", repositoryGiPerReplica=99).endswith(
        "a replica's 101 GiB of local disk (99 for the repository copy + 2) does not fit a g6e.2xlarge node of pool "
        "'inference' (at most 100 GiB are left to pods); lower it or give the pool a larger rootVolumeGib")


def test_a_raid_of_instance_store_disks_is_the_nodes_disk():
    from infra.inference_plan import node_disk

    prod = load_stack("prod")
    p5 = next(pool for pool in prod.node_pools if pool.instance_type == "p5.48xlarge")
    # Eight 3.84 TB NVMe disks in RAID0: 28,610 GiB.
    assert node_disk(p5) == (math.floor(8 * 3840 * 1e9 / 2**30), "pick an instance type with more instance storage")


def test_replica_bigger_than_a_node():
    assert refused("smb", cpuPerReplica=8).endswith(
        "mlplat:inference.cpuPerReplica: a replica of 8 cores and 4 GiB does not fit a c7i.2xlarge node (at most "
        "6 cores and 12 GiB are left to pods)")


def test_min_above_max_and_unknown_pool_and_tenant_namespace():
    assert refused("prod", minReplicas=5, maxReplicas=4).endswith("mlplat:inference.minReplicas: 5 is above "
                                                                  "maxReplicas 4")
    assert refused("prod", pool="train-p5").endswith(
        "mlplat:inference.pool: 'train-p5' is not a node pool with role 'inference'; allowed: inference")
    assert refused("prod", namespace="serving").startswith(
        "stacks/Pulumi.prod.yaml: mlplat:inference.namespace: 'serving' is a tenant's namespace")
    assert refused("prod", namespace="kube-system").endswith(
        "mlplat:inference.namespace: 'kube-system' is a system namespace; pick another name")


def test_load_balancer_needs_an_in_region_certificate():
    assert refused("prod", loadBalancer={"enabled": True}).endswith(
        "mlplat:inference.loadBalancer.certificateArn: is required with enabled: true; the load balancer only "
        "speaks TLS")
    cert = "arn:aws:acm:{}:111122223333:certificate/12345678-90ab-cdef-1234-567890abcdef"
    assert refused("prod", loadBalancer={"enabled": True, "certificateArn": cert.format("us-east-1")}).endswith(
        "the certificate is in us-east-1, not me-central-1; a load balancer takes certificates from its own region")
    assert refused("prod", loadBalancer={"enabled": True, "certificateArn": cert.format("me-central-1"),
                                         "allowedCidrs": ["0.0.0.0/0"]}).endswith(
        "mlplat:inference.loadBalancer.allowedCidrs: '0.0.0.0/0' is wider than /8; list the networks of your clients")
    raw = raw_stack("prod")
    raw["mlplat:inference"]["loadBalancer"] = {"enabled": True, "certificateArn": cert.format("me-central-1")}
    balancer = parse_config(raw, "stacks/Pulumi.prod.yaml", from_stack_file=True).inference.load_balancer
    assert source_cidrs(balancer.allowed_cidrs, "10.0.0.0/16") == ("10.0.0.0/16",)


def test_serving_needs_the_prometheus_stack():
    raw = raw_stack("smb")
    raw["mlplat:addons"] = {"telemetry": {"enabled": False}}
    with pytest.raises(ConfigError, match="mlplat:inference.enabled: the autoscaler reads Triton's queue time"):
        parse_config(raw, "stacks/Pulumi.smb.yaml", from_stack_file=True)


def test_unknown_key_is_named():
    assert refused("smb", maxBatchSise=8) == (
        "stacks/Pulumi.smb.yaml: mlplat:inference.maxBatchSise: unknown key; did you mean `maxBatchSize`?")


# Pure specs.


def test_adapter_rules_publish_only_what_the_autoscalers_read():
    gpu = adapter_rules(resource_metrics=False)
    assert gpu["default"] is False and set(gpu) == {"default", "custom"}
    cpu = adapter_rules(resource_metrics=True)
    assert set(cpu["resource"]) == {"cpu", "memory", "window"}


def test_s3_statements_are_read_only_and_scoped_to_the_prefix():
    statements = s3_statements("arn:aws:s3:::models", "triton", "arn:aws:kms:me-central-1:111122223333:key/k")
    actions = [a for s in statements for a in s["Action"]]
    assert not [a for a in actions if a.startswith("s3:Put") or a.startswith("s3:Delete")]
    listing = next(s for s in statements if s["Action"] == ["s3:ListBucket"])
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["triton", "triton/*"]}}


# The gateway and the rollout: who may call, and how a new version reaches traffic.


def test_serving_without_an_identity_provider_is_refused():
    raw = raw_stack("smb")
    del raw["mlplat:inference"]["auth"]
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "stacks/Pulumi.smb.yaml", from_stack_file=True)
    assert str(err.value) == (
        "stacks/Pulumi.smb.yaml: mlplat:inference.auth: is required: every request to the inference API is "
        "authenticated at its gateway; give the enterprise identity provider (issuer, audiences, jwksUri) and the "
        "tenants the model serves")


def test_a_model_served_to_a_team_that_is_not_a_tenant_is_refused():
    auth = {**raw_stack("smb")["mlplat:inference"]["auth"], "tenants": ["analytics", "marketing"]}
    assert refused("smb", auth=auth) == (
        "stacks/Pulumi.smb.yaml: mlplat:inference.auth.tenants: 'marketing' is not a tenant of this stack; "
        "tenants: analytics")


def test_an_identity_provider_without_tls_is_refused():
    auth = {**raw_stack("smb")["mlplat:inference"]["auth"], "jwksUri": "http://login.smb.example.ae/certs"}
    assert refused("smb", auth=auth).startswith("stacks/Pulumi.smb.yaml: mlplat:inference.auth.jwksUri: ")


@pytest.mark.parametrize("weights, message", [
    ({"stable": 60, "canary": 30}, "{'stable': 60, 'canary': 30} add up to 90; the shares of traffic must add up "
                                   "to 100"),
    ({"stable": 50, "canary": 60}, "{'stable': 50, 'canary': 60} add up to 110; the shares of traffic must add up "
                                   "to 100"),
    ({"stable": 100, "canary": 0}, "give each variant some traffic (1 to 99); 0 or 100 is no A/B test"),
    ({"blue": 50, "green": 50}, "names ['blue', 'green']; name exactly the two variants: stable and canary"),
])
def test_ab_weights_that_do_not_split_the_traffic_are_refused(weights, message):
    assert refused("prod", rollout={"strategy": "ab", "weights": weights}) == (
        f"stacks/Pulumi.prod.yaml: mlplat:inference.rollout.weights: {message}")


@pytest.mark.parametrize("steps", [[50, 25], [0, 50], [10, 100], []])
def test_canary_steps_must_rise_within_the_traffic(steps):
    assert refused("prod", rollout={"strategy": "canary", "steps": steps}) == (
        f"stacks/Pulumi.prod.yaml: mlplat:inference.rollout.steps: {steps}: give the canary's share at each step, "
        "rising, each from 1 to 99 (after the last step it takes all traffic)")
