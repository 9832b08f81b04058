"""One source of truth for every pinned version: Kubernetes, EKS add-ons, Helm charts,
and the registry plan that maps each third-party image to its in-region mirror."""

from __future__ import annotations

from dataclasses import dataclass

# Kubernetes minor version of the EKS control plane; manifests are validated against it.
KUBERNETES_VERSION = "1.34"

ECR_HOST = "{account}.dkr.ecr.{region}.amazonaws.com"


# --- Registry plan -------------------------------------------------------------------
# Every third-party image the platform runs is mirrored into an in-region ECR repository;
# everything the platform deploys takes its image reference from `image_uri`, so no pod
# pulls from outside the region.


@dataclass(frozen=True)
class Image:
    name: str  # key in IMAGES, and the mirror repository's last path segment
    source: str  # upstream repository, for the mirroring job: never pulled by the cluster
    tag: str

    @property
    def repository(self) -> str:
        """The in-region ECR repository name."""
        return f"mlplat/mirror/{self.name}"


IMAGES: dict[str, Image] = {}


def image_uri(name: str, account: str, region: str) -> str:
    """`<account>.dkr.ecr.<region>.amazonaws.com/mlplat/mirror/<name>:<tag>`."""
    image = IMAGES[name]
    return f"{ECR_HOST.format(account=account, region=region)}/{image.repository}:{image.tag}"


# --- Helm charts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    name: str
    repository: str  # upstream chart repository; overridable per stack to an in-region OCI mirror
    version: str


CHARTS: dict[str, Chart] = {}
