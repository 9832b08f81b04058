"""Helm values of every add-on release, as plain functions of plain data.

Nothing here imports Pulumi: each function takes an `AddonContext` (what the stack's
config and the registry plan say) and returns the dict handed to the chart. Every image
comes from the in-region mirror through `infra.versions.image_uri`, by digest; a value is
never left to a chart's upstream default where that default would pull from outside the
region. Charts template `<repository>:<tag>`, so the digest rides in the tag
(`v1.2.3@sha256:...`): the reference the chart renders names the tag for people and the
digest for the kubelet, which pulls by the digest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from components.admission_spec import TENANT_LABEL
from components.fabric_spec import NodeFabric
from infra.versions import CHARTS, CHARTS_PREFIX, DIGEST, image_ref, registry_host

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# GPU pools carry this taint, so only pods that tolerate it (GPU workloads, the GPU
# daemons below) land on the expensive nodes.
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# Some EFA node groups also carry this taint; the EFA plugin must tolerate it too.
EFA_TOLERATION = {"key": "vpc.amazonaws.com/efa", "operator": "Exists", "effect": "NoSchedule"}

# Where each add-on runs. The Pod Security level of each namespace, and why, is in
# components/tenancy_spec.py SYSTEM_NAMESPACES.
NAMESPACES = {
    "nvidia-device-plugin": "nvidia-device-plugin",
    "gpu-operator": "gpu-operator",
    "aws-efa-k8s-device-plugin": "kube-system",
    "kube-prometheus-stack": "monitoring",
    "dcgm-exporter": "monitoring",
    "kueue": "kueue-system",
    "jobset": "jobset-system",
    "aws-fsx-csi-driver": "kube-system",
    "network-operator": "nvidia-network-operator",
}

# A container without limits can starve a node's daemons; every container we can reach
# through values gets requests and limits.
SMALL = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}}
MEDIUM = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
CONTROLLER = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}}

# The most a container needs that talks to a device or the kubelet socket: no privilege
# escalation, no Linux capabilities.
NO_CAPABILITIES = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# The runtime's default seccomp filter, for charts that leave the pod unconfined: the
# restricted Pod Security profile requires it, and the namespaces that enforce restricted
# refuse pods without it.
RUNTIME_DEFAULT_SECCOMP = {"seccompProfile": {"type": "RuntimeDefault"}}


@dataclass(frozen=True)
class MirrorImage:
    """One image of the registry plan, split the ways charts ask for it."""

    uri: str  # host/mlplat/<env>/mirror/name:tag@sha256:...
    registry: str  # host
    repository: str  # mlplat/<env>/mirror/name (relative to the registry)
    prefix: str  # host/mlplat/<env>/mirror (charts that want repository and image apart)
    image: str  # name
    tag: str  # tag@sha256:... (what charts put after `<repository>:`)
    version: str  # the tag alone, for charts that take the digest apart
    digest: str  # sha256:... ; empty while the image awaits its pin

    @property
    def full_repository(self) -> str:
        return f"{self.registry}/{self.repository}"


def mirror_image(name: str, account: str, region: str, environment: str, registry: str = "") -> MirrorImage:
    """`registry`: the environment's registry host where it is not the account's ECR (a
    customer's in-country registry)."""
    uri = image_ref(name, registry or registry_host(account, region), environment)
    ref, at, digest = uri.partition("@")
    ref, tag = ref.rsplit(":", 1)
    registry, repository = ref.split("/", 1)
    prefix, image = ref.rsplit("/", 1)
    return MirrorImage(uri, registry, repository, prefix, image, f"{tag}{at}{digest}", tag, digest)


@dataclass(frozen=True)
class AddonContext:
    account: str
    region: str
    environment: str
    gpu_instance_types: tuple[str, ...] = ()  # every GPU pool's type, in pool order
    efa_instance_types: tuple[str, ...] = ()  # types of the pools that attach EFA
    device_plugin_mode: str = "device-plugin"  # or "gpu-operator"
    time_slicing_replicas: int = 1
    mig_strategy: str = "none"
    storage_class: str = "gp3-encrypted"
    prometheus_retention_days: int = 15
    prometheus_volume_gi: int = 100
    alertmanager_volume_gi: int = 10
    telemetry: bool = True
    # A customer's cluster (infra/cluster_layer.py): its registry host in place of the
    # account's ECR, bare-metal GPU nodes (the GPU Operator installs the driver and the
    # container toolkit), and each GPU pool's RDMA fabric (the Network Operator's).
    registry: str = ""
    bare_metal: bool = False
    fabrics: tuple[tuple[str, NodeFabric], ...] = ()  # (pool, fabric) of each GPU pool on RDMA

    def image(self, name: str) -> MirrorImage:
        return mirror_image(name, self.account, self.region, self.environment, self.registry)

    @property
    def gpudirect_rdma(self) -> bool:
        return bool(self.fabrics)


# --- Chart sources -------------------------------------------------------------------


@dataclass(frozen=True)
class ChartSource:
    chart: str  # the full oci:// reference
    version: str


def ecr_chart_mirror(account: str, region: str, environment: str) -> str:
    """The environment's in-region chart repository, where `mlplat mirror` pushes every
    pinned chart (`<this>/<chart name>`)."""
    return f"oci://{registry_host(account, region)}/{CHARTS_PREFIX.format(environment=environment)}"


def chart_source(name: str, mirror: str) -> ChartSource:
    """Where Helm fetches a chart: the in-region OCI mirror (`<mirror>/<chart name>`, at
    the pinned version). Never the chart's upstream repository: a deploy needs nothing from
    outside the region."""
    chart = CHARTS[name]
    return ChartSource(f"{mirror.rstrip('/')}/{chart.name}", chart.version)


# --- Scheduling helpers --------------------------------------------------------------


def instance_type_affinity(instance_types: Sequence[str]) -> dict[str, Any]:
    """Required node affinity: only nodes of these EC2 instance types."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(set(instance_types))}
                    ]}
                ]
            }
        }
    }


# --- NVIDIA device plugin ------------------------------------------------------------


def device_plugin_config(time_slicing_replicas: int, mig_strategy: str) -> str:
    """The plugin's config file: MIG strategy, and time-slicing when replicas > 1."""
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": mig_strategy}}
    if time_slicing_replicas > 1:
        config["sharing"] = {
            "timeSlicing": {"resources": [{"name": GPU_RESOURCE, "replicas": time_slicing_replicas}]}
        }
    return yaml.safe_dump(config, sort_keys=False)


def nvidia_device_plugin_values(ctx: AddonContext) -> dict[str, Any]:
    plugin = ctx.image("k8s-device-plugin")
    # The NFD chart this chart bundles (0.17.3) passes flags NFD 0.18 removed.
    nfd = ctx.image("node-feature-discovery-0.17")
    affinity = instance_type_affinity(ctx.gpu_instance_types)
    return {
        "image": {"repository": plugin.full_repository, "tag": plugin.tag, "pullPolicy": "IfNotPresent"},
        # MOFED detection mounts every /dev/infiniband/uverbs* device, which on AWS are the
        # EFA devices the EFA plugin hands out (NVIDIA/k8s-device-plugin#1692).
        "mofedEnabled": False,
        "config": {"map": {"default": device_plugin_config(ctx.time_slicing_replicas, ctx.mig_strategy)},
                   "default": "default"},
        "tolerations": [GPU_TOLERATION],
        "affinity": affinity,
        "priorityClassName": "system-node-critical",
        "resources": SMALL,
        "securityContext": NO_CAPABILITIES,
        # GPU feature discovery labels nodes with the GPU model, memory and sharing mode.
        # Upstream runs it privileged to read vGPU data from the host; it stays so (see
        # SYSTEM_NAMESPACES).
        "gfd": {"enabled": True},
        "nfd": {
            "image": {"repository": nfd.full_repository, "tag": nfd.tag, "pullPolicy": "IfNotPresent"},
            "master": {"resources": MEDIUM, "podSecurityContext": RUNTIME_DEFAULT_SECCOMP},
            "gc": {"resources": SMALL, "podSecurityContext": RUNTIME_DEFAULT_SECCOMP},
            "worker": {"tolerations": [GPU_TOLERATION], "affinity": affinity, "resources": SMALL,
                       "podSecurityContext": RUNTIME_DEFAULT_SECCOMP},
        },
    }


def gpu_operator_values(ctx: AddonContext) -> dict[str, Any]:
    """The GPU Operator on the EKS AL2023 NVIDIA AMI: the AMI already ships the driver and
    the container toolkit, so the operator must not install them again."""

    def component(name: str) -> dict[str, Any]:
        img = ctx.image(name)
        return {"repository": img.prefix, "image": img.image, "version": img.tag, "imagePullPolicy": "IfNotPresent"}

    nfd = ctx.image("node-feature-discovery")
    mig = ctx.mig_strategy != "none"
    values: dict[str, Any] = {
        "operator": {**component("gpu-operator"), "resources": CONTROLLER},
        "validator": component("gpu-operator-validator"),
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        "devicePlugin": {
            **component("k8s-device-plugin"),
            "enabled": True,
            "env": [{"name": "MOFED_ENABLED", "value": "false"}],
            "resources": SMALL,
            "config": {"create": True, "name": "device-plugin-config", "default": "default",
                       "data": {"default": device_plugin_config(ctx.time_slicing_replicas, ctx.mig_strategy)}},
        },
        "gfd": {**component("k8s-device-plugin"), "enabled": True},
        "dcgm": {"enabled": False},  # the exporter's embedded host engine is enough
        "dcgmExporter": {
            **component("dcgm-exporter"),
            "enabled": True,
            "resources": MEDIUM,
            "serviceMonitor": {"enabled": ctx.telemetry, "interval": "15s"},
            "config": {"create": True, "name": "dcgm-exporter-metrics", "data": dcgm_metrics_csv()},
        },
        "migManager": {**component("k8s-mig-manager"), "enabled": mig},
        "daemonsets": {"tolerations": [GPU_TOLERATION], "priorityClassName": "system-node-critical"},
        "nfd": {"enabled": True},
        "node-feature-discovery": {
            "image": {"repository": nfd.full_repository, "tag": nfd.tag},
            "worker": {"tolerations": [GPU_TOLERATION], "resources": SMALL, "podSecurityContext": RUNTIME_DEFAULT_SECCOMP},
            "master": {"resources": MEDIUM, "podSecurityContext": RUNTIME_DEFAULT_SECCOMP},
            "gc": {"resources": SMALL, "podSecurityContext": RUNTIME_DEFAULT_SECCOMP},
        },
        # Components this platform does not use stay off, so no unmirrored image is pulled.
        **{name: {"enabled": False} for name in (
            "nodeStatusExporter", "gds", "gdrcopy", "vgpuManager", "vgpuDeviceManager", "vfioManager",
            "sandboxDevicePlugin", "kataSandboxDevicePlugin", "kataManager", "ccManager",
        )},
    }
    if mig:
        values["mig"] = {"strategy": ctx.mig_strategy}
    if ctx.bare_metal:
        values.update(bare_metal_gpu_operator_values(ctx, component))
    return values


def operator_version(img: MirrorImage) -> str:
    """The version a driver image is named by in the operators' specs: `tag@digest` when
    pinned, which the GPU Operator takes as it is (any reference naming a digest). Without
    a digest both operators append the node's OS to a version; the plan's tag already
    names it, and `pulumi up` refuses an image without its pin (check_supply), so that
    reference only ever appears in previews."""
    return img.tag


def bare_metal_gpu_operator_values(ctx: AddonContext, component: Any) -> dict[str, Any]:
    """A customer's bare-metal GPU nodes have no driver and no container toolkit: the GPU
    Operator installs both (the driver build of the nodes' OS, infra.versions.NODE_OS).
    On an RDMA fabric the driver also loads nvidia-peermem, so NCCL moves GPU memory
    straight to the HCAs (GPUDirect RDMA), with the DOCA (MOFED) driver the Network
    Operator installs, never the host's."""
    driver = ctx.image("nvidia-driver")
    return {
        "driver": {
            "enabled": True,
            "repository": driver.prefix, "image": driver.image, "version": operator_version(driver),
            "imagePullPolicy": "IfNotPresent",
            "rdma": {"enabled": ctx.gpudirect_rdma, "useHostMofed": False},
            "manager": component("k8s-driver-manager"),
        },
        "toolkit": {**component("container-toolkit"), "enabled": True},
    }


# --- EFA device plugin ---------------------------------------------------------------


def efa_device_plugin_values(ctx: AddonContext) -> dict[str, Any]:
    """Scheduled only on the EFA pools' instance types: on a node without EFA devices the
    plugin exits and the DaemonSet pod crash-loops."""
    img = ctx.image("aws-efa-k8s-device-plugin")
    return {
        "image": {"repository": img.full_repository, "tag": img.tag},
        "supportedInstanceLabels": {
            "keys": [INSTANCE_TYPE_LABEL],
            "values": sorted(set(ctx.efa_instance_types)),
        },
        "tolerations": [GPU_TOLERATION, EFA_TOLERATION],
        "resources": SMALL,
        # The chart defaults to privileged and Helm merges maps: `privileged: None` removes
        # that key, or the merge asks for privileged with allowPrivilegeEscalation false,
        # which the API server refuses. The plugin only lists /dev/infiniband (hostPath) and
        # serves the kubelet socket: root, no capabilities.
        "securityContext": {**NO_CAPABILITIES, "privileged": None, "runAsNonRoot": False, "runAsUser": 0},
    }


# --- Telemetry -----------------------------------------------------------------------

# DCGM fields the exporter publishes (field, Prometheus type, help). The list replaces the
# exporter's default: the NVLink error counters, which the alerts need, are off there.
DCGM_METRICS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in us)."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
)


def dcgm_metrics_csv() -> str:
    return "".join(f"{name}, {kind}, {text}\n" for name, kind, text in DCGM_METRICS)


def dcgm_exporter_values(ctx: AddonContext) -> dict[str, Any]:
    img = ctx.image("dcgm-exporter")
    return {
        "image": {"repository": img.full_repository, "tag": img.tag, "pullPolicy": "IfNotPresent"},
        "arguments": ["-f", "/etc/dcgm-exporter/default-counters.csv"],
        "customMetrics": dcgm_metrics_csv(),
        "serviceMonitor": {"enabled": ctx.telemetry, "interval": "15s"},
        # Its pods run only on GPU instance types, which a new environment may not have:
        # the provider must not wait for the Service to target one (first_deploy.py).
        "service": {"annotations": {"pulumi.com/skipAwait": "true"}},
        "tolerations": [GPU_TOLERATION],
        "affinity": instance_type_affinity(ctx.gpu_instance_types),
        "resources": MEDIUM,
        # Root to open the GPU devices, but none of SYS_ADMIN that upstream adds: that is
        # only for profiling (DCP) fields, and none of the fields above is one. Helm merges
        # maps, so `add: None` is what removes the chart's list.
        "securityContext": {**NO_CAPABILITIES, "capabilities": {"add": None, "drop": ["ALL"]},
                            "runAsNonRoot": False, "runAsUser": 0},
    }


def _split_image(img: MirrorImage, digest_key: str = "sha", prefixed: bool = False) -> dict[str, str]:
    """kube-prometheus-stack's {registry, repository, tag} with the digest apart, as each of
    its templates reads it: its own `sha` without `sha256:`, kube-state-metrics' `sha` and
    the node exporter's `digest` with it. Some compare the tag as a version, so it stays a
    plain tag."""
    split = {"registry": img.registry, "repository": img.repository, "tag": img.version}
    if img.digest:
        split[digest_key] = img.digest if prefixed else img.digest.removeprefix("sha256:")
    return split


def _volume_claim(storage_class: str, size_gi: int) -> dict[str, Any]:
    return {"volumeClaimTemplate": {"spec": {
        "storageClassName": storage_class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{size_gi}Gi"}},
    }}}


def kube_prometheus_stack_values(ctx: AddonContext) -> dict[str, Any]:
    """Prometheus and Alertmanager on volumes of the encrypted StorageClass. The selectors
    are opened so the GPU rules and the DCGM/Kueue ServiceMonitors outside this release
    are picked up."""
    reloader = ctx.image("prometheus-config-reloader")
    return {
        "crds": {"enabled": True},
        "grafana": {"enabled": False},
        "windowsMonitoring": {"enabled": False},
        # EKS runs the control plane; these targets cannot be scraped from inside.
        **{name: {"enabled": False} for name in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")},
        "prometheusOperator": {
            "image": _split_image(ctx.image("prometheus-operator")),
            "prometheusConfigReloader": {"image": _split_image(reloader), "resources": SMALL},
            "thanosImage": _split_image(ctx.image("thanos")),
            # The webhook's certificate comes from Helm hook Jobs, and a helm.v4.Chart runs no
            # hooks: without them the webhook has no certificate and the operator's TLS
            # listener no key. The operator validates rules itself (invalid ones are left out
            # and reported), and its own endpoint serves only in-cluster metrics.
            "admissionWebhooks": {"enabled": False},
            "tls": {"enabled": False},
            "resources": MEDIUM,
        },
        "prometheus": {"prometheusSpec": {
            "image": _split_image(ctx.image("prometheus")),
            "retention": f"{ctx.prometheus_retention_days}d",
            "storageSpec": _volume_claim(ctx.storage_class, ctx.prometheus_volume_gi),
            "ruleSelectorNilUsesHelmValues": False,
            "serviceMonitorSelectorNilUsesHelmValues": False,
            "podMonitorSelectorNilUsesHelmValues": False,
            "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}},
        }},
        "alertmanager": {"alertmanagerSpec": {
            "image": _split_image(ctx.image("alertmanager")),
            "storage": _volume_claim(ctx.storage_class, ctx.alertmanager_volume_gi),
            "resources": MEDIUM,
        }},
        "kube-state-metrics": {"image": _split_image(ctx.image("kube-state-metrics"), prefixed=True),
                               "resources": MEDIUM},
        # Node metrics from every node, the tainted GPU nodes included.
        "prometheus-node-exporter": {
            # The chart appends `-distroless` to the tag when `distroless` is on (88.3.0
            # turns it on); the plan's tag already names the distroless build.
            "image": {**_split_image(ctx.image("node-exporter"), "digest", prefixed=True), "distroless": False},
            "tolerations": [GPU_TOLERATION, EFA_TOLERATION],
            "resources": SMALL,
            # The chart's pod runs as 65534 and reads the host read-only; it needs no
            # privilege escalation, no capability and no syscall outside the runtime's
            # default filter. Only the host namespaces and mounts stay (policies/config).
            "securityContext": {"fsGroup": 65534, "runAsGroup": 65534, "runAsNonRoot": True, "runAsUser": 65534,
                                **RUNTIME_DEFAULT_SECCOMP},
            "containerSecurityContext": {"readOnlyRootFilesystem": True, **NO_CAPABILITIES},
            # On a customer's cluster nothing listens on the nodes' own addresses (the pack's
            # nothing-exposed-outside-the-cluster): off the host network, every node metric but
            # those of the host's network interfaces still comes through the read-only host
            # mounts and hostPID.
            **({"hostNetwork": False} if ctx.bare_metal else {}),
        },
    }


# --- Scheduling ----------------------------------------------------------------------


# Kinds Kueue queues: JobSet (training and the collective check) and plain Jobs. Every other
# integration of the chart's default stays off; Kueue answers the chart's webhooks for them
# with no-ops.
KUEUE_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")
# Resources Kueue leaves out of quota. Huge pages are a fixed per-node reservation
# (components/specs/nodepool.py) that only the one pod owning an EFA node uses; that pod's
# nvidia.com/gpu and vpc.amazonaws.com/efa already count the node against the tenant's
# quota, and the kube-scheduler still checks the node's allocatable huge pages. Without
# this, Kueue never admits a workload asking for a resource no ClusterQueue covers.
# Node-local disk: every tenant pod asks for some (its namespace's LimitRange default, which
# Kueue applies too), and the namespace's ResourceQuota, not a queue, rations it.
KUEUE_EXCLUDED_RESOURCE_PREFIXES = ("hugepages-", "ephemeral-storage")


def kueue_manager_config(excluded: tuple[str, ...] = KUEUE_EXCLUDED_RESOURCE_PREFIXES) -> dict[str, Any]:
    """Kueue's controller-manager configuration (config.kueue.x-k8s.io/v1beta2).

    The chart (0.18) takes it as one YAML string, `managerConfig.controllerManagerConfigYaml`,
    that replaces its default whole, and Kueue rejects unknown fields. So this is the complete
    file: the chart's defaults that its Deployment and Services rely on (probe, metrics and
    webhook ports, the leader-election lease, the webhook certificate names Kueue makes for
    the release `kueue`), its concurrency and client limits, and our changes: the
    integrations, the excluded resources, and every job in a tenant namespace managed."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},  # the Deployment's liveness and readiness probes
        "metrics": {"bindAddress": ":8443"},  # the metrics Service's target port
        "webhook": {"port": 9443},  # the webhook Service's target port
        # Same lease name as the chart's default, so an upgrade never runs two leaders.
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 5,
            "LocalQueue.kueue.x-k8s.io": 1,
            "ClusterQueue.kueue.x-k8s.io": 1,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }},
        "clientConnection": {"qps": 50, "burst": 100},
        # Kueue makes and rotates its own webhook certificate (no cert-manager); the names
        # are those of the chart's objects for the release `kueue`.
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": "kueue-webhook-service",
            "webhookSecretName": "kueue-webhook-server-cert",
        },
        # Every Job and JobSet in a tenant namespace is Kueue's, labelled or not: one without
        # a queue name is held (suspended) like any other until a queue admits it, so no
        # tenant's job runs past its quota. Elsewhere (the platform's own one-off Jobs in
        # kube-system and envoy-gateway-system) only jobs that name a queue are.
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        "resources": {"excludeResourcePrefixes": list(excluded)},
    }


def rdma_resource_prefixes(ctx: AddonContext) -> tuple[str, ...]:
    """The RDMA shared device plugin's resources, which Kueue leaves out of quota as it
    does huge pages: a pod takes all of a node's HCAs with its GPUs (whose nvidia.com/gpu
    already counts the node against the tenant's quota), and the plugin shares them among
    the node's pods (rdmaHcaMax); without this Kueue admits no job that asks for them."""
    return tuple(dict.fromkeys(f"{fabric.rdma_resource.split('/', 1)[0]}/" for _pool, fabric in ctx.fabrics))


def kueue_values(ctx: AddonContext) -> dict[str, Any]:
    img = ctx.image("kueue")
    return {
        "controllerManager": {"manager": {
            "image": {"repository": img.full_repository, "tag": img.tag, "pullPolicy": "IfNotPresent"},
            "resources": CONTROLLER,
        }},
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(
            kueue_manager_config(KUEUE_EXCLUDED_RESOURCE_PREFIXES + rdma_resource_prefixes(ctx)), sort_keys=False)},
        # A ServiceMonitor for Kueue's queue metrics; needs the Prometheus stack's CRDs.
        "enablePrometheus": ctx.telemetry,
    }


def jobset_values(ctx: AddonContext) -> dict[str, Any]:
    img = ctx.image("jobset")
    return {
        "image": {"repository": img.full_repository, "tag": img.tag, "pullPolicy": "IfNotPresent"},
        "controller": {"resources": CONTROLLER},
    }


# --- Storage drivers -----------------------------------------------------------------


def fsx_csi_values(ctx: AddonContext) -> dict[str, Any]:
    """FSx for Lustre CSI driver. Static volumes only: the controller creates no file
    systems, so it needs no AWS permissions beyond what the node role has."""

    def sidecar(name: str, pull_policy: bool = True) -> dict[str, Any]:
        img = ctx.image(name)
        image = {"repository": img.full_repository, "tag": img.tag}
        if pull_policy:
            image["pullPolicy"] = "IfNotPresent"
        return {"image": image, "resources": SMALL}

    driver = ctx.image("aws-fsx-csi-driver")
    return {
        "image": {"repository": driver.full_repository, "tag": driver.tag, "pullPolicy": "IfNotPresent"},
        "sidecars": {
            "livenessProbe": sidecar("livenessprobe"),
            "nodeDriverRegistrar": sidecar("node-driver-registrar"),
            # Chart 1.16.0 renders no pull policy for these two sidecars and reads no value for
            # it; Kubernetes' default for a tagged image, IfNotPresent, applies.
            "provisioner": sidecar("external-provisioner", pull_policy=False),
            "resizer": sidecar("external-resizer", pull_policy=False),
        },
        # The region is set, not looked up from instance metadata: pods cannot reach IMDS.
        "controller": {"region": ctx.region, "resources": MEDIUM},
        "node": {
            "region": ctx.region,
            "resources": MEDIUM,
            # Lustre is mounted where training runs: every node, the tainted GPU nodes too.
            "tolerateAllTaints": False,
            "tolerations": [GPU_TOLERATION, EFA_TOLERATION,
                            {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
    }


# --- Network Operator (a customer's InfiniBand or RoCE fabric) ----------------------

# Mellanox (NVIDIA networking) PCI vendor id: the RDMA shared device plugin's selector.
MELLANOX_VENDOR = "15b3"
LINK_TYPES = {"infiniband": "infiniband", "roce": "ether"}
NIC_CLUSTER_POLICY = "nic-cluster-policy"  # the one NicClusterPolicy the operator reads
# Pods that share a node's HCAs through the plugin (the device plugin's own default).
RDMA_HCA_MAX = 63


def network_operator_values(ctx: AddonContext) -> dict[str, Any]:
    """The Network Operator's controller only: its NicClusterPolicy is the platform's own
    object (nic_cluster_policy), and the GPU Operator's NFD already labels the nodes (one
    NFD per cluster), so the chart's NFD and its NodeFeatureRule are off: the rule is ours
    (nvidia_nic_rule), applied once the GPU Operator's NFD serves its kind. SR-IOV and the
    maintenance operator are not used."""
    operator = ctx.image("network-operator")
    init = ctx.image("network-operator-init-container")
    return {
        "nfd": {"enabled": False, "deployNodeFeatureRules": False},
        "sriovNetworkOperator": {"enabled": False},
        "maintenanceOperator": {"enabled": False},
        # Helm hooks do not run under the Kubernetes provider, and its CRDs are applied as
        # ordinary resources on every update (components/addons/charts.py).
        "upgradeCRDs": False,
        "operator": {
            "repository": operator.prefix, "image": operator.image, "tag": operator.tag,
            "resources": MEDIUM,
            "ofedDriver": {"initContainer": {"enable": True, "repository": init.prefix, "image": init.image,
                                             "version": init.tag}},
        },
    }


def nvidia_nic_rule() -> dict[str, Any]:
    """NFD labels nodes with an NVIDIA (Mellanox) NIC `feature.node.kubernetes.io/pci-15b3.present`,
    which the Network Operator's DaemonSets select (the chart's own rule, nvidia-nics-rules,
    as it renders it at 26.4.1): Ethernet (0200) and InfiniBand (0207) controllers."""
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule",
        "metadata": {"name": "nvidia-nics-rules"},
        "spec": {"rules": [{
            "name": "Nvidia NICs PCI",
            "labels": {"pci-15b3.present": "true"},
            "matchFeatures": [{"feature": "pci.device", "matchExpressions": {
                "vendor": {"op": "In", "value": [MELLANOX_VENDOR]},
                "class": {"op": "In", "value": ["0200", "0207"]}}}],
        }]},
    }


def rdma_shared_device_config(fabrics: Sequence[NodeFabric]) -> str:
    """The RDMA shared device plugin's config: one resource per fabric resource name, every
    NVIDIA HCA of the fabric's link type in it."""
    entries: dict[str, dict[str, Any]] = {}
    for fabric in fabrics:
        prefix, name = fabric.rdma_resource.split("/", 1)
        entry = entries.setdefault(fabric.rdma_resource, {
            "resourcePrefix": prefix, "resourceName": name, "rdmaHcaMax": RDMA_HCA_MAX,
            "selectors": {"vendors": [MELLANOX_VENDOR], "linkTypes": []}})
        link = LINK_TYPES[fabric.kind]
        if link not in entry["selectors"]["linkTypes"]:
            entry["selectors"]["linkTypes"].append(link)
    import json

    return json.dumps({"configList": list(entries.values())}, indent=2)


def nic_cluster_policy(ctx: AddonContext) -> dict[str, Any]:
    """The fabric on the GPU pools' nodes: the DOCA (MOFED) driver, upgraded one node at a
    time with the node drained first; the RDMA shared device plugin, which hands each pod
    the node's HCAs as the fabric's `rdma_resource`; GPUDirect RDMA is the GPU Operator's
    nvidia-peermem (bare_metal_gpu_operator_values). The pods talk to the fabric through
    the HCAs' verbs; no secondary pod network is needed for NCCL."""
    doca = ctx.image("doca-driver")
    plugin = ctx.image("k8s-rdma-shared-dev-plugin")
    pools = sorted({pool for pool, _fabric in ctx.fabrics})
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": pools}]}]}}
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": NIC_CLUSTER_POLICY},
        "spec": {
            "nodeAffinity": affinity,
            "tolerations": [GPU_TOLERATION],
            "ofedDriver": {
                "repository": doca.prefix, "image": doca.image, "version": doca_version(doca),
                "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1,
                                  "drain": {"enable": True, "force": True, "deleteEmptyDir": True,
                                            "timeoutSeconds": 300}},
                "startupProbe": {"initialDelaySeconds": 10, "periodSeconds": 10},
                "livenessProbe": {"initialDelaySeconds": 30, "periodSeconds": 30},
                "readinessProbe": {"initialDelaySeconds": 10, "periodSeconds": 30},
            },
            "rdmaSharedDevicePlugin": {
                "repository": plugin.prefix, "image": plugin.image, "version": plugin.tag,
                "config": rdma_shared_device_config([fabric for _pool, fabric in ctx.fabrics]),
            },
        },
    }


def doca_version(img: MirrorImage) -> str:
    """The Network Operator takes a DOCA driver version that starts with `sha256:` as the
    digest of the image; any other gets `-<os><version>-<arch>` appended, which the
    plan's tag already names (so an image awaiting its pin is shown by its tag; `pulumi up`
    refuses it)."""
    return img.digest if DIGEST.match(img.digest) else img.version


POOL_LABEL = "mlplat.io/pool"
