"""One source of truth for every pinned version: Kubernetes, EKS add-ons, Helm charts,
and the registry plan that maps each third-party image to its in-region mirror."""

from __future__ import annotations

from dataclasses import dataclass

# Kubernetes minor version of the EKS control plane; manifests are validated against it.
KUBERNETES_VERSION = "1.34"

ECR_HOST = "{account}.dkr.ecr.{region}.amazonaws.com"

# The built-in API versions a KUBERNETES_VERSION cluster serves by default (`kubectl
# api-versions` less CRDs; beta APIs are off unless a cluster turns them on), with their
# kinds. Charts choose their API versions by testing these (.Capabilities.APIVersions), and
# the API server refuses any other built-in version ("no matches for kind"). The kinds
# are checked against the version's OpenAPI schemas in tests/unit/test_served_apis.py.
SERVED_APIS: dict[str, tuple[str, ...]] = {
    "v1": ("ComponentStatus", "ConfigMap", "Endpoints", "Event", "LimitRange", "Namespace", "Node",
           "PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate", "ReplicationController",
           "ResourceQuota", "Secret", "Service", "ServiceAccount"),
    "admissionregistration.k8s.io/v1": ("MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                                        "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"),
    "apiextensions.k8s.io/v1": ("CustomResourceDefinition",),
    "apiregistration.k8s.io/v1": ("APIService",),
    "apps/v1": ("ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"),
    "authentication.k8s.io/v1": ("SelfSubjectReview", "TokenReview"),
    "authorization.k8s.io/v1": ("LocalSubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview",
                                "SubjectAccessReview"),
    "autoscaling/v1": ("HorizontalPodAutoscaler",),
    "autoscaling/v2": ("HorizontalPodAutoscaler",),
    "batch/v1": ("CronJob", "Job"),
    "certificates.k8s.io/v1": ("CertificateSigningRequest",),
    "coordination.k8s.io/v1": ("Lease",),
    "discovery.k8s.io/v1": ("EndpointSlice",),
    "events.k8s.io/v1": ("Event",),
    "flowcontrol.apiserver.k8s.io/v1": ("FlowSchema", "PriorityLevelConfiguration"),
    "networking.k8s.io/v1": ("IPAddress", "Ingress", "IngressClass", "NetworkPolicy", "ServiceCIDR"),
    "node.k8s.io/v1": ("RuntimeClass",),
    "policy/v1": ("PodDisruptionBudget",),
    "rbac.authorization.k8s.io/v1": ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"),
    "resource.k8s.io/v1": ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"),
    "scheduling.k8s.io/v1": ("PriorityClass",),
    "storage.k8s.io/v1": ("CSIDriver", "CSINode", "CSIStorageCapacity", "StorageClass", "VolumeAttachment",
                          "VolumeAttributesClass"),
}


def built_in_api_versions() -> list[str]:
    """SERVED_APIS as `.Capabilities.APIVersions` lists them: `group/version` and
    `group/version/Kind`."""
    return sorted({*SERVED_APIS, *(f"{gv}/{kind}" for gv, kinds in SERVED_APIS.items() for kind in kinds)})


# --- Registry plan -------------------------------------------------------------------
# Every third-party image the platform runs is mirrored into an in-region ECR repository;
# everything the platform deploys takes its image reference from `image_uri`, so no pod
# pulls from outside the region.


@dataclass(frozen=True)
class Image:
    name: str  # key in IMAGES, and the repository's last path segment
    # Mirrors: the upstream repository, for the mirroring job; never pulled by the cluster.
    # Platform images: the Dockerfile they are built from.
    source: str
    tag: str
    built_here: bool = False  # the platform's own image, pushed by CI rather than mirrored
    # Why this mirror is not the image its chart runs upstream, where it is not; empty: it
    # is (the render check compares each mirror with the chart's own choice).
    differs_from_chart: str = ""

    @property
    def repository(self) -> str:
        """The in-region ECR repository name."""
        return f"mlplat/{self.name}" if self.built_here else f"mlplat/mirror/{self.name}"

    @property
    def upstream(self) -> str:
        """What the mirroring job copies from (`source:tag`); empty for platform images."""
        return "" if self.built_here else f"{self.source}:{self.tag}"


# The platform's own images share the project's version.
PLATFORM_IMAGE_TAG = "0.1.0"

# Each mirror is the image its chart runs upstream at the pinned chart version (the render
# check in tests/rendered compares every field where our values put a mirror with what the
# chart renders there without our override); `differs_from_chart` says why where it is not.
# Every image a rendered object names is in this plan (same check).
_GIT_TREE = ("the chart's source tree names a development build; the published chart of this version runs this "
             "release tag")
IMAGES: dict[str, Image] = {
    image.name: image
    for image in (
        # NVIDIA GPU stack (GPU Operator v26.3.3 and the standalone device plugin chart).
        # GPU feature discovery ships inside the device plugin image since v0.15.
        Image("k8s-device-plugin", "nvcr.io/nvidia/k8s-device-plugin", "v0.19.3"),
        Image("gpu-operator", "nvcr.io/nvidia/gpu-operator", "v26.3.3",
              differs_from_chart=f"{_GIT_TREE} (appVersion main-latest in git, v26.3.3 when published)"),
        # The validator binary lives in the operator image since v25.10; the separate
        # validator repository stopped at v25.3.x, so this mirror copies the operator image.
        Image("gpu-operator-validator", "nvcr.io/nvidia/gpu-operator", "v26.3.3",
              differs_from_chart=f"{_GIT_TREE} (appVersion main-latest in git, v26.3.3 when published)"),
        Image("k8s-mig-manager", "nvcr.io/nvidia/cloud-native/k8s-mig-manager", "v0.14.2"),
        # The GPU Operator's NFD (its bundled NFD chart 0.18.3).
        Image("node-feature-discovery", "registry.k8s.io/nfd/node-feature-discovery", "v0.18.3"),
        # The device plugin chart 0.19.3 bundles NFD chart 0.17.3, whose templates pass flags
        # (-metrics, -grpc-health) that NFD 0.18 removed: its pods need the 0.17 image.
        Image("node-feature-discovery-0.17", "registry.k8s.io/nfd/node-feature-discovery", "v0.17.3"),
        Image("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter", "4.5.3-4.8.2-distroless"),
        # The chart's default pulls from an ECR registry in us-west-2: the mirror keeps the
        # EFA plugin in-region.
        Image("aws-efa-k8s-device-plugin", "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin",
              "v0.5.20"),
        # Telemetry (kube-prometheus-stack 88.3.0: prometheus-operator v0.93, kube-state-metrics
        # chart 8.2.0, prometheus-node-exporter chart 4.56.1).
        Image("prometheus", "quay.io/prometheus/prometheus", "v3.13.2-distroless"),
        Image("alertmanager", "quay.io/prometheus/alertmanager", "v0.33.1"),
        Image("prometheus-operator", "quay.io/prometheus-operator/prometheus-operator", "v0.93.0"),
        Image("prometheus-config-reloader", "quay.io/prometheus-operator/prometheus-config-reloader", "v0.93.0"),
        # The operator is told where Thanos lives even where no Prometheus runs a Thanos
        # sidecar: the reference points in-region too.
        Image("thanos", "quay.io/thanos/thanos", "v0.42.4"),
        Image("node-exporter", "quay.io/prometheus/node-exporter", "v1.12.1-distroless"),
        Image("kube-state-metrics", "registry.k8s.io/kube-state-metrics/kube-state-metrics", "v2.19.1"),
        # prometheus-adapter chart 5.3.0 runs adapter v0.12.0 (the inference autoscaler's metrics).
        Image("prometheus-adapter", "registry.k8s.io/prometheus-adapter/prometheus-adapter", "v0.12.0"),
        # Scheduling.
        Image("kueue", "registry.k8s.io/kueue/kueue", "v0.18.2",
              differs_from_chart=f"{_GIT_TREE} (us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:"
              "release-0.18 in git)"),
        Image("jobset", "registry.k8s.io/jobset/jobset", "v0.12.0",
              differs_from_chart=f"{_GIT_TREE} (us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset:main "
              "in git)"),
        # FSx for Lustre CSI driver 1.16.0 and its sidecars.
        Image("aws-fsx-csi-driver", "public.ecr.aws/fsx-csi-driver/aws-fsx-csi-driver", "v1.8.0"),
        Image("livenessprobe", "public.ecr.aws/csi-components/livenessprobe", "v2.18.0-eksbuild.3"),
        Image("node-driver-registrar", "public.ecr.aws/csi-components/csi-node-driver-registrar",
              "v2.16.0-eksbuild.3"),
        Image("external-provisioner", "public.ecr.aws/csi-components/csi-provisioner", "v6.2.0-eksbuild.2"),
        Image("external-resizer", "public.ecr.aws/csi-components/csi-resizer", "v2.1.0-eksbuild.3"),
        # Serving and the base of the training image.
        Image("tritonserver", "nvcr.io/nvidia/tritonserver", "26.01-py3"),
        Image("pytorch", "nvcr.io/nvidia/pytorch", "26.01-py3"),
        # Copies a model repository out of S3 for Triton. AWS CLI v2 reads Pod Identity
        # credentials from 2.15.0; Triton's own S3 client does not.
        Image("aws-cli", "public.ecr.aws/aws-cli/aws-cli", "2.37.1"),
        # The acceptance suite's per-node debug pods: a shell and chroot, nothing more.
        Image("node-debug", "public.ecr.aws/docker/library/busybox", "1.37.0"),
        # The platform's own images.
        Image("training", "workloads/images/training.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True),
        Image("serving", "workloads/images/serving.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True),
        Image("checks", "workloads/images/checks.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True),
    )
}


def registry_host(account: str, region: str) -> str:
    return ECR_HOST.format(account=account, region=region)


def image_uri(name: str, account: str, region: str) -> str:
    """`<account>.dkr.ecr.<region>.amazonaws.com/mlplat/mirror/<name>:<tag>` (platform
    images: `.../mlplat/<name>:<tag>`)."""
    image = IMAGES[name]
    return f"{registry_host(account, region)}/{image.repository}:{image.tag}"


# --- Helm charts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str  # upstream chart repository; overridable per stack to an in-region OCI mirror
    version: str


# Chart versions were checked against each project's releases; images the charts run are
# pinned separately in IMAGES (the values never fall back to a chart's upstream default).
# Each chart is rendered offline from the chart cache (infra/chart_cache.py) at exactly
# this version.
CHARTS: dict[str, Chart] = {
    chart.name: chart
    for chart in (
        # 0.19.3 restores mofedEnabled=false by default (NVIDIA/k8s-device-plugin#1692); we set
        # it explicitly anyway.
        Chart("nvidia-device-plugin", "https://nvidia.github.io/k8s-device-plugin", "0.19.3"),
        Chart("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", "v26.3.3"),
        Chart("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", "v0.5.29"),
        Chart("dcgm-exporter", "https://nvidia.github.io/dcgm-exporter/helm-charts", "4.8.2"),
        Chart("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "88.3.0"),
        Chart("prometheus-adapter", "https://prometheus-community.github.io/helm-charts", "5.3.0"),
        Chart("kueue", "oci://registry.k8s.io/kueue/charts", "0.18.2"),
        Chart("jobset", "oci://registry.k8s.io/jobset/charts", "0.12.0"),
        Chart("aws-fsx-csi-driver", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver", "1.16.0"),
    )
}


# --- EKS managed add-ons -------------------------------------------------------------
# Versions for KUBERNETES_VERSION; `aws eks describe-addon-versions --kubernetes-version
# 1.34 --addon-name <name>` lists the newer builds. The VPC CNI must stay at 1.18.5 or
# later: older releases do not handle `efa-only` interfaces and leave EFA nodes NotReady.

VPC_CNI_MIN_FOR_EFA_ONLY = (1, 18, 5)


@dataclass(frozen=True)
class EksAddon:
    name: str
    version: str  # v<upstream>-eksbuild.<n>

    @property
    def upstream(self) -> tuple[int, ...]:
        """`v1.20.4-eksbuild.2` -> (1, 20, 4)."""
        return tuple(int(part) for part in self.version.lstrip("v").split("-", 1)[0].split("."))


EKS_ADDONS: dict[str, EksAddon] = {
    addon.name: addon
    for addon in (
        EksAddon("vpc-cni", "v1.20.4-eksbuild.2"),
        EksAddon("kube-proxy", "v1.34.1-eksbuild.2"),
        EksAddon("coredns", "v1.12.4-eksbuild.1"),
        EksAddon("eks-pod-identity-agent", "v1.3.10-eksbuild.2"),
        EksAddon("aws-ebs-csi-driver", "v1.54.0-eksbuild.1"),
    )
}
