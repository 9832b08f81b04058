"""One Helm release of a pinned chart, from upstream or the stack's OCI mirror."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.addons.values import NAMESPACES, chart_source

# Long enough for the Prometheus stack to create its volumes on a fresh cluster.
TIMEOUT_SECONDS = 900


def helm_release(
    chart: str,
    values: dict[str, Any],
    mirror: str | None,
    opts: pulumi.ResourceOptions,
    namespace: str | None = None,
) -> k8s.helm.v3.Release:
    source = chart_source(chart, mirror)
    return k8s.helm.v3.Release(
        chart,
        name=chart,  # a fixed release name: Services and ServiceMonitors are named after it
        chart=source.chart,
        version=source.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=source.repo) if source.repo else None,
        namespace=namespace or NAMESPACES[chart],
        create_namespace=False,  # namespaces come from SYSTEM_NAMESPACES, with their labels
        values=values,
        atomic=True,  # a failed install or upgrade rolls back instead of leaving half a chart
        cleanup_on_fail=True,
        timeout=TIMEOUT_SECONDS,
        opts=opts,
    )
