"""One source of truth for every pinned version: Kubernetes, EKS add-ons, Helm charts,
and the registry plan that maps each third-party image to its in-region mirror."""

from __future__ import annotations

# Kubernetes minor version of the EKS control plane; manifests are validated against it.
KUBERNETES_VERSION = "1.31"
