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
        if str(step.get("uses", "")).startswith("pulumi/actions@"):
            found.append((str(step["with"]["command"]), str(step["with"]["stack-name"])))
        for match in re.finditer(r"pulumi (up|preview)\b.*--stack[ =](\S+)", str(step.get("run", ""))):
            found.append((match.group(1), match.group(2)))
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
    assert {(w, n, c) for w, n, c in cluster_jobs} == {
        ("deploy-environment.yml", "cluster", "up"), ("preview.yml", "engine-cluster", "preview")}


def test_the_cloud_layer_is_applied_before_the_cluster_layer_in_every_environment():
    import yaml

    deploy = yaml.safe_load((REPO / ".github" / "workflows" / "deploy.yml").read_text())["jobs"]
    called = {name: job["with"]["environment"] for name, job in deploy.items()
              if str(job.get("uses", "")).endswith("deploy-environment.yml")}
    assert sorted(called.values()) == sorted(p.name[len("Pulumi."):-len(".yaml")]
                                             for p in (REPO / "stacks").glob("Pulumi.*.yaml")
                                             if not p.name.endswith("-cluster.yaml"))
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
    [up] = [step for step in jobs["cluster"]["steps"] if str(step.get("uses", "")).startswith("pulumi/actions@")]
    assert "mlplat:platformImages" in up["with"]["config-map"]
    assert "needs.supply.outputs.platform-images" in up["with"]["config-map"]


def test_every_engine_run_of_a_cluster_layer_names_the_platform_images():
    """The cluster layer refuses to run without mlplat:platformImages (infra/cluster_layer.py)."""
    runs = [(workflow, name, step) for workflow, name, job in _jobs() for step in job.get("steps") or []
            if str(step.get("uses", "")).startswith("pulumi/actions@")
            and str(step["with"]["stack-name"]).endswith("-cluster")]
    assert len(runs) == 2
    for workflow, name, step in runs:
        assert "'mlplat:platformImages': {value: '${{ " in step["with"].get("config-map", ""), (workflow, name)


def test_the_runner_label_names_the_project_the_cloud_layer_creates():
    from components.specs.deploy_runner import runs_on_label

    label = runs_on_label("mlplat-${{ inputs.environment }}")
    assert IN_VPC.match(label), label
