"""The in-VPC deploy runner as the cloud layer declares it: a token secret in the JSON form
and with the tags CodeBuild reads, a webhook that only the deploy workflow's jobs started by
the named GitHub users match, created only once the token is stored (GitHub refuses a
webhook without one, which stopped the first `pulumi up`), and an image that the job's
actions/setup-python has builds for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from components.specs import deploy_runner as spec
from infra import cli
from infra.config import load_stack
from infra.platform import build_platform
from tests.component.recorder import record
from tests.conftest import preview

WEBHOOK = "aws:codebuild/webhook:Webhook"
REPO = Path(__file__).resolve().parents[2]


def _of_type(result, kind: str) -> list:
    return [r for r in result.registrations if r.type == kind]


def test_the_webhook_takes_only_the_deploy_workflow_of_the_named_actors():
    [hook] = _of_type(preview("prod"), WEBHOOK)
    [group] = hook.inputs()["filterGroups"]
    filters = {f["type"]: f["pattern"] for f in group["filters"]}
    assert filters == {"EVENT": "WORKFLOW_JOB_QUEUED", "WORKFLOW_NAME": "^deploy$",
                       "ACTOR_ACCOUNT_ID": "^(1000001|1000002)$"}
    # CodeBuild matches patterns as regular expressions: anchored, so look-alikes fail.
    assert re.search(filters["WORKFLOW_NAME"], "deploy")
    for name in ("deploy-preview", "preview", "my deploy", "deploy2"):
        assert not re.search(filters["WORKFLOW_NAME"], name), name
    for actor in ("10000011", "1000003", "21000001"):
        assert not re.search(filters["ACTOR_ACCOUNT_ID"], actor), actor
    # The name it matches is the deploy workflow's (the run a reusable workflow's job runs in).
    deploy = yaml.safe_load((REPO / ".github" / "workflows" / "deploy.yml").read_text())
    assert deploy["name"] == spec.DEPLOY_WORKFLOW_NAME


def _filter_notes() -> dict[str, str]:
    """{filter type: where CodeBuild says it works}, from the CodeBuild API model that the
    pinned botocore ships (WebhookFilter.type's documentation)."""
    import botocore.loaders

    model = botocore.loaders.Loader().load_service_model("codebuild", "service-2")
    text = model["shapes"]["WebhookFilter"]["members"]["type"]["documentation"]
    kinds = model["shapes"]["WebhookFilterType"]["enum"]
    starts = sorted((m.start(), m.group(1)) for m in re.finditer(r"<li> <p>\s*([A-Z_]+)\s*</p>", text)
                    if m.group(1) in kinds)
    notes = {}
    for (start, kind), (end, _) in zip(starts, [*starts[1:], (len(text), "")]):
        found = re.search(r"<note>(.*?)</note>", text[start:end], re.S)
        notes[kind] = re.sub(r"<[^>]+>|\s+", " ", found.group(1)).strip() if found else ""
    return notes


def test_every_webhook_filter_is_one_codebuild_evaluates_for_workflow_job_events():
    """A filter CodeBuild does not evaluate for WORKFLOW_JOB_QUEUED would start no runner at
    all: HEAD_REF is documented for push and pull-request events only, which is why the
    branch (main) is held by the environments' deployment-branch rule and the deployer's
    trust (docs/bring-up.md), not by the webhook."""
    notes = _filter_notes()
    assert "push" in notes["HEAD_REF"] and "WORKFLOW_JOB_QUEUED" not in notes["HEAD_REF"], notes["HEAD_REF"]
    assert "WORKFLOW_JOB_QUEUED" in notes["WORKFLOW_NAME"]
    for kind in (f["type"] for f in spec.webhook_filters((1,)) if f["type"] != "EVENT"):
        note = notes[kind]
        assert not note.startswith("Works with") or "WORKFLOW_JOB_QUEUED" in note, (kind, note)


def test_without_the_token_the_first_up_creates_no_webhook_and_the_rest_of_the_runner():
    config = load_stack("prod")
    config = config.model_copy(update={"deploy_runner": config.deploy_runner.model_copy(
        update={"token_stored": False})})
    first = record(lambda _provider: build_platform(config), stack="prod")
    assert not _of_type(first, WEBHOOK)
    assert len(_of_type(first, "aws:codebuild/project:Project")) == 1
    assert len(_of_type(first, "aws:secretsmanager/secret:Secret")) >= 1


def test_the_token_secret_carries_the_tags_and_form_codebuild_reads():
    [secret] = [r for r in preview("prod").registrations
                if r.type == "aws:secretsmanager/secret:Secret" and r.inputs()["name"].endswith("/github-token")]
    tags = secret.inputs()["tags"]
    assert {k: tags[k] for k in spec.TOKEN_TAGS} == {"codebuild:source": "", "codebuild:source:type":
                                                     "personal_access_token", "codebuild:source:provider": "github"}
    assert json.loads(spec.token_secret_value("github_pat_x")) == {
        "ServerType": "GITHUB", "AuthType": "PERSONAL_ACCESS_TOKEN", "Token": "github_pat_x"}
    # The runbook stores the value in that form, never the raw token.
    runbook = (REPO / "docs" / "bring-up.md").read_text()
    assert '"ServerType":"GITHUB","AuthType":"PERSONAL_ACCESS_TOKEN","Token":' in runbook.replace(" ", "")


def test_the_runner_image_is_ubuntu_which_setup_python_has_builds_for():
    [project] = _of_type(preview("prod"), "aws:codebuild/project:Project")
    assert project.inputs()["environment"]["image"] == "aws/codebuild/standard:7.0"
    # The cluster job on it sets up Python with actions/setup-python.
    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "deploy-environment.yml").read_text())["jobs"]
    assert any(str(s.get("uses", "")).startswith("actions/setup-python@") for s in jobs["cluster"]["steps"])


def test_no_webhook_without_actors():
    with pytest.raises(ValueError, match="at least one actor id"):
        spec.webhook_filters(())


@pytest.mark.parametrize("actors, expected", [
    ("[]", "mlplat:deployRunner.actorIds: "),
    ("[0]", "list each GitHub user id (a positive number) once"),
    ("[5, 5]", "list each GitHub user id (a positive number) once"),
])
def test_a_runner_without_actors_is_refused_in_one_line(tmp_path, capsys, actors, expected):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (REPO / "stacks" / "Pulumi.dev.yaml").read_text()
    text = text.replace("actorIds: [1000001, 1000002]", f"actorIds: {actors}")
    (stacks / "Pulumi.dev.yaml").write_text(text)
    assert cli.main(["preview", "--stack", "dev", "--stacks-dir", str(stacks), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and expected in err, err
