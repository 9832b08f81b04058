"""`Cluster` and `CoreAddons` under mocks: endpoint, encryption, logs, access, add-ons, no
Kubernetes object (both are the cloud layer's); and the cluster layer's Kubernetes
provider and default StorageClass, built from the cloud layer's descriptor."""

from __future__ import annotations

import json

import pulumi
import pytest

from components.cluster import Cluster, ClusterArgs, CoreAddons, CoreAddonsArgs
from infra.versions import EKS_ADDONS
from tests.component.recorder import opts, record
from tests.conftest import DESCRIPTOR, preview
from tests.helpers import of_type

SECRETS_KEY = "arn:aws:kms:me-central-1:111122223333:key/cluster"
LOGS_KEY = "arn:aws:kms:me-central-1:111122223333:key/logs"
VOLUMES_KEY = "arn:aws:kms:me-central-1:111122223333:key/volumes"
ADMIN = "arn:aws:iam::111122223333:role/platform-admin"
VIEWER = "arn:aws:iam::111122223333:role/auditor"
DEPLOYER = "arn:aws:iam::111122223333:role/mlplat-deployer"
BREAK_GLASS = "arn:aws:iam::111122223333:role/mlplat-break-glass"


def build(public_cidrs: tuple[str, ...] = ()):
    deployer_admin: list[str] = []

    def program(provider):
        cluster = Cluster("cluster", ClusterArgs(
            cluster_name="mlplat-test", account_id="111122223333", region="me-central-1", version="1.34",
            subnet_ids=("subnet-a", "subnet-b", "subnet-c"), secrets_key_arn=SECRETS_KEY, logs_key_arn=LOGS_KEY,
            log_retention_days=365, deployer_role_arn=DEPLOYER, break_glass_role_arn=BREAK_GLASS,
            public_access_cidrs=public_cidrs, admin_role_arns=(ADMIN,),
            read_only_role_arns=(VIEWER,)), opts=opts(provider))
        cluster.deployer_admin.urn.apply(deployer_admin.append)
        CoreAddons("core-addons", CoreAddonsArgs(cluster_name="mlplat-test", account_id="111122223333", cluster=cluster.eks,
                                                 volumes_key_arn=VOLUMES_KEY),
                   opts=pulumi.ResourceOptions(providers={"aws": provider},
                                               depends_on=[cluster.addons["vpc-cni"]]))

    rec = record(program)
    rec.deployer_admin = deployer_admin  # type: ignore[attr-defined]
    return rec


@pytest.fixture(scope="module")
def rec():
    return build()


def eks(rec):
    return rec.one("aws:eks/cluster:Cluster")


def test_private_endpoint_only(rec):
    vpc = eks(rec).inputs()["vpcConfig"]
    assert vpc["endpointPrivateAccess"] is True and vpc["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in vpc
    assert vpc["subnetIds"] == ["subnet-a", "subnet-b", "subnet-c"]


def test_public_endpoint_only_with_allow_list():
    vpc = eks(build(("203.0.113.0/24",))).inputs()["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True and vpc["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_secrets_envelope_encrypted_with_cluster_key(rec):
    config = eks(rec).inputs()["encryptionConfig"]
    assert config["resources"] == ["secrets"] and config["provider"]["keyArn"] == SECRETS_KEY


def test_every_log_type_into_encrypted_group_created_first(rec):
    inputs = eks(rec).inputs()
    assert inputs["enabledClusterLogTypes"] == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    group = rec.one("aws:cloudwatch/logGroup:LogGroup")
    assert group.inputs()["name"] == "/aws/eks/mlplat-test/cluster"
    assert group.inputs()["kmsKeyId"] == LOGS_KEY and group.inputs()["retentionInDays"] == 365
    assert group.urn in eks(rec).dependencies


def test_cluster_settings(rec):
    inputs = eks(rec).inputs()
    assert inputs["name"] == "mlplat-test" and inputs["version"] == "1.34"
    assert inputs["accessConfig"]["authenticationMode"] == "API"
    assert inputs["bootstrapSelfManagedAddons"] is False
    assert inputs["upgradePolicy"]["supportType"] == "STANDARD"
    assert inputs["deletionProtection"] is True


def test_access_entries_from_config(rec):
    entries = {r.inputs()["principalArn"] for r in rec.of_type("aws:eks/accessEntry:AccessEntry")}
    assert entries == {DEPLOYER, BREAK_GLASS, ADMIN, VIEWER}
    associations = {(r.inputs()["principalArn"], r.inputs()["policyArn"].rsplit("/", 1)[-1],
                     r.inputs()["accessScope"]["type"])
                    for r in rec.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")}
    assert associations == {(DEPLOYER, "AmazonEKSClusterAdminPolicy", "cluster"),
                            (BREAK_GLASS, "AmazonEKSClusterAdminPolicy", "cluster"),
                            (ADMIN, "AmazonEKSClusterAdminPolicy", "cluster"), (VIEWER, "AmazonEKSViewPolicy", "cluster")}


def test_the_creator_gets_no_implicit_admin_and_an_existing_cluster_is_not_replaced(rec):
    cluster = eks(rec)
    assert cluster.inputs()["accessConfig"]["bootstrapClusterCreatorAdminPermissions"] is False
    # EKS reads the flag only at creation; a change would replace the cluster.
    assert cluster.ignore_changes == ["accessConfig.bootstrapClusterCreatorAdminPermissions"]


def test_the_deployer_is_made_admin_in_the_cloud_layer(rec):
    # The cluster layer's Kubernetes provider authenticates as the deployer role; the cloud
    # layer, applied first, makes it cluster admin and hands the association out.
    [deployer] = [r for r in rec.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
                  if r.inputs()["principalArn"] == DEPLOYER]
    assert rec.deployer_admin == [deployer.urn]
    assert deployer.inputs()["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    cloud = preview("prod")
    deployer_arn = next(r.inputs()["principalArn"]
                        for r in of_type(cloud, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
                        if r.inputs()["principalArn"].endswith(":role/mlplat-deployer"))
    assert any(r.inputs()["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
               and r.inputs()["accessScope"]["type"] == "cluster"
               for r in of_type(cloud, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
               if r.inputs()["principalArn"] == deployer_arn)


def test_the_cloud_layer_components_make_no_kubernetes_object(rec):
    assert not [r for r in rec.registrations
                if r.type.startswith("kubernetes:") or r.type == "pulumi:providers:kubernetes"]


def test_addons_pinned_from_versions(rec):
    addons = {r.inputs()["addonName"]: r for r in rec.of_type("aws:eks/addon:Addon")}
    assert set(addons) == set(EKS_ADDONS)
    for name, addon in addons.items():
        assert addon.inputs()["addonVersion"] == EKS_ADDONS[name].version


def test_cni_enforces_network_policies(rec):
    [cni] = [r for r in rec.of_type("aws:eks/addon:Addon") if r.inputs()["addonName"] == "vpc-cni"]
    assert json.loads(cni.inputs()["configurationValues"]) == {"enableNetworkPolicy": "true"}


def test_cni_and_ebs_csi_credentials_come_from_pod_identity(rec):
    addons = {r.inputs()["addonName"]: r for r in rec.of_type("aws:eks/addon:Addon")}
    for addon, service_account in (("vpc-cni", "aws-node"), ("aws-ebs-csi-driver", "ebs-csi-controller-sa")):
        [association] = addons[addon].inputs()["podIdentityAssociations"]
        assert association["serviceAccount"] == service_account
        role = rec.by_urn(addons[addon].property_dependencies["podIdentityAssociations"][0])
        assert "pods.eks.amazonaws.com" in role.inputs()["assumeRolePolicy"]
    agent = addons["eks-pod-identity-agent"].urn
    assert agent in addons["vpc-cni"].dependencies


def test_post_node_addons_wait(rec):
    addons = {r.inputs()["addonName"]: r for r in rec.of_type("aws:eks/addon:Addon")}
    cni = addons["vpc-cni"].urn
    assert cni in addons["coredns"].dependencies and cni in addons["aws-ebs-csi-driver"].dependencies


def test_kubernetes_provider_from_the_cluster():
    descriptor = preview("prod").stack_outputs[DESCRIPTOR]
    cluster = preview("prod-cluster")
    [provider] = of_type(cluster, "pulumi:providers:kubernetes")
    kubeconfig = json.loads(provider.inputs()["kubeconfig"])
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    assert server.endswith(".eks.amazonaws.com") and server == descriptor["endpoint"]
    assert kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"] == descriptor["certificateAuthority"]
    exec_ = kubeconfig["users"][0]["user"]["exec"]
    assert exec_["command"] == "aws"
    assert exec_["args"][:4] == ["eks", "get-token", "--cluster-name", descriptor["clusterName"]]
    assert provider.inputs()["enableServerSideApply"] in (True, "true")
    # Every Kubernetes object of the cluster layer goes through it.
    for reg in cluster.registrations:
        if reg.custom and reg.type.startswith("kubernetes:"):
            assert reg.provider_urn == provider.urn, reg.urn


def test_default_storage_class_encrypted_on_the_cluster_provider():
    descriptor = preview("prod").stack_outputs[DESCRIPTOR]
    cluster = preview("prod-cluster")
    [provider] = of_type(cluster, "pulumi:providers:kubernetes")
    [sc] = of_type(cluster, "kubernetes:storage.k8s.io/v1:StorageClass")
    assert sc.provider_urn == provider.urn
    inputs = sc.inputs()
    assert inputs["parameters"]["kmsKeyId"] == descriptor["keys"]["volumes"]
    assert inputs["parameters"]["encrypted"] == "true"
    assert inputs["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert inputs["reclaimPolicy"] == "Retain"
