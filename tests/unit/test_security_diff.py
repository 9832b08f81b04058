"""What counts as broadening access (infra/preview/security.py), rule by rule: for each, the
look-alike that only narrows and the trick that widens; and a hostile base report's inputs
never crash the reader."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.preview.security import MASKED, grants, security_diff

BUCKET = "arn:aws:s3:::data"


def _report(*resources: tuple[str, str, dict]) -> dict:
    return {"resources": [{"urn": f"urn:{t}::{n}", "type": t, "name": n, "inputs": i} for t, n, i in resources]}


def _policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _role_policy(*statements: dict) -> tuple[str, str, dict]:
    return ("aws:iam/rolePolicy:RolePolicy", "reader", {"role": "reader", "policy": _policy(*statements)})


def _allow(action="s3:GetObject", resource=f"{BUCKET}/research/*", **extra) -> dict:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def _broadens(before: list, after: list) -> bool:
    return security_diff(_report(*before), _report(*after)).broadening


def test_iam_actions_resources_and_conditions():
    base = [_role_policy(_allow(action="s3:Get*", Condition={"StringEquals": {"aws:PrincipalTag/tenant": "research"}}))]
    narrower = [
        _allow(action="S3:GETOBJECT", Condition={"StringEquals": {"aws:PrincipalTag/tenant": "research"}}),
        _allow(action="s3:GetObject", resource=f"{BUCKET}/research/train/*",
               Condition={"StringEquals": {"aws:PrincipalTag/tenant": "research"}, "Bool": {"aws:SecureTransport": "true"}}),
    ]
    for statement in narrower:
        assert not _broadens(base, [_role_policy(statement)]), statement
    wider = [
        _allow(action="s3:*", Condition={"StringEquals": {"aws:PrincipalTag/tenant": "research"}}),
        _allow(action="s3:GetObject", resource=f"{BUCKET}/research*",  # a prefix, not the folder: research-old/
               Condition={"StringEquals": {"aws:PrincipalTag/tenant": "research"}}),
        _allow(action="s3:GetObject"),  # the condition dropped
        _allow(action="s3:GetObject", Condition={"StringEquals": {"aws:PrincipalTag/tenant": ["research", "analytics"]}}),
        {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"},
    ]
    for statement in wider:
        assert _broadens(base, [_role_policy(statement)]), statement


def test_resource_policies_by_principal():
    def bucket_policy(*statements):
        return ("aws:s3/bucketPolicy:BucketPolicy", "data", {"bucket": "data", "policy": _policy(*statements)})

    root = {"AWS": "arn:aws:iam::111122223333:root"}
    base = [bucket_policy(_allow(Principal=root))]
    assert not _broadens(base, [bucket_policy(_allow(Principal=root, Condition={"Bool": {"aws:SecureTransport": "true"}}))])
    assert _broadens(base, [bucket_policy(_allow(Principal="*"))])
    assert _broadens(base, [bucket_policy(_allow(Principal={"AWS": "arn:aws:iam::999999999999:root"}))])
    # The same grant moved into a second policy of the same bucket is no new access.
    split = [bucket_policy(), ("aws:s3/bucketPolicy:BucketPolicy", "again",
                               {"bucket": "data", "policy": _policy(_allow(Principal=root))})]
    assert not _broadens(base, split)


def test_a_deny_removed_or_narrowed_broadens_and_one_added_does_not():
    deny = {"Effect": "Deny", "Action": "s3:*", "Resource": f"{BUCKET}/*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
    allow = _allow()
    assert _broadens([_role_policy(allow, deny)], [_role_policy(allow)])
    assert _broadens([_role_policy(allow, deny)], [_role_policy(allow, {**deny, "Resource": f"{BUCKET}/research/*"})])
    assert not _broadens([_role_policy(allow)], [_role_policy(allow, deny)])
    assert not _broadens([_role_policy(allow, {**deny, "Resource": f"{BUCKET}/research/*"})],
                         [_role_policy(allow, deny)])


def test_a_deny_that_excepts_one_principal_more_broadens_and_one_fewer_does_not():
    """A negated condition matches more the fewer values it lists: a Deny whose exception list
    grows applies to fewer principals (the bucket's owner-only Denies)."""
    def owner_only(*arns):
        return ("aws:s3/bucketPolicy:BucketPolicy", "data", {"bucket": "data", "policy": _policy(
            {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": f"{BUCKET}/runs/*",
             "Condition": {"ArnNotEquals": {"aws:PrincipalArn": list(arns)}}})})

    owner, developer = "arn:aws:iam::111122223333:role/owner", "arn:aws:iam::111122223333:role/developer"
    assert _broadens([owner_only(owner)], [owner_only(owner, developer)])
    assert _broadens([owner_only(owner)], [owner_only(owner, "arn:aws:iam::111122223333:role/*")])
    assert not _broadens([owner_only(owner, developer)], [owner_only(owner)])
    # The same holds for an Allow: StringNotEquals with fewer values allows more.
    narrow = _allow(Condition={"StringNotEquals": {"aws:PrincipalTag/tenant": ["applied", "serving"]}})
    wide = _allow(Condition={"StringNotEquals": {"aws:PrincipalTag/tenant": ["applied"]}})
    assert _broadens([_role_policy(narrow)], [_role_policy(wide)])
    assert not _broadens([_role_policy(wide)], [_role_policy(narrow)])


def test_security_group_rules_by_port_and_network():
    def group(*rules):
        return ("aws:ec2/securityGroup:SecurityGroup", "sg", {"ingress": [
            {"protocol": p, "fromPort": low, "toPort": high, "cidrBlocks": [cidr]} for p, low, high, cidr in rules]})

    base = [group(("tcp", 1000, 2000, "10.0.0.0/16"))]
    assert not _broadens(base, [group(("tcp", 1500, 1600, "10.0.4.0/24"))])
    assert not _broadens(base, [group(("6", 1000, 2000, "10.0.0.0/16"))])  # tcp by number
    assert _broadens(base, [group(("tcp", 1000, 2001, "10.0.0.0/16"))])
    assert _broadens(base, [group(("tcp", 1000, 2000, "10.0.0.0/8"))])
    assert _broadens(base, [group(("udp", 1000, 2000, "10.0.0.0/16"))])
    assert _broadens(base, [group(("-1", 0, 0, "10.0.0.0/16"))])
    # A rule of its own resource, on the same group, is judged against the group's rules.
    rule = ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "r",
            {"securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 1200, "toPort": 1200, "cidrIpv4": "10.0.9.0/24"})
    wide_rule = ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "w",
                 {"securityGroupId": "sg-1", "ipProtocol": "-1", "cidrIpv4": "10.0.0.0/16"})
    assert not _broadens([wide_rule], [wide_rule, rule])
    assert _broadens([], [rule])


def test_rbac_rules_and_subjects():
    def role(*rules):
        return ("kubernetes:rbac.authorization.k8s.io/v1:Role", "dev",
                {"kind": "Role", "metadata": {"name": "dev", "namespace": "research"}, "rules": list(rules)})

    def binding(*groups):
        return ("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", "dev",
                {"kind": "RoleBinding", "metadata": {"name": "dev", "namespace": "research"},
                 "roleRef": {"kind": "Role", "name": "dev"}, "subjects": [{"kind": "Group", "name": g} for g in groups]})

    base = [role({"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["*"]}), binding("developers")]
    assert not _broadens(base, [role({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}),
                                binding("developers")])
    assert _broadens(base, [role({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}), binding("developers")])
    assert _broadens(base, [base[0], binding("developers", "contractors")])
    named = role({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["jobs"]})
    assert _broadens([named], [role({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})])


def test_pod_settings_and_a_masked_policy():
    def deployment(**pod):
        return ("kubernetes:apps/v1:Deployment", "d", {"kind": "Deployment", "metadata": {"name": "d", "namespace": "t"},
                                                       "spec": {"template": {"spec": {"containers": [{"name": "c"}],
                                                                                      **pod}}}})

    assert _broadens([deployment()], [deployment(hostNetwork=True)])
    assert _broadens([deployment()], [deployment(volumes=[{"name": "root", "hostPath": {"path": "/"}}])])
    assert not _broadens([deployment(hostNetwork=True)], [deployment()])
    secret = ("aws:iam/rolePolicy:RolePolicy", "reader", {"role": "reader", "policy": MASKED})
    assert _broadens([_role_policy(_allow())], [secret])  # what it allows cannot be read


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                    max_leaves=20)
TYPES = st.sampled_from(["aws:iam/role:Role", "aws:iam/rolePolicy:RolePolicy", "aws:ec2/securityGroup:SecurityGroup",
                         "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "aws:eks/accessEntry:AccessEntry",
                         "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
                         "kubernetes:networking.k8s.io/v1:NetworkPolicy", "kubernetes:apps/v1:Deployment"])
KEYS = st.sampled_from(["policy", "assumeRolePolicy", "ingress", "egress", "rules", "subjects", "roleRef", "spec",
                        "kind", "inlinePolicies", "fromPort", "cidrIpv4", "role"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(resource_type=TYPES, inputs=st.dictionaries(KEYS, JSON | st.builds(json.dumps, JSON), max_size=6),
       statements=st.lists(JSON, max_size=3))
def test_any_inputs_a_base_report_holds_are_read_without_crashing(resource_type, inputs, statements):
    inputs = {**inputs, "extra": json.dumps({"Statement": statements})}
    resource = {"urn": "urn:x", "type": resource_type, "name": "x", "inputs": inputs}
    grants(resource)
    security_diff({"resources": [resource]}, {"resources": []})


def test_a_flood_of_grants_is_not_judged_but_counted_as_widening():
    """A base or head with more grants than the diff reads, or more comparisons than it makes,
    does not hang it or hide a grant in the flood: what is left unjudged counts as widening."""
    import time

    flood = [_allow(resource=f"{BUCKET}/research/{i}/*") for i in range(1_900)]
    roles = [("aws:iam/rolePolicy:RolePolicy", f"p{n}", {"role": "reader", "policy": _policy(*flood)})
             for n in range(30)]  # 57,000 statements on one role
    started = time.perf_counter()
    diff = security_diff(_report(*roles), _report(*roles, _role_policy(_allow(resource=f"{BUCKET}/analytics/*"))))
    assert time.perf_counter() - started < 30
    assert diff.broadening and diff.unjudged > 0 and "review by hand" in diff.summary()
