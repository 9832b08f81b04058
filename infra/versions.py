"""One source of truth for every pinned version: Kubernetes, EKS add-ons, Helm charts,
and the registry plan that maps each third-party image to its in-region mirror."""

from __future__ import annotations

import re
from collections.abc import Mapping
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
# Every third-party image the platform runs is mirrored by digest into an in-region ECR
# repository of the environment (`mlplat mirror`, infra/mirror.py); the platform's own
# images are built by CI from the mirror and pushed beside them. Everything the platform
# deploys takes its image reference from `image_uri`, `<repository>:<tag>@<digest>`, so no
# pod pulls from outside the region and a tag that moves upstream never changes what runs.
#
# Repositories are named per environment (`mlplat/<environment>/...`): environments that
# share an account and region never collide, each stack owns (and may destroy) only its
# own repositories under its own key, and staging can take a new pin before prod does
# (docs/supply.md says why this and not one shared registry stack).

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
BUILT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}@sha256:[0-9a-f]{64}$")  # tag@digest of a platform build

# Where EKS publishes its add-on images in each region (docs: "View Amazon container image
# registries for Amazon EKS add-ons"); the EFA device plugin is copied from the stack's own
# region, never from another.
EKS_REGISTRY_ACCOUNTS = {
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "il-central-1": "066635153087",
    **{region: "602401143452" for region in (
        "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "sa-east-1", "eu-central-1",
        "eu-west-1", "eu-west-2", "eu-west-3", "eu-north-1", "ap-south-1", "ap-northeast-1", "ap-northeast-2",
        "ap-northeast-3", "ap-southeast-1", "ap-southeast-2")},
}
EKS_REGISTRY = "{eks_registry}"  # in an Image's source: the stack region's EKS registry


class PlanError(ValueError):
    """The registry plan cannot say where an image comes from or what it is pinned to."""


def eks_registry(region: str) -> str:
    account = EKS_REGISTRY_ACCOUNTS.get(region)
    if account is None:
        raise PlanError(f"no EKS add-on registry is known for region {region}; add its account to "
                        "EKS_REGISTRY_ACCOUNTS in infra/versions.py (aws eks describe-addon-versions shows it)")
    return registry_host(account, region)


# Where an image or chart of the plan runs: the AWS environments (their in-region ECR
# repositories) and a customer's own cluster (its registry). Each environment's plan holds
# only what its site runs, so an AWS account keeps no copy of the bare-metal driver builds
# and a customer's registry none of the AWS-only add-ons.
SITES = ("aws", "customer")
AWS_ONLY = ("aws",)
CUSTOMER_ONLY = ("customer",)


@dataclass(frozen=True)
class Image:
    name: str  # key in IMAGES, and the repository's last path segment
    # Mirrors: the upstream repository, for `mlplat mirror`; never pulled by the cluster.
    # Platform images: the Dockerfile they are built from.
    source: str
    tag: str
    # Mirrors: sha256 of the upstream manifest the tag named when pinned (the multi-arch
    # index where there is one, copied whole). Platform images: empty; CI records each
    # build's digest and the cluster layer reads it from its config (platformImages).
    digest: str = ""
    built_here: bool = False  # the platform's own image, pushed by CI rather than mirrored
    base: str = ""  # platform images: the mirror (a name in IMAGES) the Dockerfile builds on
    # Why this mirror is not the image its chart runs upstream, where it is not; empty: it
    # is (the render check compares each mirror with the chart's own choice).
    differs_from_chart: str = ""
    sites: tuple[str, ...] = SITES  # where it runs (SITES)

    def repository(self, environment: str) -> str:
        """The in-region ECR repository name."""
        base = f"mlplat/{environment}"
        return f"{base}/{self.name}" if self.built_here else f"{base}/mirror/{self.name}"

    def upstream(self, region: str) -> str:
        """What `mlplat mirror` copies from (`source:tag`); empty for platform images."""
        if self.built_here:
            return ""
        source = self.source.replace(EKS_REGISTRY, eks_registry(region)) if EKS_REGISTRY in self.source \
            else self.source
        return f"{source}:{self.tag}"


# The operating system of a customer's bare-metal GPU nodes that the plan's driver builds
# (GPU driver, DOCA driver) are for: both operators append it to a version without a digest.
NODE_OS = "ubuntu24.04"
GPU_DRIVER_VERSION = "580.126.20"  # the GPU Operator v26.3.3 chart's default driver
DOCA_DRIVER_VERSION = "doca3.4.1-26.04-1.1.0.0-1"  # Network Operator v26.4.1's DOCA driver

# The platform's own images share the project's version.
PLATFORM_IMAGE_TAG = "0.1.0"
# What the offline preview, which builds nothing, references the platform's own images by:
# a digest no build can produce, so a manifest written by the preview can never run.
UNBUILT = f"{PLATFORM_IMAGE_TAG}@sha256:{'0' * 64}"

# Digests: the multi-arch index (or, where only that is published, the linux/amd64
# manifest) each tag named, from the projects' own release records where they publish
# them (NVIDIA's certified GPU Operator 26.3.3 bundle, kubernetes/k8s.io promotions,
# chart repository indexes) and otherwise from independent public pins of the same tag.
# `mlplat mirror` reads every upstream tag before it copies, and refuses one that no
# longer names its pin. An image without a digest has not been pinned yet (its registry
# was not reachable when it was added): previews name it by tag, and `mlplat mirror` and
# `pulumi up` refuse it until it is pinned (`skopeo inspect --raw docker://<source>:<tag>
# | sha256sum`).
#
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
        Image("k8s-device-plugin", "nvcr.io/nvidia/k8s-device-plugin", "v0.19.3",
              "sha256:25cc340fe6fd53c101e16fc452f503e7a92c219c64a80ed5381784b522dbbf77"),
        Image("gpu-operator", "nvcr.io/nvidia/gpu-operator", "v26.3.3",
              "sha256:6584c36f153d18cfce284f7e5bc477887ce3c1ac566dc795bd80c9af6c6488f7",
              differs_from_chart=f"{_GIT_TREE} (appVersion main-latest in git, v26.3.3 when published)"),
        # The validator binary lives in the operator image since v25.10; the separate
        # validator repository stopped at v25.3.x, so this mirror copies the operator image.
        Image("gpu-operator-validator", "nvcr.io/nvidia/gpu-operator", "v26.3.3",
              "sha256:6584c36f153d18cfce284f7e5bc477887ce3c1ac566dc795bd80c9af6c6488f7",
              differs_from_chart=f"{_GIT_TREE} (appVersion main-latest in git, v26.3.3 when published)"),
        Image("k8s-mig-manager", "nvcr.io/nvidia/cloud-native/k8s-mig-manager", "v0.14.2",
              "sha256:313586bfa5c07601a83f310dd700db0007d489df2ad42bb52c611802cbb7a278"),
        # On a customer's bare-metal nodes the GPU Operator also installs the driver and the
        # container toolkit (components/addons/values.py gpu_operator_values). The driver's tag
        # names the node OS: the operator appends `-<os>` to a version without a digest, so
        # the plan carries the build for NODE_OS, and a pinned reference (which the operator
        # takes as it is) names it whole. Toolkit and driver manager: NVIDIA's certified
        # bundle of v26.3.3.
        Image("nvidia-driver", "nvcr.io/nvidia/driver", f"{GPU_DRIVER_VERSION}-{NODE_OS}",
              differs_from_chart=f"the chart names the driver version ({GPU_DRIVER_VERSION}) and the operator "
              f"appends the node's OS; the mirror copies that build for {NODE_OS}", sites=CUSTOMER_ONLY),
        Image("container-toolkit", "nvcr.io/nvidia/k8s/container-toolkit", "v1.19.1",
              "sha256:c927adbc9b7755c5cb90022fdcc5c1295f5fe5fe1f38200a2dc65e85632b029c", sites=CUSTOMER_ONLY),
        Image("k8s-driver-manager", "nvcr.io/nvidia/cloud-native/k8s-driver-manager", "v0.11.0",
              "sha256:8aec215a8b159b0162b55e688065efd58ebfa848ebc999c1797221686ff1243d", sites=CUSTOMER_ONLY),
        # NVIDIA Network Operator v26.4.1 (chart network-operator 26.4.1) and the operands its
        # NicClusterPolicy runs (hack/release.yaml at the tag): the DOCA (MOFED) driver, whose
        # tag names the node OS and architecture as the driver's does, and the RDMA shared
        # device plugin.
        Image("network-operator", "nvcr.io/nvidia/cloud-native/network-operator", "v26.4.1", sites=CUSTOMER_ONLY),
        Image("network-operator-init-container", "nvcr.io/nvidia/mellanox/network-operator-init-container",
              "network-operator-v26.4.1", sites=CUSTOMER_ONLY),
        Image("doca-driver", "nvcr.io/nvidia/mellanox/doca-driver", f"{DOCA_DRIVER_VERSION}-{NODE_OS}-amd64",
              sites=CUSTOMER_ONLY),
        Image("k8s-rdma-shared-dev-plugin", "nvcr.io/nvidia/mellanox/k8s-rdma-shared-dev-plugin",
              "network-operator-v26.4.1", sites=CUSTOMER_ONLY),
        # The GPU Operator's NFD (its bundled NFD chart 0.18.3).
        Image("node-feature-discovery", "registry.k8s.io/nfd/node-feature-discovery", "v0.18.3",
              "sha256:f9ef2ebee55141a1758d3c0a87bb701f5db2adf6856f7218b11bc2bac7b63862"),
        # The device plugin chart 0.19.3 bundles NFD chart 0.17.3, whose templates pass flags
        # (-metrics, -grpc-health) that NFD 0.18 removed: its pods need the 0.17 image.
        Image("node-feature-discovery-0.17", "registry.k8s.io/nfd/node-feature-discovery", "v0.17.3"),
        Image("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter", "4.5.3-4.8.2-distroless",
              "sha256:60d3b00ac80b4ae77f94dae2f943685605585ad9e92fdccda3154d009ae317cc"),
        # The chart's default pulls from EKS's registry in us-west-2; EKS publishes the same
        # image from a registry in every region, and the mirror copies it from the stack's own.
        Image("aws-efa-k8s-device-plugin", f"{EKS_REGISTRY}/eks/aws-efa-k8s-device-plugin", "v0.5.20",
              differs_from_chart="the chart pulls from EKS's us-west-2 registry; the mirror copies the same image "
              "from EKS's registry in the stack's region", sites=AWS_ONLY),
        # Telemetry (kube-prometheus-stack 88.3.0: prometheus-operator v0.93, kube-state-metrics
        # chart 8.2.0, prometheus-node-exporter chart 4.56.1).
        Image("prometheus", "quay.io/prometheus/prometheus", "v3.13.2-distroless",
              "sha256:64f71bb84e03c855948418b0fc5dea53e9543d8e3fc9931598f583805507f05e"),
        Image("alertmanager", "quay.io/prometheus/alertmanager", "v0.33.1",
              "sha256:9e082985f56f4c8c9f724e18f2288c6708f472e56a5286b8863d080434ea065d"),
        Image("prometheus-operator", "quay.io/prometheus-operator/prometheus-operator", "v0.93.0",
              "sha256:a001ed10a3823bbf2410ea347796d0e35ff8decd24fb98acbe7ab9e98d431c39"),
        Image("prometheus-config-reloader", "quay.io/prometheus-operator/prometheus-config-reloader", "v0.93.0",
              "sha256:0ccb22ca9f3f6fd9f76ce95585d18bd2e363d421c534dde710be4bd13caa551d"),
        # The operator is told where Thanos lives even where no Prometheus runs a Thanos
        # sidecar: the reference points in-region too.
        Image("thanos", "quay.io/thanos/thanos", "v0.42.4",
              "sha256:b567818fe608067eb0f1d7c2c4fe361e7ad83c8a256234c97685f1d0bf670cc8"),
        Image("node-exporter", "quay.io/prometheus/node-exporter", "v1.12.1-distroless",
              "sha256:8c9bac11973b94b59be88d6e11fee4429aa743c8846cdc75d65b18db33f6a106"),
        Image("kube-state-metrics", "registry.k8s.io/kube-state-metrics/kube-state-metrics", "v2.19.1",
              "sha256:85108987d044b18a098126732f98602df408888c0f7d456241f5abefb9744bc1"),
        # prometheus-adapter chart 5.3.0 runs adapter v0.12.0 (the inference autoscaler's metrics).
        Image("prometheus-adapter", "registry.k8s.io/prometheus-adapter/prometheus-adapter", "v0.12.0"),
        # Scheduling.
        Image("kueue", "registry.k8s.io/kueue/kueue", "v0.18.2",
              "sha256:4e4f11b82390710e2e57c29cac2862c5ddb29e994c981209396f52be46dcaba8",
              differs_from_chart=f"{_GIT_TREE} (us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:"
              "release-0.18 in git)"),
        Image("jobset", "registry.k8s.io/jobset/jobset", "v0.12.0",
              "sha256:e75536f1135b7bb2f19f8c3b620782fbdd9091d73398e3a272f9a5fed322980d",
              differs_from_chart=f"{_GIT_TREE} (us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset:main "
              "in git)"),
        # FSx for Lustre CSI driver 1.16.0 and its sidecars.
        Image("aws-fsx-csi-driver", "public.ecr.aws/fsx-csi-driver/aws-fsx-csi-driver", "v1.8.0", sites=AWS_ONLY),
        Image("livenessprobe", "public.ecr.aws/csi-components/livenessprobe", "v2.18.0-eksbuild.3", sites=AWS_ONLY),
        Image("node-driver-registrar", "public.ecr.aws/csi-components/csi-node-driver-registrar",
              "v2.16.0-eksbuild.3", sites=AWS_ONLY),
        Image("external-provisioner", "public.ecr.aws/csi-components/csi-provisioner", "v6.2.0-eksbuild.2",
              sites=AWS_ONLY),
        Image("external-resizer", "public.ecr.aws/csi-components/csi-resizer", "v2.1.0-eksbuild.3", sites=AWS_ONLY),
        # The inference gateway: Envoy Gateway v1.9.0 (chart gateway-helm v1.9.0) and the Envoy
        # it runs as the proxy (v1.9.0's built-in default; set in the EnvoyProxy, not the chart).
        Image("envoy-gateway", "docker.io/envoyproxy/gateway", "v1.9.0"),
        Image("envoy", "docker.io/envoyproxy/envoy", "distroless-v1.39.0"),
        # Where the scheduled drift checks push their scores (components/drift_spec.py).
        Image("pushgateway", "quay.io/prometheus/pushgateway", "v1.11.2"),
        # Progressive delivery: Argo Rollouts v1.9.0 (chart argo-rollouts 2.41.0).
        Image("argo-rollouts", "quay.io/argoproj/argo-rollouts", "v1.9.0"),
        # Serving and the base of the training image.
        Image("tritonserver", "nvcr.io/nvidia/tritonserver", "26.01-py3",
              "sha256:c9f2ede50ccc4a3ce66e22e26ed1b5adc0c68516b58edfaca738693719c2146b"),
        Image("pytorch", "nvcr.io/nvidia/pytorch", "26.01-py3",
              "sha256:38ed2ecb2c16d10677006d73fb0a150855d6ec81db8fc66e800b5ae92741007e"),
        # Copies a model repository out of S3 for Triton. AWS CLI v2 reads Pod Identity
        # credentials from 2.15.0; Triton's own S3 client does not.
        Image("aws-cli", "public.ecr.aws/aws-cli/aws-cli", "2.37.1"),
        # The base of the checks image (workloads/images/checks.Dockerfile).
        Image("python", "docker.io/library/python", "3.11.7-slim-bookworm",
              "sha256:d11b9bd5e49ea7401753d78f4d3b56f3aec952b85b49bcae88981f0452818e0b"),
        # The acceptance suite's per-node debug pods: a shell and chroot, nothing more.
        Image("node-debug", "public.ecr.aws/docker/library/busybox", "1.37.0",
              "sha256:bdf57e528e45e4433820e045b29b4597825a1c9e38353532d90a01445013f82e"),
        # The platform's own images.
        Image("training", "workloads/images/training.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True, base="pytorch"),
        Image("serving", "workloads/images/serving.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True, base="pytorch"),
        Image("checks", "workloads/images/checks.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True, base="python"),
        Image("tracking", "workloads/images/tracking.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True, base="python"),
        Image("features", "workloads/images/features.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True, base="python"),
        Image("pipelines", "workloads/images/pipelines.Dockerfile", PLATFORM_IMAGE_TAG, built_here=True, base="python"),
        # Argo Rollouts' Gateway API plugin, a binary the controller loads from a file: copied
        # into the controller's pod from this image, so nothing is fetched from outside the
        # region when the controller starts.
        Image("rollouts-gatewayapi-plugin", "workloads/images/rollouts-plugin.Dockerfile", PLATFORM_IMAGE_TAG,
              built_here=True, base="node-debug"),
    )
}


def plan_images(site: str = "aws") -> dict[str, Image]:
    """The images of the plan a site runs (an environment's: infra/config.py site_of)."""
    return {name: image for name, image in IMAGES.items() if site in image.sites}


def plan_charts(site: str = "aws") -> dict[str, Chart]:
    return {name: chart for name, chart in CHARTS.items() if site in chart.sites}


def unpinned(site: str = "aws") -> list[str]:
    """Mirror images and charts of a site's plan that have no digest."""
    return [f"image {i.name}" for i in plan_images(site).values() if not i.built_here and not DIGEST.match(i.digest)] \
        + [f"chart {c.name}" for c in plan_charts(site).values() if not DIGEST.match(c.digest)]


def registry_host(account: str, region: str) -> str:
    return ECR_HOST.format(account=account, region=region)


def image_uri(name: str, account: str, region: str, environment: str, built: Mapping[str, str] | None = None) -> str:
    """`<host>/mlplat/<environment>/mirror/<name>:<tag>@<digest>` in the account's
    in-region ECR (`image_ref` with its host)."""
    return image_ref(name, registry_host(account, region), environment, built)


def image_ref(name: str, registry: str, environment: str, built: Mapping[str, str] | None = None) -> str:
    """`<registry>/mlplat/<environment>/mirror/<name>:<tag>@<digest>`; platform images
    `.../mlplat/<environment>/<name>:<tag>@<digest>` with the `tag@digest` CI recorded in
    `built`. The registry is the environment's in-region ECR, or the in-country registry a
    customer's cluster names in its descriptor (`mlplat mirror` fills either). A mirror not
    yet pinned is named by its tag alone: previews show it, and `mlplat mirror` and
    `pulumi up` refuse it (infra/cluster_layer.py check_supply)."""
    image = IMAGES[name]
    repository = f"{registry}/{image.repository(environment)}"
    if image.built_here:
        recorded = (built or {}).get(name, "")
        if not BUILT.match(recorded):
            raise PlanError(f"image {name}: mlplat:platformImages.{name} is not set; it is the tag@digest CI records "
                            "when it builds the image")
        return f"{repository}:{recorded}"
    return f"{repository}:{image.tag}@{image.digest}" if image.digest else f"{repository}:{image.tag}"


# --- Helm charts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str  # upstream chart repository: where `mlplat mirror` fetches it, never the cluster
    version: str
    # The pin. From an https repository: sha256 of the chart archive (.tgz), the `digest` of
    # its index.yaml entry; `mlplat mirror` pulls the archive, refuses another digest, and
    # pushes it to the in-region registry as an OCI artifact. From an OCI registry: the
    # chart's manifest digest, copied by digest like an image.
    digest: str = ""
    sites: tuple[str, ...] = SITES  # where it runs (SITES)

    def mirror_repository(self, environment: str) -> str:
        """The in-region ECR repository the chart is pushed to (`oci://<host>/<this>`)."""
        return f"{CHARTS_PREFIX.format(environment=environment)}/{self.name}"


CHARTS_PREFIX = "mlplat/{environment}/charts"  # each chart's repository is <this>/<chart name>


# Chart versions were checked against each project's releases; images the charts run are
# pinned separately in IMAGES (the values never fall back to a chart's upstream default).
# Each chart is rendered offline from the chart cache (infra/chart_cache.py) at exactly
# this version, and installed from the environment's in-region chart repository, where
# `mlplat mirror` pushed the archive with the pinned digest.
CHARTS: dict[str, Chart] = {
    chart.name: chart
    for chart in (
        # 0.19.3 restores mofedEnabled=false by default (NVIDIA/k8s-device-plugin#1692); we set
        # it explicitly anyway.
        Chart("nvidia-device-plugin", "https://nvidia.github.io/k8s-device-plugin", "0.19.3",
              "sha256:8f01067500e712508fe55fe060b6f895814dc7efc1cb96323db2ce4f777f6e96"),
        Chart("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", "v26.3.3",
              "sha256:59abb5852a24b3ae0ef757bfea3051f419acbf559ee5efd72f0672d28af56a68"),
        Chart("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts", "v0.5.29",
              "sha256:078610ef669714f39be77d133674c7721fb3ca123213b3d6b16938c8c0d2e034", sites=AWS_ONLY),
        Chart("dcgm-exporter", "https://nvidia.github.io/dcgm-exporter/helm-charts", "4.8.2",
              "sha256:1c5535c03ebab3f021444df6016fce1cd7871385122e115c6ed24c804b623803"),
        Chart("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts", "88.3.0",
              "sha256:5609de52e7af33792e6c6678b9443cacaec0cd81feacc956f6da0209a7463cba"),
        Chart("prometheus-adapter", "https://prometheus-community.github.io/helm-charts", "5.3.0",
              "sha256:aa6752b6207ed788522714c3ef7f67f27d423eb4d9512fecb52dc641b6434f31"),
        Chart("kueue", "oci://registry.k8s.io/kueue/charts", "0.18.2",
              "sha256:156fbc8c6752b08cf66a2324fed33e269e0a64e54dd8d70d51118065bca651af"),
        Chart("jobset", "oci://registry.k8s.io/jobset/charts", "0.12.0",
              "sha256:02808a890a0b0e03a1d3bf5959e2f562b3b47c15e446bbba358c1d24e1f81b24"),
        Chart("aws-fsx-csi-driver", "https://kubernetes-sigs.github.io/aws-fsx-csi-driver", "1.16.0",
              "sha256:d744eae4633f49450680f5fc5a7caaf3fb227eaf8c5303ffa9e4c1c351d09951", sites=AWS_ONLY),
        # Not pinned yet: their registries were not reachable when they were added.
        Chart("gateway-helm", "oci://docker.io/envoyproxy", "v1.9.0"),
        Chart("argo-rollouts", "https://argoproj.github.io/argo-helm", "2.41.0"),
        # A customer's InfiniBand or RoCE fabric: the DOCA driver, the RDMA shared device
        # plugin and GPUDirect RDMA (nvidia-peermem, through the GPU Operator's driver).
        Chart("network-operator", "https://helm.ngc.nvidia.com/nvidia", "26.4.1", sites=CUSTOMER_ONLY),
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
