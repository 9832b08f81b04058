"""IAM documents: trust policies and the few inline statements the platform grants."""

from __future__ import annotations

from typing import Any

# Managed policies a managed node group's instance role needs and nothing more: joining
# the cluster and pulling images. The VPC CNI's network permissions go to the CNI's own
# service account through Pod Identity, not to every pod on the node.
NODE_POLICIES: tuple[str, ...] = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)
CLUSTER_POLICIES: tuple[str, ...] = ("arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",)
CNI_POLICY = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
EBS_CSI_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def trust_policy(service: str, *, tag_session: bool = False,
                 condition: dict[str, Any] | None = None) -> dict[str, Any]:
    """Let one AWS service principal assume the role (on `condition`, where given)."""
    actions = ["sts:AssumeRole", "sts:TagSession"] if tag_session else ["sts:AssumeRole"]
    statement: dict[str, Any] = {"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}
    if condition:
        statement["Condition"] = condition
    return {"Version": "2012-10-17", "Statement": [statement]}


def pod_identity_trust_policy(account_id: str, namespace: str, service_account: str) -> dict[str, Any]:
    # EKS Pod Identity requires both actions. aws:SourceAccount keeps the service from
    # assuming the role for another account's cluster (confused deputy). The session tags
    # it passes name the pod's namespace and service account: the role is for that one
    # service account, whatever association someone makes for it elsewhere.
    return trust_policy(POD_IDENTITY_PRINCIPAL, tag_session=True, condition={"StringEquals": {
        "aws:SourceAccount": account_id,
        "aws:RequestTag/kubernetes-namespace": namespace,
        "aws:RequestTag/kubernetes-service-account": service_account,
    }})


def flow_log_trust_policy(account_id: str, region: str) -> dict[str, Any]:
    # Only this account's flow logs, in this region, may have the service assume the
    # role (confused deputy).
    return trust_policy("vpc-flow-logs.amazonaws.com", condition={
        "StringEquals": {"aws:SourceAccount": account_id},
        "ArnLike": {"aws:SourceArn": f"arn:aws:ec2:{region}:{account_id}:vpc-flow-log/*"},
    })


def policy(statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": statements}


def flow_log_statements(log_group_arn: str) -> list[dict[str, Any]]:
    """What the VPC flow-log service needs to write into one log group, nothing else."""
    return [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            "Resource": [log_group_arn, f"{log_group_arn}:*"],
        },
        {"Effect": "Allow", "Action": ["logs:DescribeLogGroups"], "Resource": "*"},
    ]


def ebs_kms_statements(key_arn: str) -> list[dict[str, Any]]:
    """The EBS CSI driver creates and attaches volumes encrypted with the volumes key."""
    return [
        {
            "Effect": "Allow",
            "Action": ["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"],
            "Resource": key_arn,
            "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        },
        {
            "Effect": "Allow",
            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
            "Resource": key_arn,
        },
    ]
