"""Node pool specs: EFA interfaces, nodeadm user data, labels and taints."""

from __future__ import annotations

from email.mime.base import MIMEBase
from email.mime.multipart import MIMEMultipart
from typing import Any

import yaml

from infra.catalog import InstanceType

GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
CPU_AMI_TYPE = "AL2023_x86_64_STANDARD"
ROOT_DEVICE = "/dev/xvda"  # the root volume of the AL2023 EKS AMIs

# Pods reach the instance metadata service through one extra network hop: with a limit
# of 2 any pod could take the node role's credentials; with 1 only host-network pods
# (the CNI, the device plugins, the Pod Identity agent) reach it. Workload credentials
# come from Pod Identity, which does not use this path, and the CSI drivers fall back to
# the Kubernetes API for what they would read there.
IMDS_HOP_LIMIT = 1

LABEL_PREFIX = "mlplat.io"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}

# Fixed so the rendered user data, and so the launch template, stays the same between runs.
MIME_BOUNDARY = "==MLPLATNODEADM=="

# 2 MiB huge pages reserved on EFA nodes: libfabric's EFA provider uses them for its
# buffers, and training pods request `hugepages-2Mi: 5120Mi` (10 GiB). kubelet only
# advertises pages reserved before it starts; nodeadm starts kubelet after cloud-init's
# scripts (nodeadm-run.service: After=cloud-final.service), so a script part is early enough.
HUGEPAGES_2MI = 5120


def hugepages_script(pages: int = HUGEPAGES_2MI) -> str:
    return (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        f"echo 'vm.nr_hugepages = {pages}' > /etc/sysctl.d/90-mlplat-hugepages.conf\n"
        "sysctl --load /etc/sysctl.d/90-mlplat-hugepages.conf\n"
    )


def ami_type(instance: InstanceType) -> str:
    return GPU_AMI_TYPE if instance.has_gpu else CPU_AMI_TYPE


def efa_interfaces(instance: InstanceType, security_group_ids: list[Any]) -> list[dict[str, Any]]:
    """One network interface per network card, as EFA wants it for full bandwidth.

    Card 0, device 0 is `efa` (EFA with ENA): the node's IP address lives there. Every
    other card gets an `efa-only` interface on device index 1: EFA bandwidth without
    spending a VPC address per card or creating extra routes on the host. A node that
    attaches fewer interfaces than the type has silently trains over fewer rails.
    No interface says associatePublicIpAddress, not even "false": EC2 refuses the field
    on a launch with more than one interface. The private subnets (mapPublicIpOnLaunch
    off) are what keep nodes off the internet. The booleans are strings because that is
    how the launch template API takes them.
    """
    if not instance.has_efa:
        raise ValueError(f"{instance.name} has no EFA interfaces")
    interfaces = []
    for card in range(instance.efa_interfaces):
        interfaces.append(
            {
                "network_card_index": card,
                "device_index": 0 if card == 0 else 1,
                "interface_type": "efa" if card == 0 else "efa-only",
                "delete_on_termination": "true",
                "security_groups": list(security_group_ids),
            }
        )
    return interfaces


def local_storage_strategy(instance: InstanceType) -> str | None:
    """How nodeadm prepares local NVMe: RAID0 across two or more disks (containerd and
    kubelet then live on the array), a plain mount for a single disk (RAID0 of one disk
    has failed to boot recent AL2023 AMIs), nothing without instance storage."""
    if instance.nvme_disks >= 2:
        return "RAID0"
    if instance.nvme_disks == 1:
        return "Mount"
    return None


def node_config(instance: InstanceType) -> dict[str, Any] | None:
    """The nodeadm NodeConfig this pool adds. Managed node groups merge it with the
    cluster section EKS writes itself, so only the pool's own settings go here."""
    strategy = local_storage_strategy(instance)
    if strategy is None:
        return None
    return {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"instance": {"localStorage": {"strategy": strategy}}},
    }


def nodeadm_user_data(instance: InstanceType, efa: bool = False) -> str | None:
    """MIME multipart user data (what managed node groups require) carrying the
    NodeConfig and, on EFA pools, the huge-page reservation; None when the pool needs
    neither."""
    config = node_config(instance)
    if config is None and not efa:
        return None
    message = MIMEMultipart("mixed", boundary=MIME_BOUNDARY)
    if config is not None:
        part = MIMEBase("application", "node.eks.aws")
        part.set_payload("---\n" + yaml.safe_dump(config, sort_keys=False))
        message.attach(part)
    if efa:
        script = MIMEBase("text", "x-shellscript", charset="us-ascii")
        script.set_payload(hugepages_script())
        message.attach(script)
    # No Date or similar headers: the text must be the same on every run.
    return message.as_string()


def node_labels(pool: str, role: str, instance: InstanceType, efa: bool) -> dict[str, str]:
    """Labels the scheduler, device plugins and training jobs select on.

    `node.kubernetes.io/instance-type` is set by Kubernetes itself. The two `.present`
    labels are the ones the NVIDIA and EFA device plugin charts select nodes by.
    """
    labels = {
        f"{LABEL_PREFIX}/pool": pool,
        f"{LABEL_PREFIX}/role": role,
        f"{LABEL_PREFIX}/instance-type": instance.name,
        f"{LABEL_PREFIX}/efa-count": str(instance.efa_interfaces if efa else 0),
    }
    if instance.gpu is not None:
        labels[f"{LABEL_PREFIX}/gpu-model"] = instance.gpu.model
        labels[f"{LABEL_PREFIX}/gpu-count"] = str(instance.gpus)
        labels["nvidia.com/gpu.present"] = "true"
    if efa:
        labels["vpc.amazonaws.com/efa.present"] = "true"
    return labels


def node_taints(instance: InstanceType) -> list[dict[str, str]]:
    """GPU nodes only take pods that tolerate the GPU taint, so CPU work never
    occupies a node someone pays GPU prices for."""
    return [dict(GPU_TAINT)] if instance.has_gpu else []


def default_root_volume_gib(instance: InstanceType) -> int:
    # CUDA, PyTorch and serving images run to tens of GB each; CPU images are small.
    return 200 if instance.has_gpu else 50
