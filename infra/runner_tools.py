"""The cluster job's tools, bundled where the internet is reachable and unpacked inside the
VPC, so the in-VPC deploy runner needs nothing from the internet but GitHub.

The cluster layer's job runs on the environment's CodeBuild runner
(components/deploy_runner.py), whose only way out of a restricted environment is the
allow-list (docs/bring-up.md). Without this bundle the job would take the Pulumi CLI from
get.pulumi.com, its plugins from there or GitHub, and the Python environment from PyPI,
and each of those would have to be on the list. The supply job, on a GitHub-hosted runner,
packs instead:

- wheels/: every wheel that `make setup-core` and the policy pack's environment install
  (pyproject's dependencies and build requirement, policies/requirements.txt), binary
  wheels for the runner's platform and Python only, so both install with PIP_NO_INDEX and
  nothing is compiled on the runner;
- pulumi/: the Pulumi CLI's files (the CLI and its Python language host, which also runs
  the policy pack);
- home/plugins/: the resource plugins the program needs, as `pulumi plugin install` puts
  them in a PULUMI_HOME of its own, and those the stack's state records (an upgrade leaves
  the old provider in the state, and `pulumi up` loads it), so `pulumi up` downloads none;
  PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION makes a missing one fail the job instead.

The bundle goes into the state bucket under its digest (runner-tools/sha256-<hex>.tar.gz:
in-region, the deployer's, reached through the S3 gateway endpoint), the supply job
passes that digest to the cluster job, and the cluster job fetches it, checks the digest
before anything is unpacked, and points pip and Pulumi at it.

`fetch` runs before the job has a virtualenv: it needs the standard library and the AWS CLI
(which CodeBuild's standard image has), nothing else. Run as
`python -m infra.runner_tools pack|fetch`; bad input is one line and exit 2, a step that
could not be done (pip, the CLI, S3) one line and exit 1."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from workloads.hashing import file_sha256  # the standard library only, as fetch needs

PREFIX = "runner-tools"
BUNDLE = "runner-tools.tar.gz"
# The bundle is a few hundred MB (the AWS provider's plugin and wheel are most of it): a file
# of more than 2 GiB is not ours, and is refused before it is hashed or unpacked.
MAX_BYTES = 2 << 30
DIGEST = re.compile(r"(?:sha256:)?([0-9a-f]{64})")
# The wheels the runner can install, whatever machine packs them: CodeBuild's standard 7.0
# image (components/specs/deploy_runner.py IMAGE) is Ubuntu 22.04 on x86_64, glibc 2.35,
# and the job's Python is 3.11 (actions/setup-python). pip does not widen a manylinux tag to
# the older ones it implies, so each is named.
RUNNER_WHEEL_TAGS = [*(f"--platform=manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)),
                     "--platform=manylinux2014_x86_64", "--platform=manylinux2010_x86_64",
                     "--platform=manylinux1_x86_64", "--python-version=3.11", "--implementation=cp", "--abi=cp311"]
WHEELS, CLI, HOME = "wheels", "pulumi", "home"
NO_STACK = "no stack named"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class ToolsError(Exception):
    """A user error: one line, exit 2."""


class StepFailed(ToolsError):
    """A step that could not be done (pip, the CLI, S3): one line, exit 1."""


def requirements(root: Path) -> list[str]:
    """What the job installs: the project's build requirement and dependencies (make
    setup-core), and the policy pack's (infra/deploy.py makes its environment)."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    pack = (root / "policies" / "requirements.txt").read_text().splitlines()
    pins = (line.split("#", 1)[0].strip() for line in pack)
    return [*project["build-system"]["requires"], *project["project"]["dependencies"], *(pin for pin in pins if pin)]


def bucket_of(backend_url: str) -> tuple[str, str | None]:
    """(bucket, region) of the state backend's URL, s3://<bucket>?region=<region>."""
    url = urlparse(backend_url)
    if url.scheme != "s3" or not url.netloc or url.path not in ("", "/"):
        raise ToolsError(f"backend {backend_url!r}: expected s3://<state bucket>?region=<region> "
                         "(PULUMI_BACKEND_URL, printed by mlplat bootstrap)")
    return url.netloc, parse_qs(url.query).get("region", [None])[0]


def key_of(digest: str) -> str:
    return f"{PREFIX}/sha256-{digest}.tar.gz"


def parse_digest(text: str) -> str:
    found = DIGEST.fullmatch(text.strip())
    if not found:
        raise ToolsError(f"--sha256 {text!r}: expected 64 lowercase hex digits (the supply job's runner-tools output)")
    return found.group(1)


def _run(command: Sequence[str], what: str, **kwargs) -> str:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, **kwargs)
    except FileNotFoundError:
        raise StepFailed(f"{command[0]}: not found; {what} needs it") from None
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise StepFailed(f"{what} failed (exit {done.returncode}): {last}")
    return done.stdout


def state_plugins(deployment: dict) -> list[tuple[str, str]]:
    """(package, version) of each provider a stack's state records: `pulumi up` installs
    these beside the program's (the engine loads the provider that made a resource to
    update or delete it), so after a provider upgrade the state still names the old one."""
    found = set()
    for resource in (deployment.get("deployment") or {}).get("resources") or []:
        kind, inputs = str(resource.get("type", "")), resource.get("inputs") or {}
        if kind.startswith("pulumi:providers:") and isinstance(inputs.get("version"), str):
            found.add((kind.removeprefix("pulumi:providers:"), inputs["version"]))
    return sorted(found)


def install_plugins(root: Path, pulumi: str, home: Path, stacks: Sequence[str]) -> list[str]:
    """Into HOME: the plugins the program needs (`pulumi plugin install`), and those the
    state of each of STACKS records (none for a stack not made yet). Their directories."""
    env = {**os.environ, "PULUMI_HOME": str(home), "PULUMI_SKIP_UPDATE_CHECK": "true"}
    _run([pulumi, "plugin", "install"], "pulumi plugin install", cwd=root, env=env)
    for stack in stacks:
        try:
            exported = _run([pulumi, "stack", "export", "--stack", stack], f"pulumi stack export --stack {stack}",
                            cwd=root, env=env)
        except StepFailed as err:
            if NO_STACK in str(err):
                continue
            raise
        try:
            deployment = json.loads(exported)
        except ValueError:
            raise StepFailed(f"pulumi stack export --stack {stack} did not print JSON") from None
        for package, version in state_plugins(deployment):
            _run([pulumi, "plugin", "install", "resource", package, version],
                 f"pulumi plugin install resource {package} {version}", cwd=root, env=env)
    plugins = sorted(p.name for p in (home / "plugins").glob("*") if p.is_dir())
    if not plugins:
        raise StepFailed("pulumi plugin install installed no plugin; run it in the project's root")
    for other in home.iterdir():  # credentials or workspaces the CLI may have left: not the job's
        if other.name != "plugins":
            shutil.rmtree(other) if other.is_dir() else other.unlink()
    return plugins


def _same_every_time(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owner or time in the bundle: the same tools make the same digest, stored once."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def _write_tar(bundle: Path, staging: Path) -> None:
    with bundle.open("wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w") as tar:
        for path in sorted(staging.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(staging)), recursive=False, filter=_same_every_time)


def pack(root: Path, out: Path, *, pulumi: str = "pulumi", python: str = sys.executable,
         stacks: Sequence[str] = ()) -> tuple[Path, str]:
    """Write the bundle into OUT; its path and sha256. STACKS: the stacks the job deploys,
    whose recorded providers it needs too."""
    found = shutil.which(pulumi)
    if found is None:
        raise StepFailed(f"{pulumi}: the Pulumi CLI is not on PATH; install it first (pulumi/actions)")
    cli_dir = Path(found).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="runner-tools-") as scratch:
        staging = Path(scratch)
        _run([python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
              *RUNNER_WHEEL_TAGS, "--dest", str(staging / WHEELS), *requirements(root)],
             "collecting the wheels (pip download)")
        # The CLI's own files only (pulumi, pulumi-language-python, ...): the directory may be
        # a shared bin/.
        (staging / CLI).mkdir()
        for tool in cli_dir.glob("pulumi*"):
            if tool.is_file():
                shutil.copy2(tool, staging / CLI / tool.name)
        # Plugins into a home of their own: the packing runner's ~/.pulumi may hold others.
        plugins = install_plugins(root, str(staging / CLI / Path(found).name), staging / HOME, stacks)
        manifest = {"wheels": sorted(p.name for p in (staging / WHEELS).glob("*.whl")), "plugins": plugins,
                    "cli": sorted(p.name for p in (staging / CLI).iterdir())}
        (staging / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
        bundle = out / BUNDLE
        _write_tar(bundle, staging)
    return bundle, file_sha256(bundle)


def upload(bundle: Path, digest: str, backend_url: str) -> str:
    """Into the state bucket under its digest (once: the same digest is the same bundle)."""
    import boto3
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, region = bucket_of(backend_url)
    key = key_of(digest)
    try:
        s3 = boto3.client("s3", region_name=region)
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
            s3.upload_file(str(bundle), bucket, key)
    except (ClientError, BotoCoreError, Boto3Error) as err:
        raise StepFailed(f"storing s3://{bucket}/{key}: {' '.join(str(err).split())}") from None
    return f"s3://{bucket}/{key}"


def _folder(into: Path) -> Path:
    """INTO made, as an absolute path: the job's later steps run elsewhere, so every path
    exported must be."""
    into = into.resolve()
    try:
        into.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ToolsError(f"--into {into}: {err.strerror}") from None
    return into


def unpack(bundle: Path, digest: str, into: Path) -> dict[str, str]:
    """Check BUNDLE against DIGEST, unpack it into INTO; the environment that points pip and
    Pulumi at it (PATH's new first entry under the key PATH)."""
    try:
        size = bundle.stat().st_size
        if not bundle.is_file():
            raise ToolsError(f"{bundle}: not a regular file")
    except OSError as err:
        raise ToolsError(f"{bundle}: {err.strerror}") from None
    if size > MAX_BYTES:
        raise ToolsError(f"{bundle}: {size} bytes, more than the {MAX_BYTES} a tools bundle may have")
    found = file_sha256(bundle)
    if found != digest:
        raise ToolsError(f"{bundle}: sha256 {found}, not the {digest} the supply job recorded; not unpacked")
    into = _folder(into)
    try:
        with tarfile.open(bundle, "r:gz") as tar:
            # The data filter refuses absolute paths, '..', links out of INTO and devices.
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError, EOFError, KeyError, ValueError) as err:  # KeyError: a hard link to nothing
        raise ToolsError(f"{bundle}: not a tools bundle ({err})") from None
    missing = [name for name in (WHEELS, f"{CLI}/pulumi", f"{CLI}/pulumi-language-python", f"{HOME}/plugins")
               if not (into / name).exists()]
    if missing:
        raise ToolsError(f"{bundle}: no {', '.join(missing)} in it; not a tools bundle")
    # The CLI's folder goes first on PATH for every later step: nothing in it may stand in
    # for another command (python3, make, aws).
    strangers = sorted(p.name for p in (into / CLI).iterdir() if not p.name.startswith("pulumi"))
    if strangers:
        raise ToolsError(f"{bundle}: {CLI}/ holds {', '.join(strangers[:3])}, not the Pulumi CLI's; not unpacked "
                         "onto PATH")
    # A plugin missing from the bundle fails the run here instead of coming from the internet.
    return {"PATH": str(into / CLI), "PULUMI_HOME": str(into / HOME), "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true", "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(into / WHEELS)}


def fetch(backend_url: str, digest: str, into: Path, *, aws: str = "aws") -> dict[str, str]:
    """Download the bundle of DIGEST from the state bucket with the AWS CLI and unpack it."""
    bucket, region = bucket_of(backend_url)
    local = _folder(into) / BUNDLE
    _run([aws, "s3", "cp", "--only-show-errors", f"s3://{bucket}/{key_of(digest)}", str(local),
          *(["--region", region] if region else [])], f"downloading s3://{bucket}/{key_of(digest)}")
    try:
        return unpack(local, digest, into)
    finally:
        local.unlink(missing_ok=True)


def export(env: dict[str, str], github_env: Path | None, github_path: Path | None,
           say: Callable[[str], None]) -> None:
    """For the job's next steps (GITHUB_ENV and GITHUB_PATH), or as shell lines to eval."""
    rest = {k: v for k, v in env.items() if k != "PATH"}
    if github_env is not None and github_path is not None:
        with github_env.open("a") as stream:
            stream.writelines(f"{k}={v}\n" for k, v in rest.items())
        with github_path.open("a") as stream:
            stream.write(env["PATH"] + "\n")
        return
    for key, value in rest.items():
        say(f"export {key}={value}")
    say(f"export PATH={env['PATH']}:$PATH")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m infra.runner_tools", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    packing = sub.add_parser("pack", help="bundle the wheels, the Pulumi CLI and its plugins; print the sha256")
    packing.add_argument("--out", type=Path, default=Path("out"), help="where to write runner-tools.tar.gz")
    packing.add_argument("--pulumi", default="pulumi", help="the Pulumi CLI to bundle (default: the one on PATH)")
    packing.add_argument("--stack", action="append", default=[], metavar="STACK",
                         help="a stack the job deploys: the providers its state records are bundled too (repeatable)")
    packing.add_argument("--upload", metavar="BACKEND_URL",
                         help="store it in the state bucket (s3://<bucket>?region=<region>) under its digest")
    fetching = sub.add_parser("fetch", help="download the bundle of a digest from the state bucket and unpack it")
    fetching.add_argument("--backend", required=True, metavar="BACKEND_URL", help="s3://<state bucket>?region=<region>")
    fetching.add_argument("--sha256", required=True, help="the digest the supply job printed")
    fetching.add_argument("--into", type=Path, required=True, help="an empty directory to unpack into")
    fetching.add_argument("--github-env", type=Path, help="append the environment here ($GITHUB_ENV)")
    fetching.add_argument("--github-path", type=Path, help="append the CLI's directory here ($GITHUB_PATH)")
    fetching.add_argument("--aws", default="aws", help="the AWS CLI (default: aws on PATH)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "pack":
            if args.upload:
                bucket_of(args.upload)  # a bad URL stops before minutes of packing
            bundle, digest = pack(Path.cwd(), args.out, pulumi=args.pulumi, stacks=args.stack)
            size = bundle.stat().st_size
            if args.upload:
                where = upload(bundle, digest, args.upload)
                bundle.unlink()  # stored; the job's disk is for the image builds after it
            else:
                where = str(bundle)
            print(f"runner tools: {size} bytes at {where}", file=sys.stderr)
            print(digest)
            return EXIT_OK
        if (args.github_env is None) != (args.github_path is None):
            raise ToolsError("--github-env and --github-path go together")
        if args.into.exists() and (not args.into.is_dir() or any(args.into.iterdir())):
            raise ToolsError(f"--into {args.into}: not an empty directory; name a new one")
        env = fetch(args.backend, parse_digest(args.sha256), args.into, aws=args.aws)
        export(env, args.github_env, args.github_path, print)
        return EXIT_OK
    except ToolsError as err:
        print(f"runner-tools: error: {err}", file=sys.stderr)
        return EXIT_FAILED if isinstance(err, StepFailed) else EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
