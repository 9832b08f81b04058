"""The preview diff as a pure function (infra/preview/diff.py): input paths, secrets,
resource options, verdict flips and the base report's checks, on small hand-made reports.
tests/stack/test_preview_diff.py runs it on real previews."""

from __future__ import annotations

import copy
import json

import pytest

from infra.preview.diff import (
    ABSENT,
    BaseReportError,
    PathChange,
    changed_paths,
    check_base_report,
    diff_json,
    diff_markdown,
    diff_reports,
    diff_text,
    read_base_report,
)
from infra.preview.report import REPORT_VERSION

BUCKET = "urn:pulumi:dev::mlplat::aws:s3/bucket:Bucket::data"
SECRET = "urn:pulumi:dev::mlplat::aws:secretsmanager/secretVersion:SecretVersion::token"
CHART = "urn:pulumi:dev::mlplat::kubernetes:helm.sh/v4:Chart::kueue"
DEPLOY = "urn:pulumi:dev::mlplat::kubernetes:helm.sh/v4:Chart$kubernetes:apps/v1:Deployment::kueue:kueue/manager"


def report(**changes) -> dict:
    """A small report of stack dev: a bucket, a secret, a chart and one of its objects."""
    data = {
        "reportVersion": REPORT_VERSION, "stack": "dev", "region": "me-central-1",
        "resources": [
            {"urn": BUCKET, "type": "aws:s3/bucket:Bucket", "name": "data", "parent": None, "region": "me-central-1",
             "provider": "p", "protect": True, "retainOnDelete": True,
             "inputs": {"bucket": "mlplat-dev-data", "tags": {"mlplat.io/owner": "a"}},
             "evidence": {"passed": ["aws-resources-in-allowed-regions"], "failed": []}},
            {"urn": SECRET, "type": "aws:secretsmanager/secretVersion:SecretVersion", "name": "token",
             "parent": None, "region": "me-central-1", "provider": "p", "protect": False, "retainOnDelete": False,
             "inputs": {"secretString": "[secret]"}, "evidence": {"passed": [], "failed": []}},
            {"urn": CHART, "type": "kubernetes:helm.sh/v4:Chart", "name": "kueue", "parent": None, "region": None,
             "provider": "k", "protect": False, "retainOnDelete": False, "inputs": {"version": "0.14.1"},
             "evidence": {"passed": [], "failed": []}},
            {"urn": DEPLOY, "type": "kubernetes:apps/v1:Deployment", "name": "kueue:kueue/manager", "parent": CHART,
             "region": None, "provider": "k", "protect": False, "retainOnDelete": False,
             "inputs": {"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "manager", "namespace": "kueue"},
                        "spec": {"template": {"spec": {"containers": [
                            {"name": "manager", "image": "kueue:v0.14.1", "env": [{"name": "A", "value": "1"}]}]}}}},
             "evidence": {"passed": ["k8s-images-pinned"], "failed": []}},
        ],
        "violations": [], "engineErrors": [], "advisories": [], "charts": [],
        "policies": [{"policy": "aws-resources-in-allowed-regions", "level": "mandatory", "checked": 2, "passed": 2,
                      "failed": 0},
                     {"policy": "k8s-images-pinned", "level": "mandatory", "checked": 1, "passed": 1, "failed": 0}],
        "summary": {"passed": True, "seconds": 1.0},
    }
    data.update(changes)
    return data


def resource(data: dict, urn: str) -> dict:
    return next(r for r in data["resources"] if r["urn"] == urn)


def test_paths_name_the_leaves_that_changed():
    before = {"a": {"b": 1, "c": [1, 2]}, "labels": {"mlplat.io/pool": "gpu"}, "gone": True}
    after = {"a": {"b": 2, "c": [1, 2, 3]}, "labels": {"mlplat.io/pool": "train"}, "new": "x"}
    assert changed_paths(before, after) == [
        PathChange("a.b", 1, 2), PathChange("a.c[2]", ABSENT, 3),
        PathChange('labels["mlplat.io/pool"]', "gpu", "train"),
        PathChange("gone", True, ABSENT), PathChange("new", ABSENT, "x"),
    ]


def test_named_lists_match_by_name_so_an_insert_is_one_change():
    before = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    after = {"env": [{"name": "NEW", "value": "0"}, {"name": "A", "value": "1"}, {"name": "B", "value": "3"}]}
    assert changed_paths(before, after) == [PathChange("env[name=B].value", "2", "3"),
                                            PathChange("env[name=NEW]", ABSENT, {"name": "NEW", "value": "0"})]


def test_a_type_change_is_a_change_even_where_python_calls_the_values_equal():
    assert changed_paths({"n": 1}, {"n": True}) == [PathChange("n", 1, True)]
    assert changed_paths({"n": 1}, {"n": 1}) == []
    # One number type on Pulumi's wire; key order is no change either.
    assert changed_paths({"n": 1, "m": [1]}, {"m": [1.0], "n": 1}) == []
    # A value that is one shared object on one side and two equal ones on the other is no
    # change (the fast comparison writes them differently), a true that became 1 deep down is.
    shared = {"a": [True, "x" * 40]}
    assert changed_paths({"x": shared, "y": shared}, {"x": {"a": [True, "x" * 40]}, "y": {"a": [True, "x" * 40]}}) == []
    assert changed_paths({"x": {"y": [shared]}}, {"x": {"y": [{"a": [1, "x" * 40]}]}}) == [
        PathChange("x.y[0].a[0]", True, 1)]


def test_a_report_against_itself_has_no_changes():
    diff = diff_reports(report(), copy.deepcopy(report()))
    assert not diff.changed
    assert diff.summary() == "dev: no changes; verdict passed"
    assert diff_text(diff) == "dev: no changes; verdict passed"
    assert diff_json(diff)["changed"] is False


def test_timings_and_registration_order_are_not_changes():
    head = report(summary={"passed": True, "seconds": 9.5})
    head["resources"].reverse()
    assert not diff_reports(report(), head).changed


def test_secrets_stay_masked_and_a_value_that_becomes_secret_shows_as_secret():
    base = report()
    resource(base, BUCKET)["inputs"]["bucket"] = "plain-name"
    head = report()
    resource(head, BUCKET)["inputs"]["bucket"] = "[secret]"
    diff = diff_reports(base, head)
    [change] = diff.resources
    assert change.paths == (PathChange("bucket", "plain-name", "[secret]"),)
    # The secret version's value changed too, but both reports hold only "[secret]".
    assert all(c.urn != SECRET for c in diff.resources)


def test_protect_and_retain_are_shown_as_options():
    head = report()
    resource(head, BUCKET).update(protect=False, retainOnDelete=False)
    [change] = diff_reports(report(), head).resources
    assert [(p.path, p.before, p.after) for p in change.options] == [("protect", True, False),
                                                                     ("retainOnDelete", True, False)]
    assert "protect (option): true -> false" in diff_text(diff_reports(report(), head))


def test_chart_objects_are_kubernetes_objects_named_by_kind_namespace_and_release():
    head = report()
    deployment = resource(head, DEPLOY)["inputs"]["spec"]["template"]["spec"]["containers"][0]
    deployment["image"] = "kueue:v0.14.2"
    resource(head, CHART)["inputs"]["version"] = "0.14.2"
    diff = diff_reports(report(), head)
    assert [c.urn for c in diff.resources] == [CHART]
    [obj] = diff.objects
    assert (obj.object, obj.release) == ("Deployment kueue/manager", "kueue")
    assert obj.paths == (PathChange("spec.template.spec.containers[name=manager].image", "kueue:v0.14.1",
                                    "kueue:v0.14.2"),)
    assert "Deployment kueue/manager (release kueue)" in diff_text(diff)


def test_a_verdict_flip_comes_first_in_the_comment():
    head = report(violations=[{"policy": "k8s-images-pinned", "level": "mandatory", "urn": DEPLOY,
                               "message": "Images are pinned by digest.\nkueue:v0.14.1 names no digest"}],
                  summary={"passed": False, "seconds": 1.0})
    head["policies"][1].update(passed=0, failed=1)
    resource(head, DEPLOY)["evidence"] = {"passed": [], "failed": ["k8s-images-pinned"]}
    diff = diff_reports(report(), head)
    assert [p.policy for p in diff.flips] == ["k8s-images-pinned"]
    markdown = diff_markdown(diff)
    lines = markdown.splitlines()
    assert lines[0] == "### ❌ `dev` (me-central-1)"
    assert lines[2] == "**dev: 0 to add, 1 to change, 0 to remove (1 of them Kubernetes objects); 1 policy verdict " \
                       "flipped; violations 1 new, 0 resolved; verdict passed → BLOCKED**"
    flips = markdown.index("Policy verdicts that flipped")
    assert flips < markdown.index("<details>")
    assert "k8s-images-pinned (mandatory): passed → FAILED" in markdown[flips:markdown.index("<details>")]
    # One line per violation, whatever the pack's message looks like.
    assert "Images are pinned by digest. kueue:v0.14.1 names no digest" in markdown
    assert "now fails k8s-images-pinned" in diff_text(diff)


def test_values_from_a_pull_request_cannot_break_out_of_the_comment():
    head = report()
    resource(head, BUCKET)["inputs"]["bucket"] = "</code></details><img src=x> @org/team"
    markdown = diff_markdown(diff_reports(report(), head))
    assert "<img" not in markdown and "&lt;img src=x&gt;" in markdown


def test_an_added_resource_carries_its_evidence():
    head = report()
    head["resources"].append({**copy.deepcopy(resource(head, BUCKET)), "urn": BUCKET + "2", "name": "data2"})
    diff = diff_reports(report(), head)
    [added] = diff.resources
    assert added.action == "added" and added.evidence["passed"] == ["aws-resources-in-allowed-regions"]
    assert "judged by 1 rule: 1 passed" in diff_markdown(diff)


def write(tmp_path, data, name="base.json") -> object:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize(("content", "expected"), [
    (report(stack="prod"), "is the preview of stack 'prod', not 'dev'"),
    (report(reportVersion=99), "is report version 99, and this mlplat reads version 1"),
    ({k: v for k, v in report().items() if k != "reportVersion"}, "has no reportVersion"),
    ('{"stack": "dev", ', "is not JSON (line 1, column 18"),
    ("[]", "is not an mlplat preview report"),
    (report(resources=[{"type": "x"}]), "is a damaged report"),
])
def test_a_bad_base_report_is_one_line_saying_what_and_how_to_fix(tmp_path, content, expected):
    with pytest.raises(BaseReportError) as caught:
        read_base_report(write(tmp_path, content), "dev")
    message = str(caught.value)
    assert expected in message and "\n" not in message
    assert "preview" in message  # how to get a good one


def test_binary_missing_and_folder_bases(tmp_path):
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    with pytest.raises(BaseReportError, match="is not JSON \\(not UTF-8 text\\)"):
        read_base_report(binary, "dev")
    with pytest.raises(BaseReportError, match="no such file"):
        read_base_report(tmp_path / "nope.json", "dev")
    with pytest.raises(BaseReportError, match="holds no dev.json"):
        read_base_report(tmp_path, "dev")
    write(tmp_path, report(), "dev.json")
    assert read_base_report(tmp_path, "dev")["stack"] == "dev"  # a folder `--out` wrote
    assert check_base_report(report(), "dev")["stack"] == "dev"


def test_a_large_diff_keeps_the_comment_short_and_says_where_the_rest_is():
    head = report()
    for i in range(300):
        head["resources"].append({**copy.deepcopy(resource(head, BUCKET)), "urn": f"{BUCKET}-{i}", "name": f"d{i}",
                                  "inputs": {"bucket": "x" * 500, "tags": {f"t{j}": str(j) for j in range(30)}}})
    diff = diff_reports(report(), head)
    markdown = diff_markdown(diff)
    assert len(markdown) < 7_500
    assert "more not shown here (the JSON diff lists every change" in markdown
    assert len(diff_json(diff)["resources"]) == 300
