"""The requests a change opens and closes (infra/preview/request_paths.py), on two small
reports of a stack with two tenants, decided by the real evaluator: a widened role opens
the other tenant's data and trips the verdict, a narrowed one closes its own and does not;
what cannot be decided is said and counted as broadening; a base from before reports kept
outputs is said once; and a hostile report's outputs never crash the reader."""

from __future__ import annotations

import copy
import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.checks.iam import evaluator
from infra.checks.iam.paths import DENIED
from infra.checks.iam.stack import from_report
from infra.preview import request_paths
from infra.preview.request_paths import path_diff
from infra.preview.security import security_diff, security_json, security_markdown

ACCOUNT = "111122223333"
DATASETS = "mlplat-t-datasets"
KEY = f"arn:aws:kms:me-central-1:{ACCOUNT}:key/datasets"


def _policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _reader(tenant: str, *resources: str) -> list[dict]:
    trust = _policy({"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                     "Action": ["sts:AssumeRole", "sts:TagSession"]})
    role = f"mlplat-t-{tenant}-reader"
    return [{"urn": f"urn:role:{tenant}", "type": "aws:iam/role:Role", "name": f"{tenant}-reader",
             "inputs": {"name": role, "assumeRolePolicy": trust}},
            {"urn": f"urn:policy:{tenant}", "type": "aws:iam/rolePolicy:RolePolicy", "name": f"{tenant}-reader",
             "inputs": {"role": role, "policy": _policy(
                 {"Effect": "Allow", "Action": "s3:GetObject", "Resource": list(resources)})}}]


def _owner_only(tenant: str, *more: str) -> dict:
    """A tenant's feature store is its reader's alone, whatever another principal's policy says."""
    return {"Sid": f"OnlyOwnerFeatures{tenant}", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": f"arn:aws:s3:::{DATASETS}/features/{tenant}/*",
            "Condition": {"ArnNotEquals": {"aws:PrincipalArn": [f"arn:aws:iam::{ACCOUNT}:role/mlplat-t-{tenant}-reader",
                                                                *more]}}}


def _with_bucket_policy(report: dict, *statements: dict) -> dict:
    report["resources"][0]["inputs"]["policy"] = json.dumps(
        {"Version": "2012-10-17", "Statement": [*json.loads(report["resources"][0]["inputs"]["policy"])["Statement"][:1],
                                                *statements]})
    return report


def _secret(tenant: str) -> str:
    return f"arn:aws:secretsmanager:me-central-1:{ACCOUNT}:secret:mlplat-t/tracking/{tenant}-abc123"


def _report(a: tuple[str, ...] = (f"arn:aws:s3:::{DATASETS}/a/*",),
            b: tuple[str, ...] = (f"arn:aws:s3:::{DATASETS}/b/*",)) -> dict:
    """A cloud layer of two tenants, a and b, each with a reader role on its own prefix."""
    tls = _policy({"Sid": "TlsOnly", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
                   "Resource": [f"arn:aws:s3:::{DATASETS}", f"arn:aws:s3:::{DATASETS}/*"],
                   "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
                  *(_owner_only(t) for t in "ab"))
    return {
        "stack": "t", "region": "me-central-1",
        "resources": [
            {"urn": "urn:bucket-policy", "type": "aws:s3/bucketPolicy:BucketPolicy", "name": "datasets",
             "inputs": {"bucket": DATASETS, "policy": tls}},
            {"urn": "urn:key", "type": "aws:kms/key:Key", "name": "keys-datasets",
             "inputs": {"policy": _policy({"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                                           "Action": "kms:*", "Resource": "*"})}},
            *_reader("a", *a), *_reader("b", *b)],
        "outputs": {"buckets": {"datasets": DATASETS}, "keys": {"datasets": KEY},
                    "clusterDescriptor": {"environment": "t", "accountId": ACCOUNT,
                                          "tracking": {"tenantSecretArns": {t: _secret(t) for t in "ab"}}}},
    }


def test_the_tenants_roles_are_found_and_each_other_tenants_data_is_expected_denied():
    stack = from_report(_report())
    assert stack.tenant_roles() == {"a": {"a-reader": "mlplat-t-a-reader"}, "b": {"b-reader": "mlplat-t-b-reader"}}


def test_nothing_changed_runs_no_evaluator(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("the evaluator ran for a change that touches no policy")

    monkeypatch.setattr(request_paths, "simulate", refuse)
    diff = path_diff(_report(), _report())
    assert diff.flips == [] and diff.compared == 0 and diff.resolved > 0 and not diff.note


def test_a_role_widened_to_the_bucket_opens_the_other_tenants_data_and_broadens():
    head = _report(a=(f"arn:aws:s3:::{DATASETS}/*",))
    diff = path_diff(_report(), head)
    opened = [f.line() for f in diff.opened]
    # Its own feature store, and b's datasets; not b's feature store, which b's owner-only
    # Deny in the bucket policy keeps to b's reader.
    assert opened == ["a-reader → s3:GetObject datasets/features/a/registry.pb",  # its own: compared only
                      "a-reader → s3:GetObject datasets/b/tokens/shard-0001.bin"], opened
    assert [f.path.expect for f in diff.opened] == ["", DENIED]
    assert {f.before for f in diff.opened} == {"ImplicitlyDenied"}
    assert diff.closed == [] and diff.unjudged == 0
    security = security_diff(_report(), head)
    assert security.broadening and "opens 2 request paths" in security.summary()
    shown = "\n".join(security_markdown(security))
    assert "`a-reader`" in shown and "`s3:GetObject datasets/b/tokens/shard-0001.bin`" in shown
    assert security_json(security)["paths"]["flips"][0]["change"] == "opens"


def test_a_role_narrowed_closes_its_own_paths_and_does_not_broaden():
    head = _report(a=(f"arn:aws:s3:::{DATASETS}/a/train/*",))
    diff = path_diff(_report(), head)
    assert [f.line() for f in diff.closed] == ["a-reader → s3:GetObject datasets/a/tokens/shard-0001.bin"]
    assert diff.opened == []
    assert not security_diff(_report(), head).broadening


def test_a_new_tenant_role_opens_its_own_paths_from_absent():
    base = _report()
    base["resources"] = [r for r in base["resources"] if not r["urn"].endswith(":b")]
    base["outputs"]["clusterDescriptor"]["tracking"]["tenantSecretArns"] = {"a": _secret("a")}
    diff = path_diff(base, _report())
    assert [(f.line(), f.before) for f in diff.opened] == [
        ("b-reader → s3:GetObject datasets/b/tokens/shard-0001.bin", "absent")]
    assert diff.unjudged == 0


def test_without_the_evaluator_a_changed_path_is_unjudged_and_broadens(monkeypatch, tmp_path):
    monkeypatch.setattr(evaluator, "INSTALLED", tmp_path / "missing")
    head = _report(a=(f"arn:aws:s3:::{DATASETS}/a/train/*",))  # narrower: only the evaluator could tell
    diff = path_diff(_report(), head)
    assert diff.unjudged > 0 and "npm ci --prefix infra/checks/iam" in diff.note
    security = security_diff(_report(), head)
    assert security.broadening and "request paths not decided" in security.summary()


def test_a_base_from_before_outputs_were_kept_is_said_and_not_judged():
    base = _report()
    del base["outputs"]
    diff = path_diff(base, _report(a=(f"arn:aws:s3:::{DATASETS}/*",)))
    assert diff.flips == [] and diff.unjudged == 0 and "carries no stack outputs" in diff.note


def test_a_policy_that_is_not_a_document_is_unjudged_not_skipped():
    head = _report()
    head["resources"][3]["inputs"]["policy"] = "[secret]"  # a masked policy: what it allows cannot be read
    diff = path_diff(_report(), head)
    assert diff.unjudged == 1 and "a-reader: not a policy document" in diff.note
    assert security_diff(_report(), head).broadening


def test_a_cluster_layer_has_no_paths():
    cluster = {"stack": "t-cluster", "region": "me-central-1", "resources": [], "outputs": {}}
    diff = path_diff(cluster, cluster)
    assert (diff.resolved, diff.note, diff.unjudged) == (0, "", 0)


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(part=st.sampled_from(["buckets", "keys", "clusterDescriptor", "tracking", "users", "environment"]),
       value=_JSON)
def test_outputs_of_any_shape_are_read_without_a_crash(part, value):
    report = _report()
    outputs = report["outputs"]
    descriptor = outputs["clusterDescriptor"]
    if part in ("buckets", "keys", "clusterDescriptor"):
        outputs[part] = value
    elif part == "tracking":
        descriptor["tracking"] = value
    elif part == "users":
        descriptor["features"] = {"users": value}
    else:
        descriptor["environment"] = value
    # The evaluator's answers are beside the point here (each example would start Node).
    saved = request_paths.simulate
    request_paths.simulate = lambda requests, timeout=0: {k: {"result": "ImplicitlyDenied"} for k, _ in requests}
    try:
        diff = path_diff(_report(), copy.deepcopy(report))
    finally:
        request_paths.simulate = saved
    assert diff.unjudged >= 0 and isinstance(diff.summary(), str)


@pytest.mark.parametrize("broken", ["{", "[]", "1"])
def test_a_damaged_bucket_policy_names_the_resource(broken):
    head = _report()
    head["resources"][0]["inputs"]["policy"] = broken
    assert "datasets: not a policy document" in path_diff(_report(), head).note


def test_a_report_naming_thousands_of_tenants_is_bounded_and_unjudged():
    """A hostile report: 300 tenants and a role for each would be 720,000 generated paths."""
    head = _report()
    tenants = [f"t{i}" for i in range(300)]
    head["outputs"]["clusterDescriptor"]["tracking"]["tenantSecretArns"] = {t: _secret("a") for t in tenants}
    head["resources"] += [r for t in tenants for r in _reader(t, f"arn:aws:s3:::{DATASETS}/{t}/*")]
    started = time.perf_counter()
    diff = path_diff(_report(), head)
    assert time.perf_counter() - started < 30
    assert diff.unjudged >= 1 and "past the diff's limit of 20000" in diff.note


DEVELOPER = f"arn:aws:iam::{ACCOUNT}:role/developer"


def test_an_account_role_let_past_a_tenants_owner_only_deny_opens_its_feature_store():
    """The exception list of an owner-only Deny grows by one role: the grants call it covered
    no more, and the account role's request on the tenant's feature store opens."""
    head = _with_bucket_policy(_report(), _owner_only("a", DEVELOPER), _owner_only("b"))
    diff = path_diff(_report(), head)
    opened = [(f.principal, f.line().split(" → ")[1]) for f in diff.opened]
    assert (DEVELOPER, "s3:GetObject datasets/features/a/registry.pb") in opened, opened
    assert not [o for o in opened if "/b/" in o[1]], opened
    assert security_diff(_report(), head).broadening


def test_a_second_policy_resource_on_a_bucket_is_unjudged():
    head = _report()
    head["resources"].insert(0, {**head["resources"][0], "urn": "urn:bucket-policy-2", "name": "datasets-open",
                                 "inputs": {"bucket": DATASETS, "policy": _policy(
                                     {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                      "Resource": f"arn:aws:s3:::{DATASETS}/*"})}})
    diff = path_diff(_report(), head)
    assert diff.unjudged == 1 and "more than one policy resource" in diff.note
    assert security_diff(_report(), head).broadening


@pytest.mark.parametrize("change", ["bucket renamed", "keys emptied"])
def test_the_heads_outputs_cannot_switch_paths_off(change):
    """A widened role, hidden behind outputs that no longer name what the paths ask for."""
    head = _report(a=(f"arn:aws:s3:::{DATASETS}/*",))
    if change == "bucket renamed":
        head["outputs"]["buckets"]["datasets"] += "-x"
    else:
        head["outputs"]["keys"] = []
    diff = path_diff(_report(), head)
    assert diff.unjudged > 0 and diff.closed == [], diff.summary()
    assert security_diff(_report(), head).broadening


def test_a_grant_this_reader_does_not_resolve_is_unjudged_when_it_changes():
    head = _report()
    role = head["resources"][2]
    role["inputs"] = {**role["inputs"], "inlinePolicies": [{"name": "more", "policy": _policy(
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{DATASETS}/b/*"})}]}
    diff = path_diff(_report(), head)
    assert diff.unjudged == 1 and "aws:iam/role:Role a-reader" in diff.note
    assert path_diff(head, copy.deepcopy(head)).unjudged == 0  # the same on both sides: nothing to review


@pytest.mark.parametrize("policy", ["[" * 100_000, '{"Version": ' + "9" * 5_000 + "}", "{" + " " * (200 << 10) + "}"])
def test_a_hostile_policy_document_is_unjudged_not_a_crash(policy):
    head = _report()
    head["resources"][0]["inputs"]["policy"] = policy
    diff = path_diff(_report(), head)
    assert diff.unjudged == 1 and "datasets:" in diff.note


def test_a_role_name_past_iams_limit_is_no_tenants_and_costs_nothing():
    head = _report()
    head["resources"][2]["inputs"]["name"] = "mlplat-t-" + "-" * 400_000
    started = time.perf_counter()
    assert from_report(head).tenant_roles() == {"a": {}, "b": {"b-reader": "mlplat-t-b-reader"}}
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(("said", "expected"), [("process.stdout.write('not json')", "not JSON"),
                                                ("process.stdout.write('[{\"id\": 1}]')", None),
                                                ("process.exit(3)", "failed")])
def test_an_evaluator_that_answers_wrong_leaves_the_paths_unjudged(monkeypatch, tmp_path, said, expected):
    """An answer that is not JSON, or names no request, or a crash: unjudged, never a traceback."""
    script = tmp_path / "simulate.mjs"
    script.write_text(said + ";\n")
    monkeypatch.setattr(evaluator, "SCRIPT", script)
    diff = path_diff(_report(), _report(a=(f"arn:aws:s3:::{DATASETS}/*",)))
    assert diff.unjudged > 0 and diff.flips == []
    assert expected is None or expected in diff.note, diff.note
