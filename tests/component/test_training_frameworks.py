"""`framework`: the tenant's DeepSpeed, Horovod and TensorFlow images on the same JobSet as
the platform's trainer, read from what the engine receives under mocks. Host names, ports,
indices and the hostfile are checked against what JobSet and the kubelet make of the
manifest (the pod's DNS name from the JobSet's name, replicated job and subdomain; the
completion index through the downward API), not against the plan's values; every preset's
GPU pod is the torchrun pod's, field for field, but for what the framework launches."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components.training_spec import job_of
from infra.checks.admission import CRD_FOLDER
from infra.checks.apiserver import problems
from infra.checks.crd_schema import CrdIndex, load_crd_files, validate as crd_validate
from infra.config import parse_config
from infra.training import training_plan
from infra.training_plan import resolve_training
from infra.versions import KUBERNETES_VERSION
from tests.component.test_training_job import ACCOUNT, BUILT, JOBSET, PLAN, build, container, pod

REPO = Path(__file__).resolve().parents[2]
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
USER_IMAGE = f"{ACCOUNT}.dkr.ecr.me-central-1.amazonaws.com/research/horovod:0.28.1@sha256:{'c' * 64}"
COMMAND = ("python", "/opt/train.py", "--epochs", "3")
# The annotation an Indexed Job's pod carries its completion index in.
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def framework(name: str, **changes):
    plan = replace(PLAN, framework=name, user_image=USER_IMAGE, command=COMMAND, train_args=(), **changes)
    return build(plan, collective_check=False)


@pytest.fixture(scope="module")
def torchrun():
    return build(PLAN, collective_check=False)


@pytest.fixture(scope="module")
def recordings():
    return {name: framework(name) for name in ("deepspeed", "tensorflow", "horovod")}


def the_jobset(rec) -> dict:
    [found] = rec.of_type(JOBSET)
    return found.inputs()


def replicated(manifest: dict, name: str) -> dict:
    [found] = [rj for rj in manifest["spec"]["replicatedJobs"] if rj["name"] == name]
    return found


def pod_of(rj: dict) -> dict:
    return rj["template"]["spec"]["template"]["spec"]


def dns_name(manifest: dict, rj: dict, index: int) -> str:
    """What JobSet names the pod at completion `index` of a replicated job's one Job."""
    assert manifest["spec"]["network"]["enableDNSHostnames"] is True and rj["replicas"] == 1
    return f"{manifest['metadata']['name']}-{rj['name']}-0-{index}.{manifest['spec']['network']['subdomain']}"


def kubelet_env(main: dict, index: int) -> dict[str, str]:
    """The container's environment as the kubelet makes it for the pod at completion index
    `index`: the downward API resolved, and `$(VAR)` expanded from the variables defined
    before it in the list (a later or unknown one stays as written)."""
    env: dict[str, str] = {}
    for var in main["env"]:
        if "valueFrom" in var:
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": INDEX_FIELD}}, var
            env[var["name"]] = str(index)
        else:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), var["value"])
    return env


def mounted_file(rec, spec: dict, main: dict, path: str) -> tuple[dict, str]:
    """(the ConfigMap, its file's text) that a container sees at `path`."""
    [mount] = [m for m in main["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    [cm] = [r.inputs() for r in config_maps(rec) if r.inputs()["metadata"]["name"] == volume["configMap"]["name"]]
    return cm, cm["data"][path.removeprefix(mount["mountPath"] + "/")]


def config_maps(rec) -> list:
    return [r for r in rec.of_type(CONFIG_MAP) if r.name != "queue-stand-in"]


def port(main: dict, name: str) -> int:
    [found] = [p["containerPort"] for p in main["ports"] if p["name"] == name]
    return found


# --- the same GPU pod for every framework ------------------------------------------------

SAME = ("serviceAccountName", "automountServiceAccountToken", "securityContext", "affinity", "tolerations",
        "restartPolicy", "terminationGracePeriodSeconds")


@pytest.mark.parametrize("name", ["deepspeed", "tensorflow", "horovod"])
def test_each_framework_gets_the_torchrun_pods_hardware_storage_queue_and_security(recordings, torchrun, name):
    theirs, ours = the_jobset(recordings[name]), the_jobset(torchrun)
    assert theirs["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ours["metadata"]["labels"][
        "kueue.x-k8s.io/queue-name"] == "default"
    gpu_pod, torch_pod = pod_of(replicated(theirs, "trainer")), pod(ours)
    for key in SAME:
        assert gpu_pod[key] == torch_pod[key], key
    main, torch_main = gpu_pod["containers"][0], container(ours)
    # EFA interfaces, huge pages, GPUs, CPU and memory: the whole node, as torchrun's.
    assert main["resources"] == torch_main["resources"]
    assert main["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert main["securityContext"] == torch_main["securityContext"]
    # /dev/shm, /tmp and the Lustre claim, as torchrun's (horovod adds its ConfigMap).
    volumes = {v["name"]: v for v in gpu_pod["volumes"]}
    for volume in torch_pod["volumes"]:
        assert volumes[volume["name"]] == volume
    mounts = {m["mountPath"]: m for m in main["volumeMounts"]}
    for mount in torch_main["volumeMounts"]:
        assert mounts[mount["mountPath"]] == mount
    assert main["image"] == USER_IMAGE
    # The GPU check first, from the checks image: the tenant's image does not carry it.
    [check], [torch_check] = gpu_pod["initContainers"], torch_pod["initContainers"]
    assert check["command"] == torch_check["command"] and check["resources"] == torch_check["resources"]
    assert check["image"] == f"{ACCOUNT}.dkr.ecr.me-central-1.amazonaws.com/mlplat/prod/checks:{BUILT['checks']}"
    # The platform's environment (NCCL, MFU peak), plus where the job may write.
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert {e["name"]: e["value"] for e in torch_main["env"]}.items() <= env.items()
    assert env["MLPLAT_WORK_DIR"] == "/fsx/research/gpt2"


# --- deepspeed ---------------------------------------------------------------------------


def test_deepspeed_runs_the_command_under_torchruns_rendezvous_at_the_first_pod(recordings):
    manifest = the_jobset(recordings["deepspeed"])
    rj = replicated(manifest, "trainer")
    main = pod_of(rj)["containers"][0]
    job = rj["template"]["spec"]
    command = main["command"]
    assert command[0] == "torchrun"
    flags = dict(part.split("=", 1) for part in command if part.startswith("--") and "=" in part)
    # Rendezvous (and so MASTER_ADDR, which DeepSpeed reads) at completion index 0's DNS
    # name, on a port the pod declares.
    assert flags["--rdzv-endpoint"] == f"{dns_name(manifest, rj, 0)}:{port(main, 'rendezvous')}"
    assert flags["--rdzv-backend"] == "c10d"
    assert flags["--nnodes"] == str(job["parallelism"]) == str(job["completions"]) == "2"
    assert flags["--nproc-per-node"] == main["resources"]["limits"]["nvidia.com/gpu"]
    assert job["completionMode"] == "Indexed"
    at = command.index("--no-python")
    assert command[at + 1:] == list(COMMAND)
    assert "-m" not in command[:at]


# --- tensorflow --------------------------------------------------------------------------


def test_tf_config_lists_every_pod_and_takes_the_index_from_the_completion_index(recordings):
    manifest = the_jobset(recordings["tensorflow"])
    rj = replicated(manifest, "trainer")
    main = pod_of(rj)["containers"][0]
    pods = rj["template"]["spec"]["completions"]
    assert rj["template"]["spec"]["completionMode"] == "Indexed" and pods == 2
    tf_port = port(main, "tf-worker")
    everyone = [f"{dns_name(manifest, rj, i)}:{tf_port}" for i in range(pods)]
    configs = [json.loads(kubelet_env(main, i)["TF_CONFIG"]) for i in range(pods)]
    for index, config in enumerate(configs):
        assert config == {"cluster": {"worker": everyone}, "task": {"type": "worker", "index": index}}
    assert main["command"] == list(COMMAND)  # one process per pod: the strategy drives the node's GPUs


def test_tf_config_would_be_broken_if_the_index_came_after_it(recordings):
    """The check above is a real one: Kubernetes expands only earlier variables."""
    main = pod_of(replicated(the_jobset(recordings["tensorflow"]), "trainer"))["containers"][0]
    swapped = dict(main, env=[e for e in main["env"] if "valueFrom" not in e]
                   + [e for e in main["env"] if "valueFrom" in e])
    with pytest.raises(json.JSONDecodeError):
        json.loads(kubelet_env(swapped, 1)["TF_CONFIG"])


# --- horovod -----------------------------------------------------------------------------


def launcher_parts(manifest: dict) -> tuple[dict, dict, list[str]]:
    rj = replicated(manifest, "launcher")
    main = pod_of(rj)["containers"][0]
    command = main["command"]
    assert command[:2] == ["sh", "-c"]
    return rj, main, command


def test_horovod_hostfile_lists_every_worker_with_a_slot_per_gpu(recordings):
    rec = recordings["horovod"]
    manifest = the_jobset(rec)
    workers = replicated(manifest, "trainer")
    worker = pod_of(workers)["containers"][0]
    _, launcher, command = launcher_parts(manifest)
    # The hostfile mpirun reads is the ConfigMap's, mounted where the command names it.
    hostfile_path = command[command.index("--hostfile") + 1]
    cm, text = mounted_file(rec, pod_of(replicated(manifest, "launcher")), launcher, hostfile_path)
    assert cm["metadata"]["namespace"] == manifest["metadata"]["namespace"]
    lines = text.splitlines()
    gpus = worker["resources"]["limits"]["nvidia.com/gpu"]
    pods = workers["template"]["spec"]["completions"]
    assert lines == [f"{dns_name(manifest, workers, i)} slots={gpus}" for i in range(pods)]
    # One rank per slot.
    assert command[command.index("-np") + 1] == str(pods * int(gpus)) == "16"


def test_horovod_launcher_reaches_the_workers_sshd_with_a_key_it_makes_per_run(recordings):
    rec = recordings["horovod"]
    manifest = the_jobset(rec)
    workers = replicated(manifest, "trainer")
    worker_pod = pod_of(workers)
    worker = worker_pod["containers"][0]
    _, launcher, command = launcher_parts(manifest)
    ssh_port = port(worker, "ssh")
    assert worker["readinessProbe"]["tcpSocket"]["port"] == ssh_port
    env = {e["name"]: e.get("value") for e in launcher["env"]}
    for key in ("OMPI_MCA_plm_rsh_args", "PRTE_MCA_plm_ssh_args"):
        args = shlex.split(env[key])
        assert args[args.index("-p") + 1] == str(ssh_port)
        identity = args[args.index("-i") + 1]
    assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"  # the pods' names resolve only in full
    # The worker's sshd reads the config the ConfigMap mounts, and trusts the file the
    # launcher writes: on the Lustre claim both pods mount at the same path.
    sshd = worker["command"][-1]
    _, text = mounted_file(rec, worker_pod, worker, sshd.split(" -f ")[-1])
    sshd_config = dict(line.split(" ", 1) for line in text.splitlines())
    assert sshd_config["Port"] == str(ssh_port) and sshd_config["PasswordAuthentication"] == "no"
    keys_file = command[command.index("mpi-launch") + 1]
    assert sshd_config["AuthorizedKeysFile"] == keys_file
    script = command[2]
    assert f'ssh-keygen -q -t ed25519 -N "" -f {identity}' in script and f"cp {identity}.pub" in script
    for spec, main in ((worker_pod, worker), (pod_of(replicated(manifest, "launcher")), launcher)):
        lustre = {v["name"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
        assert any(keys_file.startswith(m["mountPath"] + "/") and m["name"] in lustre for m in main["volumeMounts"])
    # What the workers need from the launcher's environment reaches the ranks.
    forwarded = {command[i + 1] for i, part in enumerate(command) if part == "-x"}
    assert {e["name"] for e in worker["env"]} <= forwarded
    assert command[-len(COMMAND):] == list(COMMAND)


def test_horovod_workers_are_ready_before_the_launcher_which_ends_the_job(recordings):
    manifest = the_jobset(recordings["horovod"])
    assert [rj["name"] for rj in manifest["spec"]["replicatedJobs"]] == ["trainer", "launcher"]
    launcher_rj, launcher, _ = launcher_parts(manifest)
    assert launcher_rj["dependsOn"] == [{"name": "trainer", "status": "Ready"}]
    assert launcher_rj["template"]["spec"]["parallelism"] == 1
    assert manifest["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["launcher"]}
    # The launcher needs no GPU node: no GPU, no EFA, no GPU toleration.
    spec = pod_of(launcher_rj)
    assert set(launcher["resources"]["limits"]) == {"cpu", "memory"}
    assert "tolerations" not in spec and "affinity" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert launcher["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_horovod_config_map_exists_before_the_jobset(recordings):
    rec = recordings["horovod"]
    [js] = rec.of_type(JOBSET)
    [cm] = config_maps(rec)
    assert cm.urn in js.dependencies


def test_one_node_horovod_runs_mpirun_in_its_only_pod():
    rec = framework("horovod", nodes=1, min_nodes=1)
    manifest = the_jobset(rec)
    [rj] = manifest["spec"]["replicatedJobs"]
    main = pod_of(rj)["containers"][0]
    gpus = main["resources"]["limits"]["nvidia.com/gpu"]
    command = main["command"]
    assert command[0] == "mpirun" and command[command.index("-H") + 1] == f"localhost:{gpus}"
    assert command[command.index("-np") + 1] == gpus
    assert config_maps(rec) == []


# --- what the API server would say --------------------------------------------------------


@pytest.mark.parametrize("name", ["deepspeed", "tensorflow", "horovod"])
def test_rendered_objects_pass_the_schemas(recordings, name):
    """The JobSet against JobSet's own CRD (schema and CEL rules, as the API server judges
    it), its Jobs and the ConfigMap against Kubernetes' schemas."""
    rec = recordings[name]
    manifest = the_jobset(rec)
    index = CrdIndex.of(load_crd_files(CRD_FOLDER / "jobset-v0.12.0"))
    assert crd_validate(manifest, index).problems == []
    for i, _ in enumerate(manifest["spec"]["replicatedJobs"]):
        job = job_of(manifest, i)
        kubernetes_validate.validate(job, f"{KUBERNETES_VERSION}.0", strict=True)
        assert problems(job) == []
    for cm in config_maps(rec):
        kubernetes_validate.validate(cm.inputs(), f"{KUBERNETES_VERSION}.0", strict=True)


def test_the_crd_check_would_refuse_a_wrong_dependency(recordings):
    manifest = json.loads(json.dumps(the_jobset(recordings["horovod"])))
    replicated(manifest, "launcher")["dependsOn"][0]["status"] = "Started"
    index = CrdIndex.of(load_crd_files(CRD_FOLDER / "jobset-v0.12.0"))
    assert crd_validate(manifest, index).problems


# --- from the stack's config ---------------------------------------------------------------


def test_the_tenants_image_is_pulled_from_the_in_region_registry_by_digest():
    raw = yaml.safe_load((REPO / "stacks" / "Pulumi.prod.yaml").read_text())["config"]
    raw["mlplat:training"] = {"framework": "tensorflow", "image": f"research/tf:2.19@sha256:{'d' * 64}",
                              "command": ["python", "train.py"]}
    config = parse_config(raw, "prod")
    plan = training_plan(config, resolve_training(config), ACCOUNT, BUILT)
    assert plan.user_image == f"{ACCOUNT}.dkr.ecr.me-central-1.amazonaws.com/research/tf:2.19@sha256:{'d' * 64}"
    assert (plan.framework, plan.command, plan.train_args) == ("tensorflow", ("python", "train.py"), ())
    # The platform's images still run the checks.
    assert plan.image.endswith(f"/mlplat/prod/training:{BUILT['training']}")
