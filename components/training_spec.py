"""What a distributed training job looks like on the cluster, as plain Kubernetes manifests.

One JobSet runs the trainer with one pod per node; JobSet's headless service gives each
pod a stable DNS name, and the first pod's name is the c10d rendezvous endpoint. A second
JobSet of the same shape runs the all-reduce bandwidth check, and a DaemonSet runs the GPU
node check on every node of the pool. Nothing here imports Pulumi; `components/training.py`
turns these dicts into resources.

What a pod on an EFA node needs, and why:
- `vpc.amazonaws.com/efa` equal to the node's EFA interfaces (one per network card), or
  NCCL trains over fewer rails; `nvidia.com/gpu` equal to its GPUs, so one pod owns a node.
- `hugepages-2Mi` (requests equal to limits, as Kubernetes requires): libfabric registers
  its bounce buffers in huge pages.
- a memory-backed `/dev/shm`: NCCL's intra-node buffers; the container default is 64 MiB.
- no privileged mode and no added capabilities: the EFA device plugin hands the pod its
  `/dev/infiniband/uverbs*` devices. Registering memory needs a high locked-memory limit,
  which pods inherit from the node's container runtime (the EKS AMIs raise containerd's
  to unlimited); `IPC_LOCK` would not help, since a non-root process has no effective
  capabilities.
- no `FI_PROVIDER`, `FI_EFA_USE_DEVICE_RDMA` or `FI_EFA_FORK_SAFE`: aws-ofi-nccl 1.7+
  with libfabric 1.18+ chooses the EFA provider and GPUDirect RDMA itself, and fork safety
  is no longer needed. `RDMAV_FORK_SAFE` is never set: it slows memory registration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from infra.catalog import InstanceType

API_VERSION = "jobset.x-k8s.io/v1alpha2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POOL_LABEL = "mlplat.io/pool"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"
HUGEPAGES = "5120Mi"
# The node pools' taint (components/specs/nodepool.py GPU_TAINT), tolerated exactly.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
RDZV_PORT = 29400
TRAINER = "trainer"  # the replicated job's name, part of every pod's host name
RUN_AS = 10001  # a UID that belongs to no user on the host

# Where volumes appear in the trainer's container.
SCRATCH_MOUNT = "/fsx"  # the Lustre scratch file system (the tenant's claim)
LOCAL_SCRATCH = "/scratch"  # a node-local emptyDir where there is no Lustre (single node only)
SHM_PER_GPU_GI = 8
TMP_GI = 20  # torch.compile and Triton caches ($HOME is /tmp)

# Variables that must never reach a training pod on EFA (see the module docstring).
FORBIDDEN_ENV = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "RDMAV_FORK_SAFE")
PEAK_TFLOPS_ENV = "MLPLAT_GPU_PEAK_TFLOPS"  # workloads/train/metrics.py reads it for MFU


@dataclass(frozen=True)
class TrainingPlan:
    """Everything the manifests depend on, resolved from the stack's config and catalog."""

    name: str  # JobSet name; pods are <name>-trainer-<i>-0
    namespace: str  # the tenant's namespace
    queue: str  # the tenant's Kueue LocalQueue
    pool: str  # node pool name (label mlplat.io/pool)
    instance: InstanceType
    efa: bool  # the pool attaches EFA interfaces
    nodes: int
    min_nodes: int  # torchrun's elastic lower bound
    image: str  # training image (in-region ECR)
    checks_image: str  # GPU check image (in-region ECR)
    service_account: str
    lustre_claim: str | None  # the tenant's Lustre claim; None: node-local scratch
    train_args: tuple[str, ...] = ()  # arguments of `python -m workloads.train`
    min_busbw_gbps: float = 0.0  # collective check threshold
    max_restarts: int = 3  # JobSet restarts (every pod); the trainer resumes from its checkpoint
    worker_restarts: int = 2  # torchrun restarts of a pod's workers before the pod fails
    labels: dict[str, str] = field(default_factory=dict)
    # The tracking server, the tenant's user and where checkpoints are copied
    # (infra/training.py tracking_env); empty: the run is not tracked.
    tracking_env: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> int:
        return self.instance.gpus

    @property
    def efa_interfaces(self) -> int:
        return self.instance.efa_interfaces if self.efa else 0

    @property
    def work_dir(self) -> str:
        """This job's directory: on Lustre, shared by every node; else node-local."""
        if self.lustre_claim:
            return f"{SCRATCH_MOUNT}/{self.namespace}/{self.name}"
        return f"{LOCAL_SCRATCH}/{self.name}"


def default_min_busbw_gbps(instance: InstanceType) -> float:
    """Three quarters of the node's network line rate in GB/s: 300 GB/s for p5 (3200 Gbps),
    which is NVIDIA's gate for two p5 nodes (they reach about 480); 37.5 for p4d."""
    return round(0.75 * instance.network_gbps / 8, 1)


def pod_resources(instance: InstanceType, efa: bool) -> dict[str, dict[str, str]]:
    """Requests equal to limits (Guaranteed QoS: the kubelet evicts these pods last).

    A node's GPUs and EFA interfaces go whole to one pod. CPU and memory leave a fifth and a
    quarter of the node to the kubelet, the system and the platform's daemon sets (device
    plugins, CSI, exporters), whose reservations grow with the node."""
    amounts: dict[str, str] = {
        "cpu": str(max(1, math.floor(instance.vcpus * 0.8))),
        "memory": f"{max(1, math.floor(instance.memory_gib * 0.75))}Gi",
        GPU_RESOURCE: str(instance.gpus),
    }
    if efa:
        amounts[EFA_RESOURCE] = str(instance.efa_interfaces)
        amounts[HUGEPAGES_RESOURCE] = HUGEPAGES
    return {"requests": dict(amounts), "limits": dict(amounts)}


def shm_size(instance: InstanceType) -> str:
    """/dev/shm: 8 GiB per GPU, at most a quarter of the pod's memory (it counts against it)."""
    pod_gi = math.floor(instance.memory_gib * 0.75)
    return f"{max(1, min(SHM_PER_GPU_GI * instance.gpus, pod_gi // 4))}Gi"


def nccl_env(plan: TrainingPlan) -> list[dict[str, str]]:
    """Environment of the trainer and the collective check. Current aws-ofi-nccl needs no
    FI_* settings; the library path to the plugin is set in the image."""
    env = [
        # Warnings only; whether NCCL really runs over EFA is proven by the collective check
        # (a TCP fallback cannot reach its threshold), not by reading logs.
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": "/tmp"},
    ]
    if plan.instance.gpu is not None:
        env.append({"name": PEAK_TFLOPS_ENV, "value": str(plan.instance.gpu.bf16_tflops)})
    env += [{"name": k, "value": v} for k, v in plan.tracking_env]
    return env


def host(plan: TrainingPlan, replicated_job: str, index: int = 0) -> str:
    """A pod's DNS name inside the namespace, as JobSet names it."""
    return f"{plan.name}-{replicated_job}-{index}-0.{plan.name}"


def torchrun(plan: TrainingPlan, replicated_job: str, module: str, args: tuple[str, ...] | list[str]) -> list[str]:
    """torchrun with c10d rendezvous at the first pod; elastic between min_nodes and nodes."""
    nnodes = str(plan.nodes) if plan.min_nodes == plan.nodes else f"{plan.min_nodes}:{plan.nodes}"
    return [
        "torchrun",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={plan.gpus}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host(plan, replicated_job)}:{RDZV_PORT}",
        f"--rdzv-id={plan.namespace}-{plan.name}-{replicated_job}",
        f"--max-restarts={plan.worker_restarts}",
        "-m", module, *args,
    ]


def gpu_check_command(plan: TrainingPlan, *extra: str) -> list[str]:
    gpu = plan.instance.gpu
    assert gpu is not None
    return ["python", "-m", "workloads.gpucheck", "--expect-gpus", str(plan.gpus), "--expect-model", gpu.model,
            "--expect-memory-gib", str(gpu.memory_gib), *extra]


CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pool_affinity(pool: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [pool]}]}
    ]}}}


def instance_type_affinity(instance_types: tuple[str, ...], spread: str | None = None) -> dict[str, Any]:
    """Pods on nodes of these instance types (a platform service's pool); with `spread`, the
    replicas of app `spread` preferably on different nodes, so one node's loss leaves the
    service up."""
    affinity: dict[str, Any] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                                     "values": sorted(instance_types)}]}]}}}
    if spread:
        affinity["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": spread}},
                                               "topologyKey": "kubernetes.io/hostname"}}]}
    return affinity


def _volumes(plan: TrainingPlan, scratch: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(plan.instance)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": f"{TMP_GI}Gi"}},
    ]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]
    if scratch:
        if plan.lustre_claim:
            volumes.append({"name": "scratch", "persistentVolumeClaim": {"claimName": plan.lustre_claim}})
            mounts.append({"name": "scratch", "mountPath": SCRATCH_MOUNT})
        else:
            volumes.append({"name": "scratch", "emptyDir": {}})
            mounts.append({"name": "scratch", "mountPath": LOCAL_SCRATCH})
    return volumes, mounts


def gpu_pod_spec(plan: TrainingPlan, replicated_job: str, module: str, args: list[str] | tuple[str, ...],
                 scratch: bool) -> dict[str, Any]:
    """One node's pod: a GPU check of the pod's own GPUs first (a broken GPU fails the pod
    before it joins the job), then torchrun."""
    volumes, mounts = _volumes(plan, scratch)
    preflight = {
        "name": "gpu-check",
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": gpu_check_command(plan),
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(plan.gpus)},
                      "limits": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(plan.gpus)}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": CONTAINER_SECURITY,
    }
    main = {
        "name": replicated_job,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": torchrun(plan, replicated_job, module, args),
        "env": nccl_env(plan),
        "ports": [{"name": "rendezvous", "containerPort": RDZV_PORT, "protocol": "TCP"}],
        "resources": pod_resources(plan.instance, plan.efa),
        "volumeMounts": mounts,
        "securityContext": CONTAINER_SECURITY,
    }
    return {
        "serviceAccountName": plan.service_account,
        # Pod Identity mounts its own token; nothing here talks to the Kubernetes API.
        "automountServiceAccountToken": False,
        "securityContext": POD_SECURITY,
        "affinity": pool_affinity(plan.pool),
        "tolerations": [GPU_TOLERATION],
        "initContainers": [preflight],
        "containers": [main],
        "volumes": volumes,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 60,
    }


def jobset(plan: TrainingPlan, name: str, replicated_job: str, pod_spec: dict[str, Any], max_restarts: int,
           purpose: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": purpose,
              "app.kubernetes.io/part-of": "mlplat", **plan.labels}
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": plan.namespace, "labels": {**labels, QUEUE_LABEL: plan.queue}},
        "spec": {
            # JobSet creates a headless service named after the subdomain; every pod is
            # <jobset>-<replicated job>-<job index>-<pod index>.<subdomain>.
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [replicated_job]},
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [{
                "name": replicated_job,
                "replicas": 1,
                "template": {"spec": {
                    "parallelism": plan.nodes,
                    "completions": plan.nodes,
                    "completionMode": "Indexed",
                    "backoffLimit": 0,  # a failed pod fails the JobSet, which restarts every pod
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                }},
            }],
        },
    }


def training_jobset(plan: TrainingPlan) -> dict[str, Any]:
    spec = gpu_pod_spec(plan, TRAINER, "workloads.train", plan.train_args, scratch=True)
    return jobset(plan, plan.name, TRAINER, spec, plan.max_restarts, "training")


def collectives_name(plan: TrainingPlan) -> str:
    return f"{plan.name}-allreduce"


def collectives_jobset(plan: TrainingPlan) -> dict[str, Any]:
    """The all-reduce bandwidth check across the same nodes, failing below the threshold.
    A check is run once: no restarts."""
    name = collectives_name(plan)
    checked = replace(plan, name=name, min_nodes=plan.nodes, worker_restarts=0)
    args = ["--min-busbw-gbps", str(plan.min_busbw_gbps), "--json"]
    spec = gpu_pod_spec(checked, "allreduce", "workloads.collectives", args, scratch=False)
    return jobset(checked, name, "allreduce", spec, 0, "collective-check")


def training_args(plan_name: str, work_dir: str, *, model: str, strategy: str, precision: str, compile: bool,
                  max_steps: int, micro_batch: int, global_batch: int, checkpoint_every: int,
                  data_path: str | None, synthetic_tokens: int) -> tuple[str, ...]:
    """Arguments of `python -m workloads.train` for a job: checkpoints and metrics under
    the job's directory; without a data path, synthetic shards written there first."""
    args = ["--model", model, "--strategy", strategy, "--precision", precision,
            "--max-steps", str(max_steps), "--micro-batch", str(micro_batch), "--global-batch", str(global_batch),
            "--checkpoint-dir", f"{work_dir}/checkpoints", "--checkpoint-every", str(checkpoint_every),
            "--metrics", f"{work_dir}/metrics.jsonl", "--device", "cuda"]
    if compile:
        args.append("--compile")
    if data_path:
        args += ["--data", data_path]
    else:
        args += ["--data", f"{work_dir}/synthetic", "--synthetic-tokens", str(synthetic_tokens)]
    return tuple(args)


# --- GPU node check on every node of the pool -------------------------------------------

GPU_CHECK_STATUS = "/run/gpucheck/healthy"
GPU_CHECK_HEARTBEAT = "/run/gpucheck/heartbeat"
GPU_CHECK_INTERVAL_S = 300


def gpu_check_name(plan: TrainingPlan) -> str:
    return f"gpu-check-{plan.pool}"


def gpu_check_service_account(plan: TrainingPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": gpu_check_name(plan), "namespace": plan.namespace},
            "automountServiceAccountToken": False}


def gpu_check_daemonset(plan: TrainingPlan) -> dict[str, Any]:
    """Checks every node of the pool every five minutes. The pod is Ready only while its
    node passes, so `kubectl get ds` shows broken nodes at a glance; the JSON report of
    each round is in the pod's log. It asks for no GPU (training keeps them all): the
    NVIDIA container runtime gives it every GPU's NVML view through
    NVIDIA_VISIBLE_DEVICES=all, with the utility capability only."""
    name = gpu_check_name(plan)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "gpu-check",
              "app.kubernetes.io/part-of": "mlplat"}
    command = gpu_check_command(plan, "--watch", str(GPU_CHECK_INTERVAL_S), "--status-file", GPU_CHECK_STATUS,
                                "--heartbeat-file", GPU_CHECK_HEARTBEAT)
    stale = 3 * GPU_CHECK_INTERVAL_S
    container = {
        "name": "gpu-check",
        "image": plan.checks_image,
        "imagePullPolicy": "Always",
        "command": command,
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}},
        "readinessProbe": {"exec": {"command": ["test", "-e", GPU_CHECK_STATUS]},
                           "initialDelaySeconds": 10, "periodSeconds": 30},
        # Alive while the loop still turns: the heartbeat is touched every round, healthy or not.
        "livenessProbe": {"exec": {"command": [
            "python", "-c", f"import os,sys,time; sys.exit(time.time() - os.path.getmtime('{GPU_CHECK_HEARTBEAT}') "
                            f"> {stale})"]},
            "initialDelaySeconds": 60, "periodSeconds": 60},
        "volumeMounts": [{"name": "run", "mountPath": "/run/gpucheck"}],
        "securityContext": CONTAINER_SECURITY,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": plan.namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "automountServiceAccountToken": False,
                    "securityContext": POD_SECURITY,
                    "affinity": pool_affinity(plan.pool),
                    "tolerations": [GPU_TOLERATION],
                    "containers": [container],
                    "volumes": [{"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}],
                },
            },
        },
    }


# --- S3 through Pod Identity --------------------------------------------------------


def s3_statements(datasets_arn: str, checkpoints_arn: str, models_arn: str,
                  read_key_arns: list[str], write_key_arns: list[str]) -> list[dict[str, Any]]:
    """Read the datasets bucket; read and write the checkpoints and models buckets; use
    their keys. Nothing may delete: the buckets are versioned and the trainer prunes only
    its Lustre copies."""
    return [
        {"Sid": "ListBuckets", "Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
         "Resource": [datasets_arn, checkpoints_arn, models_arn]},
        {"Sid": "ReadDatasets", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{datasets_arn}/*"]},
        {"Sid": "ReadWriteOutputs", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
         "Resource": [f"{checkpoints_arn}/*", f"{models_arn}/*"]},
        {"Sid": "DecryptInputs", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": list(read_key_arns)},
        {"Sid": "EncryptOutputs", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
         "Resource": list(write_key_arns)},
    ]


def service_account(plan: TrainingPlan) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": plan.service_account, "namespace": plan.namespace},
            "automountServiceAccountToken": False}


def job_of(jobset_manifest: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """The batch/v1 Job JobSet makes of a replicated job, for schema validation (the
    JobSet CRD's own schema ships with its chart, not with kubernetes-validate)."""
    replicated = jobset_manifest["spec"]["replicatedJobs"][index]
    meta = jobset_manifest["metadata"]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{meta['name']}-{replicated['name']}-0", "namespace": meta["namespace"]},
            "spec": replicated["template"]["spec"]}
