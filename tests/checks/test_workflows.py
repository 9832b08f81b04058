"""The GitHub workflows users run: valid against GitHub's workflow schema, and clean under
zizmor's offline audits (findings fixed, or justified in .github/zizmor.yml)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def test_there_are_workflows():
    assert {p.name for p in WORKFLOWS} >= {"preview.yml", "deploy.yml"}


def test_workflows_match_the_github_schema():
    done = subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_offline_finds_nothing():
    done = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--no-progress", "--config", str(REPO / ".github" / "zizmor.yml"),
         str(REPO / ".github" / "workflows")],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_every_action_is_pinned_to_a_commit():
    for path in WORKFLOWS:
        for ref in re.findall(r"uses:\s*([^\s#]+)", path.read_text()):
            if ref.startswith("./.github/workflows/"):  # this repository's own, at the same commit
                assert (REPO / ref).is_file(), f"{path.name}: {ref}"
                continue
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", ref), f"{path.name}: {ref}"


# --- where each layer is applied from -----------------------------------------------------

GITHUB_HOSTED = re.compile(r"^(ubuntu|windows|macos)-", re.IGNORECASE)
# AWS's label for a CodeBuild-hosted runner: codebuild-<project>-<run id>-<attempt>.
IN_VPC = re.compile(r"^codebuild-mlplat-\$\{\{ *(inputs|matrix)\.environment *\}\}-deploy-"
                    r"\$\{\{ *github\.run_id *\}\}-\$\{\{ *github\.run_attempt *\}\}$")


def _engine_steps(job: dict) -> list[tuple[str, str]]:
    """(command, stack) of every step that runs the Pulumi engine on a stack."""
    found = []
    for step in job.get("steps") or []:
        if str(step.get("uses", "")).startswith("pulumi/actions@") and "command" in (step.get("with") or {}):
            found.append((str(step["with"]["command"]), str(step["with"]["stack-name"])))
        for match in re.finditer(r"pulumi (up|preview)\b.*--stack[ =](\S+)", str(step.get("run", ""))):
            found.append((match.group(1), match.group(2)))
        # `mlplat deploy` (infra/deploy.py): `pulumi up`, or `pulumi preview` with --preview.
        for match in re.finditer(r"mlplat deploy --stack (\S+)([^\n|]*)", str(step.get("run", ""))):
            stack = match.group(1).strip('"')
            for name, value in (step.get("env") or {}).items():
                stack = stack.replace(f"${name}", str(value))
            found.append(("preview" if "--preview" in match.group(2) else "up", stack))
    return found


def _jobs() -> list[tuple[str, str, dict]]:
    import yaml

    return [(path.name, name, job) for path in WORKFLOWS
            for name, job in (yaml.safe_load(path.read_text()).get("jobs") or {}).items()]


def test_every_cluster_layer_is_applied_and_engine_previewed_from_the_in_vpc_runner():
    cluster_jobs = []
    for workflow, name, job in _jobs():
        for command, stack in _engine_steps(job):
            if stack.endswith("-cluster"):
                cluster_jobs.append((workflow, name, command))
                runs_on = job.get("runs-on")
                assert isinstance(runs_on, str) and not GITHUB_HOSTED.match(runs_on), (workflow, name, runs_on)
                assert IN_VPC.match(runs_on), f"{workflow} job {name}: {runs_on} is not the in-VPC runner"
    # Only the deploy workflow: a pull request's workflow never runs on the in-VPC runner.
    assert {(w, n, c) for w, n, c in cluster_jobs} == {("deploy-environment.yml", "cluster", "up")}


def test_the_cloud_layer_is_applied_before_the_cluster_layer_in_every_environment():
    import yaml

    deploy = yaml.safe_load((REPO / ".github" / "workflows" / "deploy.yml").read_text())["jobs"]
    called = {name: job["with"]["environment"] for name, job in deploy.items()
              if str(job.get("uses", "")).endswith("deploy-environment.yml")}
    # Every AWS environment; a customer's cluster (onprem) is deployed from the customer's own
    # network (docs/onprem.md), never by this repository's workflows.
    from tests.conftest import CUSTOMER_STACKS

    assert sorted(called.values()) == sorted(p.name[len("Pulumi."):-len(".yaml")]
                                             for p in (REPO / "stacks").glob("Pulumi.*.yaml")
                                             if not p.name.endswith("-cluster.yaml")
                                             and p.name[len("Pulumi."):-len(".yaml")] not in CUSTOMER_STACKS)
    layers = yaml.safe_load((REPO / ".github" / "workflows" / "deploy-environment.yml").read_text())["jobs"]
    # cloud -> supply (mirror, platform images) -> cluster
    assert (layers["supply"]["needs"], layers["cluster"]["needs"]) == ("cloud", "supply")
    assert _engine_steps(layers["cloud"]) == [("up", "${{ inputs.environment }}")]
    assert GITHUB_HOSTED.match(layers["cloud"]["runs-on"])
    # One environment after the other, prod last (behind its approval).
    order, current = [], next(n for n, j in deploy.items() if j.get("needs") == "test" and n in called)
    while current:
        order.append(called[current])
        current = next((n for n, j in deploy.items() if j.get("needs") == current), None)
    assert order[-1] == "prod" and len(order) == len(called)


def test_the_supply_step_mirrors_and_builds_before_the_cluster_layer_reads_the_digests():
    import yaml

    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "deploy-environment.yml").read_text())["jobs"]
    supply = jobs["supply"]
    assert GITHUB_HOSTED.match(supply["runs-on"]) and _engine_steps(supply) == []
    runs = [str(step.get("run", "")) for step in supply["steps"]]
    [mirror] = [step for step in supply["steps"] if "mlplat mirror" in str(step.get("run", ""))]
    assert '--stack "$ENVIRONMENT"' in mirror["run"] and '--registry "$REGISTRY"' in mirror["run"]
    # Registry credentials come from the environment's secrets, never from the repository.
    assert mirror["env"]["NGC_API_KEY"] == "${{ secrets.NGC_API_KEY }}"
    build = next(step for step in supply["steps"] if step.get("id") == "build")
    assert "docker buildx build --push" in build["run"] and "BASE_IMAGE=" in build["run"]
    assert runs.index(mirror["run"]) < runs.index(build["run"])  # bases come from the mirror
    [up] = [step for step in jobs["cluster"]["steps"] if "mlplat deploy" in str(step.get("run", ""))]
    assert '--config "mlplat:platformImages=$PLATFORM_IMAGES"' in up["run"]
    assert up["env"]["PLATFORM_IMAGES"] == "${{ needs.supply.outputs.platform-images }}"


def test_every_engine_run_of_a_cluster_layer_names_the_platform_images():
    """The cluster layer refuses to run without mlplat:platformImages (infra/cluster_layer.py)."""
    runs = [(workflow, name, step) for workflow, name, job in _jobs() for step in job.get("steps") or []
            if any(stack.endswith("-cluster") for _, stack in _engine_steps({"steps": [step]}))]
    assert len(runs) == 1
    for workflow, name, step in runs:
        assert "--config \"mlplat:platformImages=$" in step["run"], (workflow, name)


def test_every_engine_run_goes_through_mlplat_deploy_with_the_state_bucket_and_no_passphrase():
    """The steps live in `mlplat deploy`, which runs the same outside GitHub (the bring-up
    rehearsal replays it): no engine run through pulumi/actions' own commands, which would
    not create a stack on first deploy, prepare the pack's environment or check the
    secrets provider; the state is the bootstrap's bucket; no passphrase anywhere."""
    engine_runs = 0
    for workflow, name, job in _jobs():
        for step in job.get("steps") or []:
            if str(step.get("uses", "")).startswith("pulumi/actions@"):
                assert set(step.get("with") or {}) <= {"pulumi-version"}, (workflow, name, step["with"])
            if "mlplat deploy" in str(step.get("run", "")):
                engine_runs += 1
                assert step["env"]["PULUMI_BACKEND_URL"] == "${{ vars.PULUMI_BACKEND_URL }}", (workflow, name)
    assert engine_runs == 3  # the cloud and cluster layers' up, the pull request's preview
    for path in WORKFLOWS:
        assert "PULUMI_CONFIG_PASSPHRASE" not in path.read_text(), path.name


def test_the_runner_label_names_the_project_the_cloud_layer_creates():
    from components.specs.deploy_runner import runs_on_label

    label = runs_on_label("mlplat-${{ inputs.environment }}")
    assert IN_VPC.match(label), label


# --- the pull request's preview: the base commit against the head ------------------------

def _offline_steps() -> list[dict]:
    import yaml

    return yaml.safe_load((REPO / ".github" / "workflows" / "preview.yml").read_text())["jobs"]["offline"]["steps"]


def _step(steps: list[dict], name: str) -> dict:
    return next(step for step in steps if step.get("name", "").startswith(name))


def test_the_pull_request_preview_compares_the_base_commit_with_the_head_offline():
    import yaml

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "preview.yml").read_text())
    job = workflow["jobs"]["offline"]
    steps = job["steps"]
    # Offline: no secret, no cloud identity, a token that can only read.
    assert "secrets." not in yaml.safe_dump(job) and "permissions" not in job
    assert workflow["permissions"] == {"contents": "read"}
    checkouts = [i for i, step in enumerate(steps) if str(step.get("uses", "")).startswith("actions/checkout@")]
    [base] = [i for i in checkouts if steps[i]["with"].get("ref") == "${{ github.event.pull_request.base.sha }}"]
    assert steps[base]["with"]["path"] == "base" and steps[base]["with"]["persist-credentials"] is False
    tests = steps.index(_step(steps, "Tests"))
    assert tests < base  # the tests never see the base's files
    base_preview = _step(steps, "Preview every environment at the base")
    assert base_preview["working-directory"] == "base" and steps.index(base_preview) > base
    assert "-m infra.cli preview $target" in base_preview["run"] and "--out ../out/base" in base_preview["run"]
    assert '"--env prod"' in base_preview["run"] and '"--stack onprem"' in base_preview["run"]
    head = _step(steps, "Preview every environment at the head")
    assert steps.index(head) > steps.index(base_preview)
    assert "--against out/base --detailed-exitcode" in head["run"]
    upload = _step(steps, "Keep the reports")
    assert "out/comment.md" in upload["with"]["path"] and upload["if"] == "always()"


STUB_MLPLAT = """#!/bin/bash
# preview --env ENV|--stack STACK --quiet --out out [--against out/base --detailed-exitcode]
env="$3"; against=0
for arg in "$@"; do [ "$arg" = --against ] && against=1; done
echo "$env $against" >> calls.log
code_name="CODE_${env}_${against}"; code="${!code_name:-0}"
if [ "$code" = 2 ]; then echo "mlplat: error: base report out/base/$env.json has no reportVersion" >&2; exit 2; fi
stacks="$env"; [ "$2" = --env ] && stacks="$env $env-cluster"
for stack in $stacks; do
  echo "report of $stack" > "out/$stack.md"
  if [ "$against" = 1 ]; then echo "### diff of $stack" > "out/$stack.diff.md"; fi
done
exit "$code"
"""


def _run_head_step(tmp_path: Path, **codes: int) -> tuple[subprocess.CompletedProcess, str, list[str]]:
    """The head step's script as GitHub runs it (bash -e), with a stand-in mlplat that
    writes reports and diffs and exits with CODE_<env>_<0|1 with --against>."""
    import os

    script = _step(_offline_steps(), "Preview every environment at the head")["run"]
    stub = tmp_path / ".venv" / "bin" / "mlplat"
    stub.parent.mkdir(parents=True)
    stub.write_text(STUB_MLPLAT)
    stub.chmod(0o755)
    summary = tmp_path / "summary.md"
    env = {**os.environ, "PR_NUMBER": "42", "BASE_SHA": "0123456789abcdef0123", "GITHUB_STEP_SUMMARY": str(summary),
           **{name: str(code) for name, code in codes.items()}}
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    comment = (tmp_path / "out" / "comment.md").read_text() if (tmp_path / "out" / "comment.md").exists() else ""
    calls = (tmp_path / "calls.log").read_text().splitlines()
    return done, comment, calls


def test_the_comment_is_the_diff_of_every_stack_summary_first(tmp_path):
    done, comment, calls = _run_head_step(tmp_path, CODE_dev_1=4, CODE_prod_1=0)
    assert done.returncode == 0, done.stderr  # 4: changes, not a failure
    assert calls == ["dev 1", "staging 1", "prod 1", "smb 1", "onprem 1"]
    assert comment.startswith("## Offline preview: what this pull request changes\n\n")
    assert "at the base 0123456789ab and at the head" in comment
    stacks = [line.removeprefix("### diff of ") for line in comment.splitlines() if line.startswith("### ")]
    assert stacks == ["dev", "dev-cluster", "staging", "staging-cluster", "prod", "prod-cluster", "smb", "smb-cluster",
                      "onprem"]
    assert "report of" not in comment  # the whole reports stay in the artifact
    assert (tmp_path / "out" / "pr-number").read_text() == "42\n"
    assert (tmp_path / "summary.md").read_text() == comment


def test_a_base_that_cannot_be_compared_falls_back_to_the_head_report_and_a_block_fails(tmp_path):
    done, comment, calls = _run_head_step(tmp_path, CODE_staging_1=2, CODE_smb_1=1)
    assert done.returncode == 1  # smb's head is blocked
    assert calls == ["dev 1", "staging 1", "staging 0", "prod 1", "smb 1", "onprem 1"]
    section = comment[comment.index("### `staging`"):comment.index("### diff of prod")]
    assert "### `staging`: no diff against the base" in section
    assert "mlplat: error: base report out/base/staging.json has no reportVersion" in section
    assert "<details><summary>The head's whole report</summary>" in section and "report of staging" in section
    assert "### diff of smb" in comment  # still commented on


def test_the_comment_workflow_runs_nothing_from_the_artifact():
    import yaml

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "preview-comment.yml").read_text())
    [job] = workflow["jobs"].values()
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    steps = job["steps"]
    assert not any(str(s.get("uses", "")).startswith("actions/checkout@") for s in steps)
    [post] = [s for s in steps if "run" in s]
    script = post["run"]
    # The artifact is read as text only: a PR number stripped to digits, and the body.
    assert "tr -cd '0-9' < report/pr-number" in script and '--body-file "$body"' in script
    for executes in ("bash report", "sh report", "source report", ". report", "python", "chmod"):
        assert executes not in script


# --- the deploy judges the registry's scan of every image before the cluster layer -------------

def _deploy_jobs() -> dict:
    import yaml

    return yaml.safe_load((REPO / ".github" / "workflows" / "deploy-environment.yml").read_text())["jobs"]


def _image_scan_step(jobs: dict) -> dict:
    [step] = [s for s in jobs["supply"]["steps"] if "tests.checks.registry_scan" in str(s.get("run", ""))]
    return step


def test_the_image_scan_is_judged_after_the_push_and_before_the_cluster_layer_is_applied():
    jobs = _deploy_jobs()
    supply = jobs["supply"]["steps"]
    scan = _image_scan_step(jobs)
    build = next(step for step in supply if step.get("id") == "build")
    [mirror] = [step for step in supply if "mlplat mirror" in str(step.get("run", ""))]
    # After every push: the mirror's copies and the platform images' builds.
    assert supply.index(mirror) < supply.index(build) < supply.index(scan)
    # It judges the images as the build just recorded them (the script, and what it does,
    # are tested against moto's ECR and a local registry: tests/services/test_registry_scan.py),
    # with the wait the environment allows, and writes the job summary; its exit code is the job's.
    assert scan["env"]["PLATFORM_IMAGES"] == "${{ steps.build.outputs.platform-images }}"
    script = scan["run"]
    for part in ('--stack "$ENVIRONMENT"', '--registry "$REGISTRY"', '--platform-images "$PLATFORM_IMAGES"',
                 '--wait-seconds "$SCAN_WAIT_SECONDS"', '--markdown out/image-scan.md', '>> "$GITHUB_STEP_SUMMARY"',
                 'exit "$code"'):
        assert part in script, part
    assert scan["env"]["SCAN_WAIT_SECONDS"].startswith("${{ vars.SCAN_WAIT_SECONDS")
    # A failure stops the job: nothing lets the step fail quietly, or skips it.
    assert "continue-on-error" not in scan and "if" not in scan and "continue-on-error" not in jobs["supply"]
    # Nothing after it in the supply job applies anything.
    assert all("pulumi" not in str(step) for step in supply[supply.index(scan):])
    # The cluster layer's `pulumi up` runs only in a job that needs the supply job.
    cluster_ups = [(name, job) for name, job in jobs.items() for command, stack in _engine_steps(job)
                   if command == "up" and stack.endswith("-cluster")]
    assert [name for name, _ in cluster_ups] == ["cluster"]
    needs = jobs["cluster"]["needs"]
    assert "supply" in ([needs] if isinstance(needs, str) else needs)
    assert "if" not in jobs["cluster"]  # never run when the supply job failed


def test_the_cluster_job_takes_its_tools_from_the_supply_jobs_bundle_and_nothing_from_the_internet():
    """The in-VPC runner's allow-list holds GitHub only (stacks/Pulumi.prod.yaml): the CLI,
    its plugins and every Python package come from the bundle (infra/runner_tools.py; the
    pack and the offline install are replayed in tests/services/test_bring_up.py)."""
    jobs = _deploy_jobs()
    supply, cluster = jobs["supply"]["steps"], jobs["cluster"]["steps"]
    [pack] = [s for s in supply if "infra.runner_tools pack" in str(s.get("run", ""))]
    def first(steps: list, found) -> int:
        return next(i for i, s in enumerate(steps) if found(s))

    cli = first(supply, lambda s: str(s.get("uses", "")).startswith("pulumi/actions@"))
    venv = first(supply, lambda s: "make setup-core" in str(s.get("run", "")))
    creds = first(supply, lambda s: "configure-aws-credentials" in str(s.get("uses", "")))
    # The CLI it bundles, the virtualenv whose packages name the plugins, and the deployer's
    # credentials (the state bucket, the cluster stack's state) come first.
    assert max(cli, venv, creds) < supply.index(pack)
    assert '--upload "$PULUMI_BACKEND_URL"' in pack["run"]
    # The cluster stack's recorded providers too: the job deploys that stack.
    assert '--stack "$ENVIRONMENT-cluster"' in pack["run"] and pack["env"]["ENVIRONMENT"] == "${{ inputs.environment }}"
    assert 'echo "digest=$digest" >> "$GITHUB_OUTPUT"' in pack["run"]
    assert pack["env"]["PULUMI_BACKEND_URL"] == "${{ vars.PULUMI_BACKEND_URL }}"
    assert jobs["supply"]["outputs"]["runner-tools"] == f"${{{{ steps.{pack['id']}.outputs.digest }}}}"
    [fetch] = [s for s in cluster if "infra.runner_tools fetch" in str(s.get("run", ""))]
    assert fetch["env"]["RUNNER_TOOLS"] == "${{ needs.supply.outputs.runner-tools }}"
    for part in ('--sha256 "$RUNNER_TOOLS"', '--backend "$PULUMI_BACKEND_URL"', '--github-env "$GITHUB_ENV"',
                 '--github-path "$GITHUB_PATH"'):
        assert part in fetch["run"], part
    at = cluster.index(fetch)
    python = first(cluster, lambda s: str(s.get("uses", "")).startswith("actions/setup-python@"))
    creds = first(cluster, lambda s: "configure-aws-credentials" in str(s.get("uses", "")))
    [setup] = [i for i, s in enumerate(cluster) if "make setup" in str(s.get("run", ""))]
    [engine] = [i for i, s in enumerate(cluster) if "mlplat deploy" in str(s.get("run", ""))]
    assert max(python, creds) < at < setup < engine
    # Nothing in the job fetches from elsewhere: no CLI installer, no index, no download.
    for step in cluster:
        assert not str(step.get("uses", "")).startswith("pulumi/actions@"), step
        for fetches in ("pip install", "curl", "wget", "get.pulumi.com", "apt-get", "--index-url"):
            assert fetches not in str(step.get("run", "")), (fetches, step)


def test_pins_are_resolved_on_a_schedule_where_registries_answer_and_come_as_a_pull_request():
    import yaml

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "pin.yml").read_text())
    # PyYAML reads the `on:` key as True.
    triggers = workflow.get("on") or workflow.get(True)
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    [job] = workflow["jobs"].values()
    assert GITHUB_HOSTED.match(job["runs-on"]), "the registries answer only from outside the VPC"
    runs = [str(step.get("run", "")) for step in job["steps"]]
    assert any(".venv/bin/mlplat pin" in run for run in runs)
    assert any("gh pr create --base main" in run for run in runs), "pins land through a reviewed pull request"
    assert _engine_steps(job) == []
