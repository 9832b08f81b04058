"""The first bring-up of an environment, replayed in order from an empty account and an
empty state backend: `mlplat bootstrap` against moto's server (IAM, KMS, S3, STS), then
each layer's `mlplat deploy` as the deploy workflow calls it, the mirror between them
against two local registries, with the Pulumi CLI played by
a stand-in that refuses what the real CLI refuses (tests/fixtures/standin/pulumi_cli.py,
each refusal citing its source). The policy pack's environment is made for real (python
-m venv and pip, from the pack's requirements). The cluster layer's job runs as on a fresh
in-VPC runner without the internet: its tools come from the bundle the supply step put in
the state bucket (infra/runner_tools.py), fetched with the AWS CLI's `s3 cp` (played by
tests/fixtures/standin/aws_cli.py, with boto3 against moto), and pip has no index."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services.tracking import REGION, require_tracking, start_moto, stop_processes

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STANDIN = REPO / "tests" / "fixtures" / "standin" / "pulumi_cli.py"
AWS_STANDIN = REPO / "tests" / "fixtures" / "standin" / "aws_cli.py"
ACCOUNT = "123456789012"  # moto's account
SECRETS_PROVIDER = f"awskms://alias/mlplat-state-secrets?region={REGION}"


@pytest.fixture(scope="module")
def account():
    """An empty account on moto's server: (endpoint, environment for a client of it)."""
    require_tracking()
    processes: list[subprocess.Popen] = []
    # AWS's managed policies (AdministratorAccess) exist in every account; moto loads them
    # only when asked.
    endpoint = start_moto(processes, env={"MOTO_IAM_LOAD_MANAGED_POLICIES": "true"})
    try:
        yield endpoint, {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                         "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}
    finally:
        stop_processes(processes)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A clean checkout's project files (no policies/venv), a file backend, the stand-in."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copy(REPO / "Pulumi.yaml", root)
    shutil.copytree(REPO / "stacks", root / "stacks")
    shutil.copytree(REPO / "policies", root / "policies", ignore=shutil.ignore_patterns("venv", "__pycache__"))
    tools = tmp_path_factory.mktemp("tools")
    (tools / "pulumi").write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN} \"$@\"\n")
    (tools / "pulumi").chmod(0o755)
    # The CLI's language host sits beside it, as in the CLI's release archive (the stand-in
    # runs no program, so it is never started).
    (tools / "pulumi-language-python").write_text("#!/bin/sh\nexit 1\n")
    (tools / "pulumi-language-python").chmod(0o755)
    (tools / "aws").write_text(f"#!/bin/sh\nexec {sys.executable} {AWS_STANDIN} \"$@\"\n")
    (tools / "aws").chmod(0o755)
    state = tmp_path_factory.mktemp("state")
    return root, tools, state


def mlplat(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "mlplat"), *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)


def deploy_env(project, aws: dict[str, str], log: Path) -> dict[str, str]:
    root, tools, state = project
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "AWS_"))}
    return {**env, **aws, "PATH": f"{tools}:{env['PATH']}", "PULUMI_BACKEND_URL": f"file://{state}",
            "STANDIN_LOG": str(log)}


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line)["args"] for line in log.read_text().splitlines()] if log.exists() else []


def test_the_first_bring_up_of_an_environment_in_order(account, project, tmp_path, registries, monkeypatch, capsys):
    _endpoint, aws = account
    root, _tools, state = project
    log = tmp_path / "pulumi-calls.jsonl"
    env = deploy_env(project, aws, log)

    # Before the bootstrap: the first deploy stops where the real CLI would, at the secrets key.
    early = mlplat(root, env, "deploy", "--stack", "dev")
    assert early.returncode != 0
    assert "alias/mlplat-state-secrets" in early.stderr and "not found" in early.stderr.lower(), early.stderr
    assert not list(state.rglob("dev.json")), "no stack is left behind"

    # The bootstrap: everything created, then a second run creates nothing.
    first = mlplat(root, {**env, "STANDIN_LOG": "/dev/null"}, "bootstrap", "--account", ACCOUNT, "--region", REGION,
                   "--environment", "dev")
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("\ncreated  ") == 8, first.stdout
    again = mlplat(root, env, "bootstrap", "--account", ACCOUNT, "--region", REGION, "--environment", "dev")
    assert again.returncode == 0 and "\ncreated " not in again.stdout and again.stdout.count("\nexists ") == 8
    # The runner's tool bundles expire; nothing else in the state bucket does.
    import boto3

    s3 = boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"], region_name=REGION, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    [rule] = s3.get_bucket_lifecycle_configuration(Bucket=f"mlplat-state-{ACCOUNT}-{REGION}")["Rules"]
    assert rule["Filter"] == {"Prefix": "runner-tools/"} and rule["Status"] == "Enabled"
    assert rule["Expiration"]["Days"] >= 30, "longer than any deploy's run from its supply job to its cluster job"

    # A pull request's engine preview before the first deploy: nothing to compare, no stack made.
    log.unlink(missing_ok=True)
    preview = mlplat(root, env, "deploy", "--stack", "dev", "--preview")
    assert preview.returncode == 0, preview.stderr
    assert "not deployed yet" in preview.stdout and not list(state.rglob("dev.json"))

    # The cloud layer, then the cluster layer with the images the supply step recorded.
    log.unlink()
    cloud = mlplat(root, env, "deploy", "--stack", "dev")
    assert cloud.returncode == 0, cloud.stdout + cloud.stderr
    # The supply step between the layers: the mirror copies the plan by digest from upstream
    # into the in-region registry (here two local registries and a plan of one image).
    upstream, in_region = registries
    from infra import cli
    from infra.versions import Image
    from tests.services.oci import push_image

    plugin = push_image(tmp_path / "plugin", upstream, "nvidia/k8s-device-plugin:v0.19.3", "plugin")
    monkeypatch.setattr("infra.mirror.IMAGES", {"k8s-device-plugin": Image(
        "k8s-device-plugin", f"{upstream.host}/nvidia/k8s-device-plugin", "v0.19.3", plugin.digest)})
    monkeypatch.setattr("infra.mirror.CHARTS", {})
    assert cli.main(["mirror", "--stack", "dev", "--registry", in_region.host, "--plain-http", upstream.host,
                     "--plain-http", in_region.host]) == 0, capsys.readouterr().err
    copied = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                             f"docker://{in_region.host}/mlplat/dev/mirror/k8s-device-plugin:v0.19.3"],
                            capture_output=True, timeout=60)
    assert copied.returncode == 0 and f"sha256:{hashlib.sha256(copied.stdout).hexdigest()}" == plugin.digest
    # The supply step also bundles the cluster job's tools into the state bucket; the cluster
    # job, on a fresh runner (no pack environment yet) with no internet, runs from them alone.
    runner_env = runner_tools(root, env, tmp_path, f"s3://mlplat-state-{ACCOUNT}-{REGION}?region={REGION}")
    shutil.rmtree(root / "policies" / "venv")
    images = json.dumps({"trainer": "1.0-abc@sha256:" + "a" * 64})
    cluster = mlplat(root, runner_env, "deploy", "--stack", "dev-cluster", "--config",
                     f"mlplat:platformImages={images}")
    assert cluster.returncode == 0, cluster.stdout + cluster.stderr
    made = calls(log)
    assert made == [
        ["stack", "select", "--stack", "dev", "--non-interactive", "--create", "--secrets-provider", SECRETS_PROVIDER],
        ["up", "--stack", "dev", "--non-interactive", "--policy-pack", "policies", "--policy-pack-config",
         "policies/config/dev.json", "--yes"],
        ["stack", "select", "--stack", "dev-cluster", "--non-interactive", "--create", "--secrets-provider",
         SECRETS_PROVIDER],
        ["up", "--stack", "dev-cluster", "--non-interactive", "--policy-pack", "policies", "--policy-pack-config",
         "policies/config/dev.json", "--yes", "--config", f"mlplat:platformImages={images}"],
    ]
    # The pack's environment is real: the interpreter PulumiPolicy.yaml names runs the SDK.
    pack_python = root / "policies" / "venv" / "bin" / "python"
    assert subprocess.run([str(pack_python), "-c", "import pulumi_policy"], timeout=60).returncode == 0

    # The next deploy selects the stacks the first one made, with their secrets provider.
    log.unlink()
    assert mlplat(root, env, "deploy", "--stack", "dev").returncode == 0
    assert [c[:2] for c in calls(log)] == [["stack", "select"], ["up", "--stack"]]
    saved = json.loads(next(state.rglob("dev.json")).read_text())
    assert saved["checkpoint"]["secrets_providers"]["state"]["url"] == SECRETS_PROVIDER


def runner_tools(root: Path, env: dict[str, str], tmp_path: Path, backend: str) -> dict[str, str]:
    """The bundle packed and stored as the supply job does, fetched and unpacked as the
    cluster job does; the cluster job's environment from then on (pip without an index or
    the machine's pip config, the CLI and plugins from the bundle, no internet)."""
    tools = Path(env["PATH"].split(":", 1)[0])
    # moto denies every request to a bucket whose policy has a Deny with a condition, met or
    # not (moto 5.2.5, iam/access_control.py: a statement whose conditions do not match is
    # DENIED rather than not applying), so the state bucket's TLS-only policy comes off here;
    # the real IAM evaluator decides the deployer's reads and writes of runner-tools/ under
    # it (tests/iam/test_bootstrap_paths.py).
    import boto3

    bucket = backend.removeprefix("s3://").split("?", 1)[0]
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=REGION, aws_access_key_id="testing",
                 aws_secret_access_key="testing").delete_bucket_policy(Bucket=bucket)
    packed = subprocess.run([sys.executable, "-m", "infra.runner_tools", "pack", "--out", str(tmp_path / "out"),
                             "--stack", "dev-cluster", "--upload", backend], cwd=REPO,
                            env={**env, "STANDIN_LOG": os.devnull}, capture_output=True, text=True, timeout=600)
    assert packed.returncode == 0, packed.stderr
    digest = packed.stdout.strip()
    runner = tmp_path / "runner"
    runner.mkdir()
    assert not (tmp_path / "out" / "runner-tools.tar.gz").exists(), "stored, and gone from the packing disk"
    # As the job runs it: before any virtualenv, so with no site-packages (-S), the standard
    # library only.
    fetched = subprocess.run([sys.executable, "-S", "-m", "infra.runner_tools", "fetch", "--backend", backend,
                              "--sha256", digest, "--into", str(runner / "tools"), "--github-env",
                              str(runner / "env"), "--github-path", str(runner / "path")],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert fetched.returncode == 0, fetched.stderr
    assert not (runner / "tools" / "runner-tools.tar.gz").exists(), "the download is not left behind"
    exported = dict(line.split("=", 1) for line in (runner / "env").read_text().splitlines())
    base = ":".join(p for p in env["PATH"].split(":") if p != str(tools))
    offline = {**env, **exported, "PATH": f"{(runner / 'path').read_text().strip()}:{base}",
               "PIP_CONFIG_FILE": os.devnull, "STANDIN_NO_INTERNET": "1"}
    assert shutil.which("pulumi", path=offline["PATH"]).startswith(str(runner / "tools"))
    # make setup-core's install (pip install -e . of the checkout) resolves from the bundle
    # alone: the build backend and every dependency.
    closure = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                              "-e", str(REPO)], env=offline, capture_output=True, text=True, timeout=300)
    assert closure.returncode == 0, closure.stderr
    # Without the bundle's plugins the CLI would download them, and cannot.
    bare = subprocess.run(["pulumi", "up", "--stack", "dev", "--yes"], cwd=root, capture_output=True, text=True,
                          env={**offline, "PULUMI_HOME": str(tmp_path), "STANDIN_LOG": os.devnull}, timeout=60)
    assert bare.returncode != 0 and "lookup get.pulumi.com" in bare.stderr, bare.stderr
    return offline


def test_the_bundle_holds_the_providers_the_stacks_state_records(project, tmp_path, monkeypatch):
    """After a provider upgrade the stack's state still names the old provider, and `pulumi
    up` loads it: packed for that stack, the bundle holds it, and an offline `up` runs."""
    from infra.runner_tools import install_plugins

    root, tools, _state = project
    backend = tmp_path / "state"
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{backend}")
    monkeypatch.setenv("STANDIN_LOG", os.devnull)
    cli = str(tools / "pulumi")
    assert subprocess.run([cli, "stack", "select", "--stack", "staging-cluster", "--create", "--secrets-provider",
                           "passphrase"], cwd=root, env={**os.environ, "PULUMI_CONFIG_PASSPHRASE": "x"},
                          capture_output=True, timeout=60).returncode == 0
    saved = next(backend.rglob("staging-cluster.json"))
    state = json.loads(saved.read_text())
    state["checkpoint"]["latest"] = {"resources": [{"type": "pulumi:providers:aws", "inputs": {"version": "7.40.0"}}]}
    saved.write_text(json.dumps(state))

    home = install_plugins(root, cli, tmp_path / "home", ["staging-cluster", "prod-cluster"])  # prod: not made yet
    assert "resource-aws-v7.40.0" in home and any(p.startswith("resource-aws-v7.51") for p in home)
    offline = {**os.environ, "STANDIN_NO_INTERNET": "1"}
    up = ["up", "--stack", "staging-cluster", "--yes"]
    ran = subprocess.run([cli, *up], cwd=root, env={**offline, "PULUMI_HOME": str(tmp_path / "home")},
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    # Packed for the program alone, the old provider is missing and the offline `up` stops.
    install_plugins(root, cli, tmp_path / "bare", [])
    state["checkpoint"]["latest"] = {"resources": [{"type": "pulumi:providers:aws", "inputs": {"version": "7.40.0"}}]}
    saved.write_text(json.dumps(state))
    refused = subprocess.run([cli, *up], cwd=root, env={**offline, "PULUMI_HOME": str(tmp_path / "bare")},
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "resource-aws-v7.40.0" in refused.stderr, refused.stderr


def test_what_the_old_workflow_did_is_refused_by_the_stand_in(project, tmp_path, account):
    """`pulumi up --stack` on an empty backend, as pulumi/actions without upsert ran it."""
    _endpoint, aws = account
    root, tools, _state = project
    env = deploy_env(project, aws, tmp_path / "log.jsonl")
    done = subprocess.run([str(tools / "pulumi"), "up", "--stack", "staging", "--yes"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no stack named 'staging' found" in done.stderr


@pytest.mark.parametrize("change, expected", [
    ({"PULUMI_BACKEND_URL": ""}, "PULUMI_BACKEND_URL is not set: set it to the state bucket"),
    ({"PULUMI_BACKEND_URL": "https://api.pulumi.com"}, "PULUMI_BACKEND_URL is https://api.pulumi.com"),
])
def test_a_deploy_without_the_state_bucket_is_one_line(project, tmp_path, account, change, expected):
    _endpoint, aws = account
    root, _tools, _state = project
    done = mlplat(root, {**deploy_env(project, aws, tmp_path / "log.jsonl"), **change}, "deploy", "--stack", "dev")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert not (tmp_path / "log.jsonl").exists(), "the CLI was not called"


@pytest.mark.parametrize("provider, expected", [
    (None, "secretsprovider: not set; an AWS stack's secrets are encrypted with the state-secrets key"),
    ("passphrase", "secretsprovider: passphrase; an AWS stack's secrets"),
    ("awskms://alias/mlplat-state-secrets?region=us-east-1", "names region us-east-1, not the stack's me-central-1"),
])
def test_a_stack_file_without_an_in_region_key_is_refused(project, tmp_path, account, provider, expected):
    _endpoint, aws = account
    root, _tools, _state = project
    stacks = tmp_path / "stacks"
    shutil.copytree(root / "stacks", stacks)
    path = stacks / "Pulumi.staging.yaml"
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("secretsprovider:"))
    path.write_text((f"secretsprovider: {provider}\n" if provider else "") + text)
    done = mlplat(root, deploy_env(project, aws, tmp_path / "log.jsonl"), "deploy", "--stack", "staging",
                  "--stacks-dir", str(stacks))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr


@pytest.mark.parametrize("argv, expected", [
    (["--account", "12345", "--region", REGION, "--environment", "dev"], "--account '12345': an AWS account id is"),
    (["--account", "210987654321", "--region", REGION, "--environment", "dev"],
     "--account 210987654321: these credentials are of account 123456789012"),
    (["--account", ACCOUNT, "--region", "me-central-9", "--environment", "dev"], "--region 'me-central-9': not an AWS"),
    (["--account", ACCOUNT, "--region", "eu-west-1", "--environment", "dev"], "deploys to me-central-1, not eu-west-1"),
    (["--account", ACCOUNT, "--region", REGION, "--environment", "qa"], "unknown stack 'qa'"),
    (["--account", ACCOUNT, "--region", REGION], "--environment: name at least one environment"),
    (["--account", ACCOUNT, "--region", REGION, "--environment", "dev", "--repository", "not a repo"],
     "--repository 'not a repo': expected owner/name"),
])
def test_bootstrap_bad_input_is_one_line_and_creates_nothing(project, account, tmp_path, argv, expected):
    _endpoint, aws = account
    root, _tools, _state = project
    import boto3

    iam = boto3.client("iam", endpoint_url=aws["AWS_ENDPOINT_URL"], region_name=REGION,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    roles = sorted(r["RoleName"] for r in iam.list_roles()["Roles"])
    done = mlplat(root, deploy_env(project, aws, tmp_path / "log.jsonl"), "bootstrap", *argv)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert sorted(r["RoleName"] for r in iam.list_roles()["Roles"]) == roles


def test_the_mirror_logs_in_to_the_regions_eks_registry(account, monkeypatch, tmp_path):
    """The EFA device plugin is copied from EKS's registry in the region, which takes an ECR
    login: the mirror gets one from the deployer's AWS credentials, as `aws ecr
    get-login-password` would (here from moto's ECR)."""
    import base64

    from dataclasses import replace

    from infra.mirror import plan
    from infra.skopeo import Unreachable, auth_file, host_of
    from infra.versions import IMAGES, eks_registry

    _endpoint, aws = account
    host = eks_registry(REGION)
    images = [replace(IMAGES[name], digest="sha256:" + "a" * 64) for name in ("aws-efa-k8s-device-plugin", "pushgateway")]
    sources = {host_of(a.source) for a in plan("prod", REGION, f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com",
                                                 ["linux/amd64"], images=images, charts=[])}
    assert host in sources, "prod's plan copies the EFA plugin from the region's EKS registry"
    env = {**aws, "HOME": str(tmp_path)}  # no login on this machine
    for name, value in aws.items():
        monkeypatch.setenv(name, value)
    with auth_file(env=env, ecr_sources=sources) as path:
        auths = json.loads(path.read_text())["auths"]
    user, _, password = base64.b64decode(auths[host]["auth"]).decode().partition(":")
    assert user == "AWS" and password
    assert set(auths) == {h for h in sources if h.endswith(".amazonaws.com")}, "only ECR hosts get the ECR login"
    # Without AWS credentials: one line saying how to log in.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(Unreachable, match=rf"^{host}: no ECR login .*aws ecr get-login-password"):
        with auth_file(env=env, ecr_sources=[host]):
            pass
