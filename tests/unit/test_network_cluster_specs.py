"""Pure specs of the network and cluster, the add-on versions and the preflight zone choice."""

from __future__ import annotations

import ipaddress

import pytest

from components.specs import cluster as cluster_spec
from components.specs import iam as iam_spec
from components.specs import network as net_spec
from infra.config import ConfigError, NodePoolConfig
from infra.preflight import choose_zones
from infra.versions import EKS_ADDONS, KUBERNETES_VERSION, VPC_CNI_MIN_FOR_EFA_ONLY

ZONES = ("mec1-az1", "mec1-az2", "mec1-az3")


def test_subnet_plan_is_disjoint_and_inside_the_vpc():
    plan = net_spec.subnet_plan("10.0.0.0/16", ZONES)
    assert [z.zone_id for z in plan] == list(ZONES)
    vpc = ipaddress.ip_network("10.0.0.0/16")
    networks = [ipaddress.ip_network(c) for z in plan for c in (z.private_cidr, z.public_cidr)]
    assert all(n.subnet_of(vpc) for n in networks)
    assert not any(a.overlaps(b) for i, a in enumerate(networks) for b in networks[i + 1:])
    assert plan[0].private_cidr == "10.0.0.0/18" and plan[0].public_cidr == "10.0.192.0/22"


def test_adding_a_zone_keeps_existing_subnets():
    two = net_spec.subnet_plan("10.1.0.0/16", ZONES[:2])
    three = net_spec.subnet_plan("10.1.0.0/16", ZONES)
    assert three[:2] == two


def test_subnet_plan_refuses_four_zones():
    with pytest.raises(ValueError, match="between one and three zones"):
        net_spec.subnet_plan("10.0.0.0/16", ("a", "b", "c", "d"))


def test_private_cluster_endpoints_cover_images_credentials_and_logs():
    required = {"ecr.api", "ecr.dkr", "sts", "ec2", "logs", "eks-auth"}
    assert required <= set(net_spec.INTERFACE_ENDPOINT_SERVICES)
    assert net_spec.endpoint_service_name("me-central-1", "ecr.dkr") == "com.amazonaws.me-central-1.ecr.dkr"


def test_every_control_plane_log_type():
    assert set(cluster_spec.CONTROL_PLANE_LOG_TYPES) == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    assert cluster_spec.control_plane_log_group("mlplat-prod") == "/aws/eks/mlplat-prod/cluster"


def test_kubeconfig_holds_no_secret_and_uses_get_token():
    config = cluster_spec.kubeconfig("mlplat-prod", "https://x.eks", "Q0E=", "me-central-1")
    [user] = config["users"]
    assert set(user["user"]) == {"exec"}  # no token, password or client key
    assert user["user"]["exec"]["args"][:3] == ["eks", "get-token", "--cluster-name"]
    assert "me-central-1" in user["user"]["exec"]["args"]
    assert config["clusters"][0]["cluster"]["server"] == "https://x.eks"


def test_default_storage_class_is_encrypted_and_retained():
    sc = cluster_spec.default_storage_class("arn:aws:kms:me-central-1:1:key/k")
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["parameters"]["encrypted"] == "true" and sc["parameters"]["kmsKeyId"].endswith("key/k")
    assert sc["reclaim_policy"] == "Retain" and sc["provisioner"] == "ebs.csi.aws.com"


def test_principal_key_is_stable_and_distinct():
    a, b = "arn:aws:iam::111122223333:role/a", "arn:aws:iam::111122223333:role/b"
    assert cluster_spec.principal_key(a) == cluster_spec.principal_key(a) != cluster_spec.principal_key(b)


def test_addon_versions():
    assert set(EKS_ADDONS) == {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-ebs-csi-driver"}
    assert EKS_ADDONS["vpc-cni"].upstream >= VPC_CNI_MIN_FOR_EFA_ONLY
    # kube-proxy follows the control plane's minor version.
    assert EKS_ADDONS["kube-proxy"].upstream[:2] == tuple(int(p) for p in KUBERNETES_VERSION.split("."))
    assert all("-eksbuild." in a.version and a.version.startswith("v") for a in EKS_ADDONS.values())


def test_node_role_is_least_privilege():
    assert set(iam_spec.NODE_POLICIES) == {
        "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
    }
    trust = iam_spec.pod_identity_trust_policy("111122223333", "research", "trainer")["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "111122223333",
                                                   "aws:RequestTag/kubernetes-namespace": "research",
                                                   "aws:RequestTag/kubernetes-service-account": "trainer"}}


def _pool(**extra) -> NodePoolConfig:
    fields = {"name": "train", "role": "gpu", "instanceType": "p5.48xlarge", "minSize": 2, "maxSize": 4, **extra}
    return NodePoolConfig.model_validate(fields)


def test_preflight_keeps_the_pinned_zone():
    pool = _pool(efa=True, placementGroupZoneId="mec1-az2")
    assert choose_zones(1, pool, "me-central-1", ZONES, {"mec1-az2"}) == ("mec1-az2",)


def test_preflight_pinned_zone_not_offered_is_one_line():
    pool = _pool(efa=True, placementGroupZoneId="mec1-az2")
    with pytest.raises(ConfigError) as err:
        choose_zones(1, pool, "me-central-1", ZONES, {"mec1-az1", "mec1-az3"})
    assert str(err.value) == (
        "preflight: mlplat:nodePools[1].placementGroupZoneId: p5.48xlarge is not offered in mec1-az2 "
        "(me-central-1); offered in: mec1-az1, mec1-az3. Pick one of those zones or another instance type"
    )


def test_preflight_unpinned_pool_uses_offering_zones_only():
    pool = _pool()
    assert choose_zones(0, pool, "me-central-1", ZONES, {"mec1-az3", "mec1-az1"}) == ("mec1-az1", "mec1-az3")
    with pytest.raises(ConfigError, match=r"nodePools\[0\].instanceType: p5.48xlarge is not offered in any zone"):
        choose_zones(0, pool, "me-central-1", ZONES, set())
