"""`TrainingJob` under mocks: the JobSet, the collective check, the GPU check daemon set
and the Pod Identity role as the engine receives them; the rendered pod specs pass
`kubernetes-validate --strict`; and the stacks run the job their config asks for."""

from __future__ import annotations

import json
from dataclasses import replace

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.training import TrainingJob, TrainingJobArgs
from components.training_spec import FORBIDDEN_ENV, TrainingPlan, job_of, training_args
from infra.catalog import lookup
from infra.versions import KUBERNETES_VERSION, image_uri
from tests.component.recorder import Recording, record
from tests.conftest import preview
from tests.helpers import of_type

ACCOUNT, REGION = "111122223333", "me-central-1"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
P5 = lookup("p5.48xlarge")

# The platform images as CI records them after a build.
BUILT = {"training": f"0.1.0-0a1b2c3d4e5f@sha256:{'1' * 64}", "checks": f"0.1.0-0a1b2c3d4e5f@sha256:{'2' * 64}"}
PLAN = TrainingPlan(
    name="gpt2", namespace="research", queue="default", pool="train-p5", instance=P5, efa=True, nodes=2,
    min_nodes=2, image=image_uri("training", ACCOUNT, REGION, "prod", BUILT),
    checks_image=image_uri("checks", ACCOUNT, REGION, "prod", BUILT),
    service_account="gpt2", lustre_claim="lustre-scratch", min_busbw_gbps=300.0,
    train_args=training_args("gpt2", "/fsx/research/gpt2", model="gpt2-124m", strategy="ddp", precision="bf16",
                             compile=True, max_steps=100, micro_batch=16, global_batch=256, checkpoint_every=50,
                             data_path=None, synthetic_tokens=1000),
)
def build(plan: TrainingPlan = PLAN, collective_check: bool = True) -> Recording:
    def program(_aws_provider):
        cluster = k8s.Provider("cluster-k8s", kubeconfig="{}")
        queue = k8s.core.v1.ConfigMap("queue-stand-in", metadata={"name": "q", "namespace": "research"},
                                      opts=pulumi.ResourceOptions(provider=cluster))
        TrainingJob("training", TrainingJobArgs(
            plan=plan, collective_check=collective_check, depends_on=(queue,),
        ), opts=pulumi.ResourceOptions(providers={"kubernetes": cluster}))

    return record(program)


@pytest.fixture(scope="module")
def rec() -> Recording:
    return build()


def jobset(rec: Recording, name: str = "gpt2") -> dict:
    [found] = [r for r in rec.of_type(JOBSET) if r.inputs()["metadata"]["name"] == name]
    return found.inputs()


def pod(manifest: dict) -> dict:
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def container(manifest: dict) -> dict:
    [main] = pod(manifest)["containers"]
    return main


# --- the trainer's JobSet ----------------------------------------------------------------


def test_one_pod_per_node_with_a_headless_service_for_rendezvous(rec):
    js = jobset(rec)
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js["kind"] == "JobSet"
    assert js["metadata"]["namespace"] == "research"
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": "gpt2", "publishNotReadyAddresses": True}
    [replicated] = js["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    assert replicated["replicas"] == 1
    assert job["parallelism"] == job["completions"] == 2 and job["completionMode"] == "Indexed"
    command = container(js)["command"]
    assert command[:7] == ["torchrun", "--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=gpt2-trainer-0-0.gpt2:29400", "--rdzv-id=research-gpt2-trainer",
                           "--max-restarts=2"]
    assert command[7:9] == ["-m", "workloads.train"]
    assert js["spec"]["failurePolicy"] == {"maxRestarts": 3}


def test_pod_owns_the_nodes_gpus_and_efa_interfaces_with_hugepages(rec):
    resources = container(jobset(rec))["resources"]
    assert resources["requests"] == resources["limits"]  # hugepages must; the rest for Guaranteed QoS
    assert resources["limits"]["nvidia.com/gpu"] == "8"
    assert resources["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert resources["limits"]["hugepages-2Mi"] == "5120Mi"
    assert resources["limits"]["cpu"] == "153" and resources["limits"]["memory"] == "1536Gi"


def test_shared_memory_is_memory_backed_and_lustre_is_mounted(rec):
    spec = pod(jobset(rec))
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert volumes["scratch"]["persistentVolumeClaim"] == {"claimName": "lustre-scratch"}
    mounts = {m["mountPath"]: m["name"] for m in container(jobset(rec))["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm" and mounts["/fsx"] == "scratch" and mounts["/tmp"] == "tmp"
    args = container(jobset(rec))["command"]
    assert args[args.index("--checkpoint-dir") + 1] == "/fsx/research/gpt2/checkpoints"


def test_nccl_environment_is_current(rec):
    env = {e["name"]: e["value"] for e in container(jobset(rec))["env"]}
    for name in FORBIDDEN_ENV:
        assert name not in env
    assert env["MLPLAT_GPU_PEAK_TFLOPS"] == "989.0"  # the catalog's H100 peak, for MFU
    assert not any(name.startswith("FI_") for name in env)


def test_scheduled_on_the_pool_through_the_tenants_queue(rec):
    js = jobset(rec)
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    spec = pod(js)
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in spec["tolerations"]
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "mlplat.io/pool", "operator": "In", "values": ["train-p5"]}]


def test_image_comes_from_the_in_region_registry(rec):
    for manifest in (jobset(rec), jobset(rec, "gpt2-allreduce")):
        spec = pod(manifest)
        for c in [*spec["containers"], *spec["initContainers"]]:
            assert c["image"] == ("111122223333.dkr.ecr.me-central-1.amazonaws.com/mlplat/prod/training:"
                                  f"{BUILT['training']}")


def test_runs_restricted_without_privilege(rec):
    spec = pod(jobset(rec))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in [*spec["containers"], *spec["initContainers"]]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in sc and "add" not in sc["capabilities"]
    assert not any("hostPath" in v for v in spec["volumes"])
    assert "hostNetwork" not in spec and "hostIPC" not in spec


def test_gpu_check_runs_before_training_on_the_pods_own_gpus(rec):
    [init] = pod(jobset(rec))["initContainers"]
    assert init["command"] == ["python", "-m", "workloads.gpucheck", "--expect-gpus", "8", "--expect-model", "h100",
                               "--expect-memory-gib", "80"]
    assert init["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_uses_its_service_account_with_pod_identity(rec):
    spec = pod(jobset(rec))
    assert spec["serviceAccountName"] == "gpt2"
    accounts = {r.inputs()["metadata"]["name"]: r for r in rec.of_type(SERVICE_ACCOUNT)}
    assert accounts["gpt2"].inputs()["metadata"]["namespace"] == "research"
    assert not [r for r in rec.registrations if r.type.startswith("aws:")], "the role is the cloud layer's"


def test_the_cloud_layer_gives_the_cluster_layers_service_account_its_role():
    cloud, cluster = preview("prod"), preview("prod-cluster")
    main = next(r.inputs() for r in of_type(cluster, JOBSET) if r.inputs()["metadata"]["name"] == "gpt2-smoke")
    account = (main["metadata"]["namespace"], pod(main)["serviceAccountName"])
    associations = {(a.inputs()["namespace"], a.inputs()["serviceAccount"]): a
                    for a in of_type(cloud, "aws:eks/podIdentityAssociation:PodIdentityAssociation")}
    assert account in associations
    identity = associations[account].parent
    assert identity.split("::")[-2] == "mlplat:iam:PodIdentityRole"
    [role] = [r for r in of_type(cloud, "aws:iam/role:Role") if r.parent == identity]
    trust = json.loads(role.inputs()["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    # For that service account alone (the session tags Pod Identity passes).
    tags = trust["Statement"][0]["Condition"]["StringEquals"]
    assert (tags["aws:RequestTag/kubernetes-namespace"], tags["aws:RequestTag/kubernetes-service-account"]) == account
    [policy] = [r for r in of_type(cloud, "aws:iam/rolePolicy:RolePolicy") if r.parent == identity]
    statements = {s["Sid"]: s for s in json.loads(policy.inputs()["policy"])["Statement"]}
    buckets = {r.name: r.inputs()["bucket"] for r in of_type(cloud, "aws:s3/bucket:Bucket")}
    tenant = account[0]
    # The tenant's own prefixes: its datasets and its runs, nothing in the models bucket.
    assert statements["ReadOwnDatasets"]["Resource"] == [f"arn:aws:s3:::{buckets['datasets']}/{tenant}/*"]
    assert statements["ReadWriteOwnRuns"]["Resource"] == [f"arn:aws:s3:::{buckets['checkpoints']}/runs/{tenant}/*"]
    assert statements["ReadWriteOwnRuns"]["Action"] == ["s3:GetObject", "s3:PutObject"]
    assert not any(buckets["models"] in json.dumps(s) for s in statements.values())
    assert not any("Delete" in a for s in statements.values() for a in s["Action"])


def test_pods_start_after_their_service_account_and_queue(rec):
    js = next(r for r in rec.of_type(JOBSET) if r.name == "training")
    queue = rec.one("kubernetes:core/v1:ConfigMap")
    sa = next(r for r in rec.of_type(SERVICE_ACCOUNT) if r.inputs()["metadata"]["name"] == "gpt2")
    assert {queue.urn, sa.urn} <= set(js.dependencies)


# --- the collective check and the GPU check ------------------------------------------


def test_collective_check_spans_the_same_nodes_with_the_threshold(rec):
    js = jobset(rec, "gpt2-allreduce")
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert js["spec"]["failurePolicy"] == {"maxRestarts": 0}
    command = container(js)["command"]
    assert "--rdzv-endpoint=gpt2-allreduce-allreduce-0-0.gpt2-allreduce:29400" in command
    assert command[command.index("-m") + 1:] == ["workloads.collectives", "--min-busbw-gbps", "300.0", "--json"]
    assert container(js)["resources"] == container(jobset(rec))["resources"]


def test_no_collective_check_when_not_asked():
    rec = build(collective_check=False)
    assert [r.inputs()["metadata"]["name"] for r in rec.of_type(JOBSET)] == ["gpt2"]


def test_gpu_check_runs_on_every_node_of_the_pool(rec):
    ds = rec.one(DAEMONSET).inputs()
    assert ds["metadata"]["namespace"] == "research"
    spec = ds["spec"]["template"]["spec"]
    [c] = spec["containers"]
    assert c["command"][:3] == ["python", "-m", "workloads.gpucheck"]
    assert c["command"][3:9] == ["--expect-gpus", "8", "--expect-model", "h100", "--expect-memory-gib", "80"]
    assert c["image"] == f"111122223333.dkr.ecr.me-central-1.amazonaws.com/mlplat/prod/checks:{BUILT['checks']}"
    assert "nvidia.com/gpu" not in c["resources"]["limits"]  # the GPUs stay with training
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]
    assert c["readinessProbe"]["exec"]["command"] == ["test", "-e", "/run/gpucheck/healthy"]
    assert spec["affinity"] == pod(jobset(rec))["affinity"] and spec["tolerations"] == pod(jobset(rec))["tolerations"]


# --- providers, parents, schema ----------------------------------------------------------


def test_children_are_parented_and_on_the_right_providers(rec):
    [component] = rec.of_type("mlplat:training:TrainingJob")
    [k8s_provider] = rec.of_type("pulumi:providers:kubernetes")
    inside = [r for r in rec.registrations if r.custom and not r.is_provider and r.name != "queue-stand-in"]
    assert inside
    for reg in inside:
        chain, parent = [], reg.parent
        while parent:
            chain.append(parent)
            parent = rec.by_urn(parent).parent if any(r.urn == parent for r in rec.registrations) else ""
        assert component.urn in chain, reg.urn
        assert reg.provider_urn == k8s_provider.urn, reg.urn


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, f"{KUBERNETES_VERSION}.0", strict=True)


def test_rendered_objects_pass_kubernetes_validate_strict(rec):
    """JobSet's own schema ships with its chart, so its Jobs are validated as the batch/v1
    Jobs JobSet creates from them (pod template included); the rest as they are."""
    for reg in rec.of_type(JOBSET):
        validate(job_of(reg.inputs()))
    for reg in [*rec.of_type(DAEMONSET), *rec.of_type(SERVICE_ACCOUNT)]:
        validate(reg.inputs())


def test_validation_would_catch_a_misspelt_field(rec):
    broken = job_of(jobset(rec))
    broken["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


# --- a single node without EFA or Lustre (the dev stack's shape) ------------------------


def test_single_node_without_efa_asks_for_no_efa_or_hugepages():
    g5 = replace(PLAN, name="smoke", pool="gpu", instance=lookup("g5.2xlarge"), efa=False, nodes=1, min_nodes=1,
                 service_account="smoke", lustre_claim=None)
    rec = build(g5, collective_check=False)
    js = jobset(rec, "smoke")
    limits = container(js)["resources"]["limits"]
    assert limits == {"cpu": "6", "memory": "24Gi", "nvidia.com/gpu": "1"}
    volumes = {v["name"]: v for v in pod(js)["volumes"]}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {}}
    validate(job_of(js))


# --- the stacks ----------------------------------------------------------------------------


@pytest.mark.parametrize("stack, nodes, gpus, efa, threshold", [
    ("prod", 2, "8", "32", "300.0"), ("staging", 2, "8", "4", "37.5"), ("dev", 1, "1", None, None),
])
def test_stacks_run_the_job_their_pools_allow(stack, nodes, gpus, efa, threshold):
    result = preview(f"{stack}-cluster")
    jobsets = {r.inputs()["metadata"]["name"]: r.inputs() for r in of_type(result, JOBSET)}
    main = jobsets["gpt2-smoke"]
    assert main["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == nodes
    limits = container(main)["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == gpus and limits.get("vpc.amazonaws.com/efa") == efa
    assert ("hugepages-2Mi" in limits) == (efa is not None)
    if threshold is None:
        assert set(jobsets) == {"gpt2-smoke"}
    else:
        command = container(jobsets["gpt2-smoke-allreduce"])["command"]
        assert command[command.index("--min-busbw-gbps") + 1] == threshold
    # The GPU check's DaemonSet is the only one the training job brings (the charts bring theirs).
    assert len([d for d in of_type(result, DAEMONSET) if "mlplat:training:TrainingJob" in d.urn]) == 1


def test_a_cpu_only_stack_runs_no_training():
    result = preview("smb-cluster")
    assert of_type(result, JOBSET) == [] and of_type(result, "mlplat:training:TrainingJob") == []
