"""The descriptor of a cluster the customer runs (infra/descriptor.py CustomerClusterDescriptor),
as plain data: what it accepts, the settings it yields, and every refusal with the one line
a person sees (the stack test runs the three the issue names through `mlplat preview`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.fabric_spec import RDMA_SHARED_RESOURCE, NodeFabric
from infra.catalog import lookup
from infra.config import ConfigError, load_layer, settings_from_descriptor
from infra.descriptor import CustomerClusterDescriptor, customer_settings, parse_descriptor

WHERE = "cluster layer onprem: mlplat:descriptor"


def example() -> dict[str, Any]:
    """The onprem example stack's descriptor."""
    return copy.deepcopy(load_layer("onprem").descriptor)


def parse(data: dict[str, Any]) -> CustomerClusterDescriptor:
    descriptor = parse_descriptor(data, layer="onprem", source="mlplat:descriptor", environment="onprem",
                                  region="ae-auh-dc1")
    assert isinstance(descriptor, CustomerClusterDescriptor)
    return descriptor


def refused(change) -> str:
    data = example()
    change(data)
    with pytest.raises(ConfigError) as raised:
        settings_from_descriptor(customer_settings(parse(data), WHERE), f"{WHERE}: settings", customer_site=True)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_the_example_describes_eight_h100_nodes_on_ndr_infiniband():
    descriptor = parse(example())
    [gpu] = [g for g in descriptor.nodes if g.role == "gpu"]
    assert (gpu.count, gpu.gpus, gpu.gpu_model) == (8, 8, "h100")
    assert descriptor.fabrics[gpu.name] == NodeFabric(kind="infiniband", hcas=tuple(f"mlx5_{i}" for i in range(8)),
                                                      port_rate_gbps=400, rdma_resource=RDMA_SHARED_RESOURCE)
    assert descriptor.registry_host == "harbor.dc1.example.ae"
    assert descriptor.chart_mirror == "oci://harbor.dc1.example.ae/mlplat/onprem/charts"
    assert descriptor.object_storage.endpoint.startswith("https://")
    assert gpu.selector == {"mlplat.io/pool": "train-h100", "node.kubernetes.io/instance-type": "hgx-h100-8",
                            "topology.mlplat.io/fabric": "ib-pod-1"}


def test_its_settings_are_the_environments_with_pools_of_registered_node_classes():
    descriptor = parse(example())
    config = settings_from_descriptor(customer_settings(descriptor, WHERE), WHERE, customer_site=True)
    assert (config.environment, config.region) == ("onprem", "ae-auh-dc1")
    assert [(p.name, p.role, p.instance_type, p.min_size, p.max_size) for p in config.node_pools] == [
        ("system", "system", "r760-cpu", 3, 3), ("train-h100", "gpu", "hgx-h100-8", 8, 8),
        ("serve-l40s", "inference", "r760-l40s-4", 2, 2)]
    node = lookup("hgx-h100-8")
    assert (node.vcpus, node.memory_gib, node.gpus, node.gpu.model) == (224, 2048, 8, "h100")
    assert (node.network_gbps, node.rdma_hcas, node.efa_interfaces) == (3200, 8, 0)  # 8 x NDR 400
    assert node.customer_node_class and node.gpudirect_rdma and not lookup("p5.48xlarge").customer_node_class
    assert config.addons.device_plugin_mode == "gpu-operator"
    assert config.storage.lustre.enabled  # the shared scratch class stands for Lustre
    assert config.tracking.enabled and config.features.enabled  # PostgreSQL and Redis named


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["registry"].update(host="registry.example.com"),
     f"{WHERE}: `registry.host`: registry.example.com is not in the registry allow-list of "
     "policies/config/onprem.json (k8s-images-from-allowed-registries: harbor.dc1.example.ae/mlplat/onprem); "
     "mirror into an allowed registry, or have the allow-list name it"),
    (lambda d: d["nodes"][1]["fabric"].update(kind="omnipath"),
     f"{WHERE}: `nodes[1].fabric.kind`: 'omnipath' is not a fabric in the catalog; known: infiniband, roce (efa is "
     "AWS's own)"),
    (lambda d: d["nodes"][1]["fabric"].update(kind="efa"),
     f"{WHERE}: `nodes[1].fabric.kind`: 'efa' is AWS's fabric; a customer's cluster runs infiniband or roce"),
    (lambda d: d["objectStorage"].update(endpoint="http://s3.dc1.example.ae"),
     f"{WHERE}: `objectStorage.endpoint`: 'http://s3.dc1.example.ae' has no TLS; the object store must be reached "
     "over https:// (its CA goes in objectStorage.caBundle)"),
    (lambda d: d["nodes"][1]["fabric"].update(portRateGbps=300),
     f"{WHERE}: `nodes[1].fabric.portRateGbps`: 300 is not a port rate of infiniband; allowed: 100, 200, 400, 800"),
    (lambda d: d["nodes"][1]["fabric"].update(kind="roce"),
     f"{WHERE}: `nodes[1].fabric.gidIndex`: is required on RoCE (the GID index of RoCE v2, NCCL_IB_GID_INDEX; "
     "`show_gids` lists it)"),
    (lambda d: d["nodes"][1]["fabric"].update(gidIndex=3),
     f"{WHERE}: `nodes[1].fabric.gidIndex`: is for RoCE only; infiniband addresses ports by LID"),
    (lambda d: d["nodes"][1].pop("fabric"),
     f"{WHERE}: `nodes[1].fabric`: is required for a gpu group of several nodes (their collectives need "
     "InfiniBand or RoCE); state kind, hcas and portRateGbps"),
    (lambda d: d["nodes"][1].update(gpuModel="h800"),
     f"{WHERE}: `nodes[1].gpuModel`: 'h800' is not a GPU model the catalog knows; known: a100, a100-80gb, a10g, "
     "b200, h100, h200, l4, l40s"),
    (lambda d: d["nodes"][1].update(os="rhel9.4"),
     f"{WHERE}: `nodes[1].os`: 'rhel9.4': the GPU and DOCA driver builds the platform mirrors are for ubuntu24.04 "
     "(infra/versions.py NODE_OS); GPU nodes must run it"),
    (lambda d: d["nodes"][1]["labels"].update({"mlplat.io/pool": "other"}),
     f"{WHERE}: `nodes[1].labels`: mlplat.io/pool: is set from the group's name; leave it out of labels"),
    (lambda d: d["cluster"].update(kubernetesVersion="1.31"),
     f"{WHERE}: `cluster.kubernetesVersion`: '1.31': the platform's manifests are rendered and validated against "
     "Kubernetes 1.34 (infra/versions.py KUBERNETES_VERSION); run a 1.34 cluster, or validate the platform against "
     "1.31 first"),
    (lambda d: d["objectStorage"].update(caBundle="not a certificate"),
     f"{WHERE}: `objectStorage.caBundle`: is not a PEM certificate bundle (-----BEGIN CERTIFICATE----- ...)"),
    (lambda d: d["objectStorage"]["buckets"].pop("models"),
     f"{WHERE}: `objectStorage.buckets`: lacks models; name a bucket for each of datasets, models, checkpoints"),
    (lambda d: d["objectStorage"].update(cidrs=["0.0.0.0/0"]),
     f"{WHERE}: `objectStorage.cidrs`: '0.0.0.0/0' is every address; list the service's own networks"),
    (lambda d: d["objectStorage"].update(encryptionAtRst="SSE"),
     f"{WHERE}: `objectStorage.encryptionAtRst`: unknown key; did you mean `encryptionAtRest`?"),
    (lambda d: d["objectStorage"].pop("encryptionAtRest"),
     f"{WHERE} lacks `objectStorage.encryptionAtRest`; set it in the descriptor (docs/onprem.md lists every field)"),
    (lambda d: d["nodes"][0].update(instanceType="m7i.2xlarge"),
     f"{WHERE}: `nodes[0].instanceType`: 'm7i.2xlarge' is an EC2 instance type; name the customer's node class "
     "differently (the value its nodes carry in node.kubernetes.io/instance-type)"),
    (lambda d: d["nodes"].pop(0),
     f"{WHERE}: `nodes`: no system or cpu group: the platform's services need nodes without GPUs"),
    (lambda d: d["settings"].update(nodePools=[]),
     f"{WHERE}: `settings.nodePools`: is not set on a customer's cluster; the descriptor's `nodes` describe the "
     "customer's nodes"),
    (lambda d: d["settings"].update(addons={"devicePluginMode": "device-plugin"}),
     f"{WHERE}: `settings.addons.devicePluginMode`: 'device-plugin': bare-metal GPU nodes need the driver and the "
     "container toolkit, which only the GPU Operator installs; use gpu-operator or leave it unset"),
    (lambda d: (d.pop("services"), d["settings"].update(tracking={"enabled": True})),
     f"{WHERE}: `settings.tracking.enabled`: is true but the descriptor names no services.postgres (MLflow's "
     "database); add it, or set settings.tracking.enabled: false"),
    (lambda d: d["storageClasses"].pop("shared"),
     f"{WHERE}: settings: mlplat:training.nodes: 4 nodes need a shared file system for checkpoints; name a "
     "ReadWriteMany class in the descriptor's storageClasses.shared or run on 1 node"),
])
def test_a_bad_descriptor_is_one_line(change, message):
    assert refused(change) == message


def test_a_cloud_descriptor_is_still_read_as_the_cloud_layers():
    """A descriptor without a `cluster` section is the cloud layer's, ignoring what it does
    not know (an older cluster layer reads a newer cloud layer's)."""
    with pytest.raises(ConfigError, match=r"lacks `accountId`; re-run the cloud layer's `pulumi up`"):
        parse_descriptor({"environment": "prod", "region": "me-central-1"}, layer="prod-cluster",
                         source="mlplat:descriptor", environment="prod", region="me-central-1")


def test_mlplat_mirror_reads_a_customers_environment_from_its_descriptor():
    from infra.descriptor import environment_settings

    config = environment_settings("onprem", "harbor.dc1.example.ae")
    assert {lookup(p.instance_type).platform for p in config.node_pools} == {"linux/amd64"}
    with pytest.raises(ConfigError, match=r"registry.host is harbor.dc1.example.ae, but the copy goes to "
                                          r"ecr.example; mirror into the registry the cluster pulls from$"):
        environment_settings("onprem", "ecr.example")
    assert environment_settings("prod-cluster").environment == "prod"  # a cloud layer's, as before


@pytest.mark.parametrize(("part", "section", "what"), [
    ("requestLogging", None, "request logging (its logs are written under a KMS key through Pod Identity)"),
    ("requestLogging", {"enabled": True}, "request logging"),
    ("drift", {"enabled": True, "registeredModel": "m"}, "the drift check"),
    ("loadBalancer", {"enabled": True, "certificateArn": "arn:aws:acm:x"}, "the load balancer (an AWS NLB"),
])
def test_what_serving_does_not_build_on_a_customers_cluster_is_refused_not_left_out(part, section, what):
    def change(d):
        serving = {"device": "gpu", "modelName": "gpt", "requestLogging": {"enabled": False}}
        if section is None:
            serving.pop(part)  # request logging is on by default: it is turned off by name
        else:
            serving[part] = section
        d["settings"]["inference"] = serving
    message = refused(change)
    assert message.startswith(f"{WHERE}: `settings.inference.{part}.enabled`: {what}")
    assert message.endswith(f"is not built on a customer's cluster yet (docs/onprem.md); set "
                            f"settings.inference.{part}.enabled: false")
