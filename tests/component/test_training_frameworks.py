"""`framework`: the tenant's DeepSpeed, Horovod and TensorFlow images on the same JobSet as
the platform's trainer, read from what the engine receives under mocks. Host names, ports,
indices and the hostfile are checked against what JobSet and the kubelet make of the
manifest (the pod's DNS name from the JobSet's name, replicated job and subdomain; the
completion index through the downward API), not against the plan's values; every preset's
GPU pod is the torchrun pod's, field for field, but for what the framework launches. Last,
every preset and the collective check on a customer's InfiniBand or RoCE fabric: EFA's
settings never appear there, and the fabric's never on EFA."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components.fabric_spec import RDMA_SHARED_RESOURCE, NodeFabric
from components.training_spec import (
    EFA_RESOURCE,
    FORBIDDEN_ENV,
    HUGEPAGES_RESOURCE,
    default_min_busbw_gbps,
    job_of,
)
from infra.checks.admission import CRD_FOLDER
from infra.checks.apiserver import problems
from infra.checks.crd_schema import CrdIndex, load_crd_files, validate as crd_validate
from infra.config import parse_config
from infra.training import training_plan
from infra.training_plan import resolve_training
from infra.versions import KUBERNETES_VERSION
from tests.component.recorder import Recording
from tests.component.test_training_job import (
    ACCOUNT,
    BUILT,
    DAEMONSET,
    JOBSET,
    PLAN,
    build,
    container,
    jobset,
    pod,
)

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


# --- on a customer's InfiniBand or RoCE fabric ---------------------------------------------
# The same pods for every framework and the collective check, from a plan that carries the
# nodes' NodeFabric (components/fabric_spec.py) instead of EFA. What is EFA's never appears
# on an RDMA fabric's objects, and what is the RDMA fabric's never on EFA's.

FRAMEWORKS = ("torchrun", "deepspeed", "tensorflow", "horovod")
HCAS = tuple(f"mlx5_{i}" for i in range(8))
INFINIBAND = NodeFabric("infiniband", HCAS, 400)
ROCE = NodeFabric("roce", HCAS[:2], 200, gid_index=3)
FABRIC_ARGS = ("--expect-hcas", "--expect-port-rate-gbps", "--expect-link-layer")


def on_fabric(name: str, fabric: NodeFabric | None) -> Recording:
    """Framework `name` on `fabric` (None: EFA, as PLAN is), with everything the job brings:
    the collective check (with torchrun), the GPU check's DaemonSet, horovod's ConfigMap."""
    plan = PLAN if fabric is None else replace(PLAN, efa=False, fabric=fabric,
                                               min_busbw_gbps=default_min_busbw_gbps(PLAN.instance, fabric))
    if name != "torchrun":
        plan = replace(plan, framework=name, user_image=USER_IMAGE, command=COMMAND, train_args=())
    return build(plan, collective_check=name == "torchrun")


@pytest.fixture(scope="module")
def fabrics() -> dict[tuple[str, str], Recording]:
    """Every framework on EFA and on InfiniBand; torchrun (with the collective check) on RoCE."""
    runs = {(name, kind): on_fabric(name, fabric) for name in FRAMEWORKS
            for kind, fabric in (("efa", None), ("infiniband", INFINIBAND))}
    runs[("torchrun", "roce")] = on_fabric("torchrun", ROCE)
    return runs


def pod_specs(rec: Recording) -> list[dict]:
    """Every pod template the job brings: each replicated job of each JobSet, and the GPU
    check's DaemonSet."""
    specs = [pod_of(rj) for js in rec.of_type(JOBSET) for rj in js.inputs()["spec"]["replicatedJobs"]]
    return specs + [ds.inputs()["spec"]["template"]["spec"] for ds in rec.of_type(DAEMONSET)]


def efa_setting(word: str) -> bool:
    return word in (EFA_RESOURCE, HUGEPAGES_RESOURCE, *FORBIDDEN_ENV) or word.startswith(("FI_", "OFI_NCCL_"))


def rdma_setting(word: str) -> bool:
    return word.startswith(("rdma/", "NCCL_IB_")) or word in ("NCCL_NET", *FABRIC_ARGS)


def fabric_words(rec: Recording) -> set[str]:
    """Every resource name, variable name and command word of every container of the job
    (mpirun's `-x NAME` forwarding included)."""
    words: set[str] = set()
    for spec in pod_specs(rec):
        for c in [*spec["containers"], *spec.get("initContainers", [])]:
            for amounts in c.get("resources", {}).values():
                words |= set(amounts)
            words |= {e["name"] for e in c.get("env", [])}
            words |= set(c.get("command", []))
    return words


@pytest.mark.parametrize("name, kind", [*((name, "infiniband") for name in FRAMEWORKS), ("torchrun", "roce")])
def test_efa_settings_never_appear_on_an_rdma_fabric(fabrics, name, kind):
    words = fabric_words(fabrics[(name, kind)])
    assert sorted(w for w in words if efa_setting(w)) == []
    assert {RDMA_SHARED_RESOURCE, "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_NET", "--expect-hcas"} <= words


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_rdma_settings_never_appear_on_efa(fabrics, name):
    words = fabric_words(fabrics[(name, "efa")])
    assert sorted(w for w in words if rdma_setting(w)) == []
    assert {EFA_RESOURCE, HUGEPAGES_RESOURCE} <= words


def test_the_checks_cover_what_each_fabric_sets(fabrics):
    """The two word lists above see every fabric-specific word the other fabric's objects
    hold, so neither test passes by looking for the wrong names."""
    efa, ib = fabric_words(fabrics[("torchrun", "efa")]), fabric_words(fabrics[("torchrun", "infiniband")])
    assert {w for w in efa - ib if not efa_setting(w)} == set()
    assert {w for w in ib - efa if not rdma_setting(w)} == {",".join(HCAS), "400", "InfiniBand"}  # the flags' values


def gpu_containers(rec: Recording) -> list[dict]:
    return [c for spec in pod_specs(rec) for c in spec["containers"]
            if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_gpu_pod_asks_for_one_shared_rdma_device_and_no_huge_pages(fabrics, name):
    """One unit of the RDMA shared device plugin's resource carries every HCA of the node."""
    containers = gpu_containers(fabrics[(name, "infiniband")])
    assert containers
    for c in containers:
        assert c["resources"]["requests"] == c["resources"]["limits"] == {
            "cpu": "153", "memory": "1536Gi", "nvidia.com/gpu": "8", RDMA_SHARED_RESOURCE: "1"}


def env_of(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_gpu_pod_carries_nccls_infiniband_settings(fabrics, name):
    for c in gpu_containers(fabrics[(name, "infiniband")]):
        nccl = {k: v for k, v in env_of(c).items() if k.startswith("NCCL_") and k != "NCCL_DEBUG"}
        assert nccl == {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0",
                        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1"}


def test_roce_adds_its_gid_index(fabrics):
    for c in gpu_containers(fabrics[("torchrun", "roce")]):
        env = env_of(c)
        assert (env["NCCL_IB_HCA"], env["NCCL_IB_GID_INDEX"]) == ("=mlx5_0:1,mlx5_1:1", "3")


def test_horovod_forwards_the_fabric_settings_to_the_ranks_it_starts_over_ssh(fabrics):
    """sshd gives mpirun's ranks none of the worker container's variables: the launcher's
    `-x` forwards them."""
    _, launcher, command = launcher_parts(the_jobset(fabrics[("horovod", "infiniband")]))
    forwarded = {command[i + 1] for i, word in enumerate(command) if word == "-x"}
    assert {"NCCL_NET", "NCCL_IB_DISABLE", "NCCL_IB_HCA"} <= forwarded
    assert env_of(launcher)["NCCL_IB_HCA"] == env_of(gpu_containers(fabrics[("horovod", "infiniband")])[0])["NCCL_IB_HCA"]


def without_fabric(spec: dict) -> dict:
    """A pod spec with every fabric-specific resource, variable and GPU-check flag removed."""
    spec = json.loads(json.dumps(spec))
    for c in [*spec["containers"], *spec.get("initContainers", [])]:
        for amounts in c.get("resources", {}).values():
            for key in [k for k in amounts if efa_setting(k) or rdma_setting(k)]:
                del amounts[key]
        c["env"] = [e for e in c.get("env", []) if not rdma_setting(e["name"])]
        command = c.get("command", [])
        for flag in FABRIC_ARGS:
            if flag in command:
                del command[command.index(flag):command.index(flag) + 2]
        while any(a == "-x" and rdma_setting(b) for a, b in zip(command, command[1:])):  # mpirun's forwarding
            i = next(i for i, (a, b) in enumerate(zip(command, command[1:])) if a == "-x" and rdma_setting(b))
            del command[i:i + 2]
    return spec


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_the_rdma_pods_are_the_efa_pods_but_for_the_fabric(fabrics, name):
    """Shared memory, Lustre, security context (no added capability), queue, affinity and
    tolerations: all as on EFA."""
    efa, ib = pod_specs(fabrics[(name, "efa")]), pod_specs(fabrics[(name, "infiniband")])
    assert [without_fabric(s) for s in ib] == [without_fabric(s) for s in efa]
    for spec in ib:
        for c in [*spec["containers"], *spec.get("initContainers", [])]:
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_gpu_checks_judge_the_hca_ports(fabrics):
    rec = fabrics[("torchrun", "infiniband")]
    expected = ["--expect-hcas", ",".join(HCAS), "--expect-port-rate-gbps", "400", "--expect-link-layer", "InfiniBand"]
    [daemon] = rec.of_type(DAEMONSET)
    commands = [c["command"] for spec in pod_specs(rec) for c in spec.get("initContainers", [])]
    commands.append(daemon.inputs()["spec"]["template"]["spec"]["containers"][0]["command"])
    assert len(commands) == 3  # the trainer's, the collective check's, the daemon set's
    for command in commands:
        assert command[9:15] == expected
    roce = [c["command"] for spec in pod_specs(fabrics[("torchrun", "roce")]) for c in spec.get("initContainers", [])]
    assert roce[0][roce[0].index("--expect-link-layer") + 1] == "Ethernet"


def test_the_collective_check_gates_at_the_fabrics_bandwidth(fabrics):
    """Three quarters of the fabric's line rate: 8 x NDR 400 is 3200 Gb/s, 300 GB/s (as p5's
    EFA); a 4 x HDR 200 node of the same GPUs gates at 75, not at p5's network."""
    command = container(jobset(fabrics[("torchrun", "infiniband")], "gpt2-allreduce"))["command"]
    assert command[command.index("--min-busbw-gbps") + 1] == "300.0"
    hdr = NodeFabric("infiniband", HCAS[:4], 200)
    assert default_min_busbw_gbps(PLAN.instance, hdr) == 75.0 != default_min_busbw_gbps(PLAN.instance) == 300.0
    rec = on_fabric("torchrun", hdr)
    command = container(jobset(rec, "gpt2-allreduce"))["command"]
    assert command[command.index("--min-busbw-gbps") + 1] == "75.0"


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_rdma_jobsets_pass_the_schemas(fabrics, name):
    index = CrdIndex.of(load_crd_files(CRD_FOLDER / "jobset-v0.12.0"))
    for js in fabrics[(name, "infiniband")].of_type(JOBSET):
        manifest = js.inputs()
        assert crd_validate(manifest, index).problems == []
        for i, _ in enumerate(manifest["spec"]["replicatedJobs"]):
            kubernetes_validate.validate(job_of(manifest, i), f"{KUBERNETES_VERSION}.0", strict=True)
