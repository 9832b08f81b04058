"""Self-service training jobs (infra/jobs.py, `mlplat job`): what the cluster layers apply for
them in each GPU tenant's namespace, and the JobSets a tenant renders from it, judged as the
API server would judge them: the platform's own JobSet, with the tenant's queue, group,
fabric and tracking user, admitted by the namespace's policies; a job the platform would not
run refused in one line."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.training_spec import QUEUE_LABEL
from infra import cli
from infra.checks.admission import refusals
from infra.config import load_stack
from infra.jobs import CONFIG_MAP, DATA_KEY, TRAINER_ACCOUNT, JobError, plan_data, plan_from_data, render
from infra.preview.report import kubernetes_objects
from platform_policies.pod_security import findings
from platform_policies.workloads import pod_templates
from tests.conftest import preview
from tests.stack.test_tenant_isolation import tenants


def objects(stack: str) -> list[dict[str, Any]]:
    return kubernetes_objects(preview(stack))


def data(stack: str, tenant: str) -> dict[str, Any]:
    [found] = [o for o in objects(stack) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == CONFIG_MAP
               and o["metadata"]["namespace"] == tenant]
    return json.loads(found["data"][DATA_KEY])


def pods(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["template"]["spec"]["template"]["spec"] for r in jobset["spec"]["replicatedJobs"]]


@pytest.mark.parametrize("stack, gpu_tenants", [("prod-cluster", {"research", "applied"}),
                                                ("onprem", {"research", "applied"})])
def test_each_gpu_tenant_gets_a_trainer_and_its_templates(stack, gpu_tenants):
    accounts = {o["metadata"]["namespace"]: o for o in objects(stack)
                if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == TRAINER_ACCOUNT}
    assert set(accounts) == gpu_tenants  # prod's serving tenant has GPUs only on the inference pool
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    for tenant in gpu_tenants:
        found = data(stack, tenant)
        assert found["tenant"] == tenant and set(found["plans"]) == {p["name"] for p in found["pools"]}
        # The tenant and the cohort it borrows from, and no other tenant's settings.
        assert {t["name"] for t in found["tenants"]} == gpu_tenants


def test_a_job_of_the_stacks_own_settings_is_the_stacks_own_jobset():
    """The platform's JobSet: the stack's training job, rendered through self-service with
    the same settings, differs only in the service account whose role it runs with."""
    stack_job = next(o for o in objects("prod-cluster") if o["kind"] == "JobSet"
                     and o["metadata"]["name"] == "gpt2-smoke")
    training = load_stack("prod").training.model_dump(mode="json", by_alias=True, exclude_none=True)
    job = {k: v for k, v in training.items() if k not in ("name", "tenant", "enabled")}
    [mine] = render(data("prod-cluster", "research"), "research", "gpt2-smoke", job)
    for spec in pods(mine):
        assert spec["serviceAccountName"] == TRAINER_ACCOUNT
        spec["serviceAccountName"] = "gpt2-smoke"
    assert mine == stack_job


def test_many_jobs_per_tenant_each_its_own_and_admitted():
    first = render(data("prod-cluster", "research"), "research", "exp-1", {"nodes": 2, "maxSteps": 1000})
    second = render(data("prod-cluster", "research"), "research", "exp-2", {"nodes": 4, "model": "gpt-1.3b",
                                                                             "strategy": "fsdp"})
    judged = [("program", o) for o in objects("prod-cluster")] + [("job", o) for o in (*first, *second)]
    assert [line for line in refusals(judged) if line.startswith("job:")] == []
    names = set()
    for [jobset] in (first, second):
        names.add(jobset["metadata"]["name"])
        assert jobset["metadata"]["labels"][QUEUE_LABEL] == "default"
        for spec in pods(jobset):
            env = {e["name"]: e.get("value") for c in spec["containers"] for e in c.get("env", [])}
            assert env["MLPLAT_EXPERIMENT"] == f"research/{jobset['metadata']['name']}"
            assert env["MLFLOW_TRACKING_USERNAME"] == "research"
        assert [f.describe() for t in pod_templates(jobset) for f in findings(t)] == []
    assert names == {"exp-1", "exp-2"}
    assert first[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2


def test_a_job_in_another_tenants_group_is_refused_by_the_namespace():
    """The admission check above can fail: the same job with the applied tenant's group."""
    applied = int(tenants("prod-cluster")["applied"]["metadata"]["annotations"]["mlplat.io/gid"])
    [jobset] = copy.deepcopy(render(data("prod-cluster", "research"), "research", "exp-3", {}))
    pods(jobset)[0]["securityContext"]["runAsGroup"] = applied
    lines = [line for line in refusals([*(("program", o) for o in objects("prod-cluster")), ("job", jobset)])
             if line.startswith("job:")]
    assert lines and "runAsGroup and fsGroup must be" in lines[0]


def test_on_a_customers_cluster_a_job_gets_its_fabric_its_secrets_and_its_ca():
    rendered = render(data("onprem", "research"), "research", "exp-1", {"nodes": 2})
    kinds = [o["kind"] for o in rendered]
    assert kinds == ["ConfigMap", "JobSet"]  # the customer's CA, then the job
    spec = pods(rendered[-1])[0]
    [trainer] = [c for c in spec["containers"] if c["name"] == "trainer"]
    assert "rdma/rdma_shared_device_a" in trainer["resources"]["limits"]
    env = {e["name"]: e for e in trainer["env"]}
    assert env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "mlflow-tracking"
    assert "mlx5_0:1" in env["NCCL_IB_HCA"]["value"]


def test_the_plan_survives_its_trip_through_the_config_map():
    for stack in ("prod-cluster", "onprem"):
        for plan in data(stack, "research")["plans"].values():
            assert plan_data(plan_from_data(plan)) == plan


@pytest.mark.parametrize("job, says", [
    ({"nodes": 40}, "nodes: 40 is more than pool 'train-p5' holds (maxSize 16)"),
    ({"nodes": 16}, "more than tenant 'research' can be admitted"),
    ({"modle": "x"}, "modle: Extra inputs are not permitted"),
    ({"pool": "inference"}, "pool: 'inference' is not a gpu pool"),
    ({"parallel": {"tp": 3}}, "parallel.tp: 3 does not divide the 8 GPUs"),
    ({"framework": "deepspeed", "image": "docker.io/x/y:1"}, "image"),
])
def test_a_job_the_platform_would_not_run_is_one_line(job, says):
    with pytest.raises(JobError) as err:
        render(data("prod-cluster", "research"), "research", "exp-1", job, where="job.yaml")
    assert "\n" not in str(err.value) and says in str(err.value), str(err.value)


def test_the_command_line_renders_and_refuses_in_one_line(tmp_path, capsys):
    saved = tmp_path / "training-jobs.yaml"
    saved.write_text(yaml.safe_dump({"data": {DATA_KEY: json.dumps(data("prod-cluster", "research"))}}))
    job = tmp_path / "job.yaml"
    job.write_text("nodes: 2\nmaxSteps: 100\n")
    assert cli.main(["job", "render", "--tenant", "research", "--name", "exp-9", "--job", str(job),
                     "--from", str(saved)]) == 0
    [jobset] = list(yaml.safe_load_all(capsys.readouterr().out))
    assert jobset["kind"] == "JobSet" and jobset["metadata"]["name"] == "exp-9"
    for name, text, says in (("Exp_9", "nodes: 2\n", "--name 'Exp_9'"),
                             ("exp-9", "tenant: applied\n", "tenant: given on the command line"),
                             ("exp-9", "[1, 2]\n", "a job is a mapping")):
        job.write_text(text)
        assert cli.main(["job", "render", "--tenant", "research", "--name", name, "--job", str(job),
                         "--from", str(saved)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("mlplat job: error: ") and says in err[0], err
    job.write_text("nodes: 2\n")
    assert cli.main(["job", "render", "--tenant", "applied", "--name", "exp-9", "--job", str(job),
                     "--from", str(saved)]) == 2
    assert "is tenant 'research''s, not 'applied''s" in capsys.readouterr().err


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 100), st.text(max_size=8),
                   st.lists(st.integers(0, 3), max_size=3))
KEYS = st.sampled_from(["nodes", "minNodes", "model", "strategy", "precision", "maxSteps", "microBatch",
                        "globalBatch", "pool", "framework", "image", "command", "parallel", "dataPath", "compile",
                        "checkpointEvery", "activationCheckpoint", "other"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_any_job_renders_or_is_refused_in_one_line(job):
    try:
        rendered = render(data("prod-cluster", "research"), "research", "exp-1", job)
    except JobError as err:
        assert "\n" not in str(err)
    else:
        assert rendered[-1]["kind"] == "JobSet"
