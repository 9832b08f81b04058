"""Each pipeline tenant's engine as the cluster layers apply it (components/pipelines_spec.py),
and its steps as the engine will submit them: the objects in the prod and onprem previews,
and the Jobs the launcher makes from the rendered templates (workloads/pipeline/launch.py),
judged by the tenant namespace's own admission policies and API-server model."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml

from components.pipelines_spec import (
    ENGINE_ACCOUNT,
    ENGINE_LABEL,
    LAUNCHER_RULES,
    STEPS_ACCOUNT,
)
from components.training_spec import QUEUE_LABEL
from infra.checks.admission import refusals
from platform_policies.pod_security import findings
from platform_policies.workloads import pod_templates
from infra.config import load_stack
from infra.jobs import TRAINER_ACCOUNT
from infra.preview.report import kubernetes_objects
from tests.conftest import preview
from tests.stack.test_tenant_isolation import tenants
from workloads.pipeline import launch

STACKS = ("prod-cluster", "onprem")
ENGINE = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor")


def objects(stack: str) -> list[dict[str, Any]]:
    return kubernetes_objects(preview(stack))


def in_namespace(stack: str, namespace: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects(stack)
            if o["metadata"].get("namespace") == namespace}


def templates(stack: str) -> dict[str, Any]:
    config = in_namespace(stack, "research")[("ConfigMap", "golden-path")]
    return json.loads(config["data"]["steps.json"])


ARGS = {"materialize": ("features", ("step", "materialize", "--params", "/etc/mlplat/pipeline/params.yaml",
                                     "--run", "manual-1")),
        "train": ("training", ("step", "train", "--params", "/etc/mlplat/pipeline/params.yaml", "--run", "manual-1")),
        "evaluate": ("training", ("step", "evaluate", "--params", "/etc/mlplat/pipeline/params.yaml",
                                  "--run", "manual-1")),
        "triggers": ("training", ("triggers", "--params", "/etc/mlplat/pipeline/params.yaml"))}


def submitted(stack: str) -> dict[str, dict[str, Any]]:
    """What the launcher submits for a few steps, named as the API server would name it."""
    made = {}
    for step, (image, args) in ARGS.items():
        manifest = launch.manifest(templates(stack), image, args)
        manifest["metadata"]["name"] = manifest["metadata"].pop("generateName") + "x7k2p"
        made[step] = manifest
    return made


@pytest.mark.parametrize("stack", STACKS)
def test_one_engine_in_the_pipeline_tenants_namespace_and_none_elsewhere(stack):
    research = in_namespace(stack, "research")
    for name in ENGINE:
        deployment = research[("Deployment", name)]
        assert deployment["spec"]["replicas"] == 1
        pod = deployment["spec"]["template"]
        assert pod["metadata"]["labels"][ENGINE_LABEL] == "true"
        [container] = pod["spec"]["containers"]
        assert container["args"] == ["engine", name.removeprefix("airflow-")]
    migrate = research[("Job", "airflow-migrate-3-3-2")]
    assert migrate["metadata"]["labels"][QUEUE_LABEL] == "default"  # admitted through the tenant's queue
    assert migrate["spec"]["template"]["spec"]["containers"][0]["args"] == ["engine", "migrate"]
    assert research[("Service", "airflow-api-server")]["spec"]["type"] == "ClusterIP"
    for other in set(tenants(stack)) - {"research"}:
        assert not [k for k in in_namespace(stack, other) if "airflow" in k[1] or "pipeline" in k[1]], other


@pytest.mark.parametrize("stack", STACKS)
def test_only_the_engines_api_callers_hold_a_token_and_their_role_stays_in_the_namespace(stack):
    research = in_namespace(stack, "research")
    tokens = {name: research[("Deployment", name)]["spec"]["template"]["spec"]["automountServiceAccountToken"]
              for name in ENGINE}
    assert tokens == {"airflow-api-server": False, "airflow-scheduler": True, "airflow-dag-processor": False}
    assert research[("Job", "airflow-migrate-3-3-2")]["spec"]["template"]["spec"][
        "automountServiceAccountToken"] is False
    role = research[("Role", "pipeline-launcher")]
    assert role["rules"] == LAUNCHER_RULES
    assert not any("secrets" in r["resources"] or "*" in r["verbs"] or "*" in r["resources"] for r in role["rules"])
    binding = research[("RoleBinding", "pipeline-launcher")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ENGINE_ACCOUNT, "namespace": "research"}]
    assert research[("ServiceAccount", STEPS_ACCOUNT)]["automountServiceAccountToken"] is False
    # No ClusterRole or ClusterRoleBinding names the engine.
    assert not [o for o in objects(stack) if o["kind"].startswith("Cluster") and "pipeline" in json.dumps(o)]


def test_the_engines_egress_is_its_database_and_the_api_server_alone():
    prod = in_namespace("prod-cluster", "research")[("NetworkPolicy", "allow-pipeline-engine")]["spec"]
    assert prod["podSelector"] == {"matchLabels": {ENGINE_LABEL: "true"}} and prod["policyTypes"] == ["Egress"]
    assert prod["egress"] == [{"to": [{"ipBlock": {"cidr": load_stack("prod").network.vpc_cidr}}],
                               "ports": [{"protocol": "TCP", "port": 5432}]}]
    onprem = in_namespace("onprem", "research")[("NetworkPolicy", "allow-pipeline-engine")]["spec"]
    assert onprem["egress"] == [
        {"to": [{"ipBlock": {"cidr": "10.40.9.0/28"}}], "ports": [{"protocol": "TCP", "port": 5432}]},
        {"to": [{"ipBlock": {"cidr": "10.40.0.0/28"}}], "ports": [{"protocol": "TCP", "port": 6443}]}]


@pytest.mark.parametrize("stack", STACKS)
def test_the_tenants_parameters_name_the_environments_buckets(stack):
    research = in_namespace(stack, "research")
    params = yaml.safe_load(research[("ConfigMap", "golden-path")]["data"]["params.yaml"])
    assert params["tenant"] == "research"
    assert not re.search(r"\{(datasets|checkpoints|models)\}", json.dumps(params)), params  # all replaced
    # The datasets bucket the tenant's feature store reads, and the checkpoints bucket's runs.
    store = yaml.safe_load(research[("ConfigMap", "feature-store")]["data"]["feature_store.yaml"])
    datasets = store["registry"]["path"].removeprefix("s3://").split("/")[0]
    assert params["features"]["entities"] == f"s3://{datasets}/features/research/labels/churn.parquet"
    bucket, _, prefix = params["training"]["checkpoint_upload"].removeprefix("s3://").partition("/")
    assert "-checkpoints" in bucket and prefix == "runs/research"


@pytest.mark.parametrize("stack", STACKS)
def test_every_step_the_engine_submits_passes_the_tenants_admission(stack):
    made = submitted(stack)
    judged = [o for o in objects(stack)] + [("step", m) for m in made.values()]
    lines = refusals([("program", o) if isinstance(o, dict) else o for o in judged])
    assert [line for line in lines if line.startswith("step:")] == []
    train = made["train"]
    assert train["kind"] == "JobSet" and train["metadata"]["labels"][QUEUE_LABEL] == "default"
    for step, manifest in made.items():
        assert manifest["metadata"]["labels"][QUEUE_LABEL] == "default", step
        specs = launch._pod_specs(manifest)
        for spec in specs:
            # The train step is the tenant's own job (the `mlplat job` path): its `trainer`.
            account = TRAINER_ACCOUNT if step == "train" else STEPS_ACCOUNT
            assert spec["serviceAccountName"] == account and spec["automountServiceAccountToken"] is False
            [container] = spec["containers"]
            assert container["args"] == list(ARGS[step][1])
            assert container["command"] == ["python", "-m", "workloads.pipeline"]
            assert {"name": "scratch", "mountPath": "/fsx"} in container["volumeMounts"]
    # On a node of the tenant's GPU pool, after the GPU check, as the tenant's own jobs run.
    [trainer] = launch._pod_specs(train)
    assert [c["name"] for c in trainer["initContainers"]] == ["gpu-check"]
    assert int(trainer["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) == 8
    # The features step is the feature project's pod: its store config and online-store label.
    features = made["materialize"]["spec"]["template"]
    assert features["metadata"]["labels"]["mlplat.io/feature-store"] == "true"
    assert {"name": "config", "configMap": {"name": "feature-store"}} in features["spec"]["volumes"]


def test_a_step_in_another_tenants_group_is_refused_by_the_namespaces_admission():
    """The admission check above can fail: a template planted with another tenant's group."""
    applied = int(tenants("prod-cluster")["applied"]["metadata"]["annotations"]["mlplat.io/gid"])
    manifest = copy.deepcopy(submitted("prod-cluster")["evaluate"])
    manifest["spec"]["template"]["spec"]["securityContext"]["runAsGroup"] = applied
    lines = [line for line in refusals([*(("program", o) for o in objects("prod-cluster")), ("step", manifest)])
             if line.startswith("step:")]
    assert lines and "runAsGroup and fsGroup must be" in lines[0], lines


@pytest.mark.parametrize("stack", STACKS)
def test_every_step_meets_pod_security_restricted(stack):
    """The namespace enforces `restricted` on what the engine submits at run time, beyond the
    pack's reach: the templates meet it, and a planted host network does not."""
    for step, manifest in submitted(stack).items():
        assert [f.describe() for t in pod_templates(manifest) for f in findings(t)] == [], step
    planted = copy.deepcopy(submitted(stack)["train"])
    launch._pod_specs(planted)[0]["hostNetwork"] = True
    assert [f.control for t in pod_templates(planted) for f in findings(t)] == ["hostNamespaces"]


def _onprem_canary(tmp_path, serving: dict | None = None) -> list[dict[str, Any]]:
    """onprem, with research's golden path publishing the served model through a canary."""
    from infra.config import STACKS_DIR, load_layer
    from infra.preview.engine import run_preview

    raw = yaml.safe_load((STACKS_DIR / "Pulumi.onprem.yaml").read_text())
    research = raw["config"]["mlplat:descriptor"]["settings"]["pipelines"]["tenants"]["research"]
    research["serving"] = {"repository": "s3://{models}/triton", "model_name": "gpt", "canary": {"stack": "onprem"},
                           **(serving or {})}
    (tmp_path / "Pulumi.onprem.yaml").write_text(yaml.safe_dump(raw))
    result = run_preview("onprem", config=load_layer("onprem", tmp_path))
    assert result.exit_code == 0, (result.engine_errors, result.mandatory_violations)
    return kubernetes_objects(result)


def test_the_canary_step_may_read_the_served_rollout_and_nothing_else(tmp_path):
    made = _onprem_canary(tmp_path)
    by = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in made}
    role = by[("Role", "inference", "pipeline-canary-research")]
    assert role["rules"] == [
        {"apiGroups": ["argoproj.io"], "resources": ["rollouts"], "resourceNames": ["triton"], "verbs": ["get"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["triton"], "verbs": ["get"]}]
    # Bound to research's steps account alone; the rollout and deployment it names are the served ones.
    binding = by[("RoleBinding", "inference", "pipeline-canary-research")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": STEPS_ACCOUNT, "namespace": "research"}]
    assert ("Rollout", "inference", "triton") in by and ("Deployment", "inference", "triton") in by
    # Its pods reach the API server (on the customer's addresses), as the engine's do.
    egress = by[("NetworkPolicy", "research", "pipeline-canary")]["spec"]
    assert egress["podSelector"] == {"matchLabels": {launch.VERB_LABEL: "canary"}}
    assert egress["egress"] == [{"to": [{"ipBlock": {"cidr": "10.40.0.0/28"}}],
                                 "ports": [{"protocol": "TCP", "port": 6443}]}]

    # The canary step's Job: the only step that mounts a token; a small share of the quota
    # (it holds it while it waits); no secret of any kind beyond the other steps'.
    config = by[("ConfigMap", "research", "golden-path")]
    steps = json.loads(config["data"]["steps.json"])
    args = ("step", "canary", "--params", "/etc/mlplat/pipeline/params.yaml", "--run", "manual-1")
    job = launch.manifest(steps, "training", args)
    [spec] = launch._pod_specs(job)
    assert spec["serviceAccountName"] == STEPS_ACCOUNT and spec["automountServiceAccountToken"] is True
    assert job["spec"]["template"]["metadata"]["labels"][launch.VERB_LABEL] == "canary"
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "250m", "memory": "1Gi"}
    [evaluate] = launch._pod_specs(launch.manifest(steps, "training", ("step", "evaluate", "--run", "manual-1")))
    assert [e for e in spec["containers"][0]["env"] if "valueFrom" in e] == \
        [e for e in evaluate["containers"][0]["env"] if "valueFrom" in e]
    for other in ("evaluate", "export", "promote"):
        [other_spec] = launch._pod_specs(launch.manifest(steps, "training", ("step", other, "--run", "manual-1")))
        assert other_spec["automountServiceAccountToken"] is False, other
    # What the launcher submits passes the namespace's admission and Pod Security restricted.
    job["metadata"]["name"] = job["metadata"].pop("generateName") + "x7k2p"
    assert [line for line in refusals([*(("program", o) for o in made), ("step", job)])
            if line.startswith("step:")] == []
    assert [f.describe() for t in pod_templates(job) for f in findings(t)] == []


@pytest.mark.parametrize("serving, message", [
    ({"model_name": "research-churn"},
     "serving.canary: this stack serves 'gpt', not the pipeline's serving.model_name"),
    ({"canary": {"stack": "prod"}}, "serving.canary: stack 'prod' is not this environment's ('onprem')"),
    ({"canary": {"stack": "onprem", "namespace": "serving"}},
     "serving.canary: serving/triton is not the served Rollout inference/triton"),
    # Exported where the stack does not serve from: its number would name another model there.
    ({"repository": "s3://{checkpoints}/runs/research/triton"},
     "serving.repository: s3://mlplat-onprem-checkpoints/runs/research/triton is not the repository the stack "
     "serves from (s3://mlplat-onprem-models/triton)"),
])
def test_a_canary_of_anything_but_the_served_rollout_is_refused(tmp_path, serving, message):
    from infra.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        _onprem_canary(tmp_path, serving)
