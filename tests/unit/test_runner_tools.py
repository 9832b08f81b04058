"""The cluster job's tools bundle (infra/runner_tools.py): what is refused before anything
is unpacked, and what the job is told. The whole path, packed by the supply step and run
without the internet by the cluster job, is replayed in tests/services/test_bring_up.py."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra import runner_tools
from infra.runner_tools import ToolsError, bucket_of, export, parse_digest, unpack
from workloads.hashing import file_sha256

REPO = Path(__file__).resolve().parents[2]


def bundle(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> str:
    """A tar.gz of these files (and symbolic links); its sha256."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return hashlib.sha256(path.read_bytes()).hexdigest()


GOOD = {"MANIFEST.json": b"{}", "wheels/a-1-py3-none-any.whl": b"w", "pulumi/pulumi": b"#!/bin/sh\n",
        "pulumi/pulumi-language-python": b"#!/bin/sh\n", "home/plugins/resource-aws-v7.51.1/pulumi-resource-aws": b"p"}


def test_a_good_bundle_is_unpacked_and_pip_and_pulumi_are_pointed_at_it(tmp_path):
    digest = bundle(tmp_path / "b.tar.gz", GOOD)
    env = unpack(tmp_path / "b.tar.gz", digest, tmp_path / "tools")
    assert env == {"PATH": str(tmp_path / "tools" / "pulumi"), "PULUMI_HOME": str(tmp_path / "tools" / "home"),
                   "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
                   "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "tools" / "wheels")}
    plugin = tmp_path / "tools" / "home" / "plugins" / "resource-aws-v7.51.1" / "pulumi-resource-aws"
    assert plugin.read_bytes() == b"p"


def test_another_digest_is_refused_before_anything_is_unpacked(tmp_path):
    bundle(tmp_path / "b.tar.gz", GOOD)
    with pytest.raises(ToolsError, match="not the 0{64} the supply job recorded; not unpacked"):
        unpack(tmp_path / "b.tar.gz", "0" * 64, tmp_path / "tools")
    assert not (tmp_path / "tools").exists()


@pytest.mark.parametrize("members, links", [
    ({**GOOD, "../escaped": b"x"}, None),
    (GOOD, {"pulumi/out": "/etc/passwd"}),
    (GOOD, {"pulumi/up": "../../escaped"}),
], ids=["dot-dot", "absolute link", "link out"])
def test_a_member_outside_the_folder_is_refused(tmp_path, members, links):
    """Even with the recorded digest (a bundle made by someone who could write the bucket)."""
    digest = bundle(tmp_path / "b.tar.gz", members, links)
    with pytest.raises(ToolsError, match="not a tools bundle"):
        unpack(tmp_path / "b.tar.gz", digest, tmp_path / "a" / "tools")
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "a" / "escaped").exists()


def test_an_absolute_member_lands_inside_the_folder(tmp_path):
    digest = bundle(tmp_path / "b.tar.gz", {**GOOD, "/tmp/mlplat-runner-tools-escaped": b"x"})
    unpack(tmp_path / "b.tar.gz", digest, tmp_path / "tools")
    assert (tmp_path / "tools" / "tmp" / "mlplat-runner-tools-escaped").exists()
    assert not Path("/tmp/mlplat-runner-tools-escaped").exists()


def test_a_bundle_without_the_cli_or_plugins_is_refused(tmp_path):
    digest = bundle(tmp_path / "b.tar.gz", {"wheels/a-1-py3-none-any.whl": b"w"})
    with pytest.raises(ToolsError, match="no pulumi/pulumi, pulumi/pulumi-language-python, home/plugins in it"):
        unpack(tmp_path / "b.tar.gz", digest, tmp_path / "tools")


def test_nothing_but_the_cli_goes_onto_path(tmp_path):
    """pulumi/ comes first on PATH for the job's later steps: a python3 there would be run
    in place of the job's."""
    digest = bundle(tmp_path / "b.tar.gz", {**GOOD, "pulumi/python3": b"#!/bin/sh\n"})
    with pytest.raises(ToolsError, match="pulumi/ holds python3, not the Pulumi CLI's"):
        unpack(tmp_path / "b.tar.gz", digest, tmp_path / "tools")


def test_a_relative_folder_is_exported_as_an_absolute_path(tmp_path, monkeypatch):
    digest = bundle(tmp_path / "b.tar.gz", GOOD)
    monkeypatch.chdir(tmp_path)
    env = unpack(Path("b.tar.gz"), digest, Path("tools"))
    assert all(Path(env[k]).is_absolute() for k in ("PATH", "PULUMI_HOME", "PIP_FIND_LINKS"))


def test_the_same_tools_make_the_same_bundle(tmp_path):
    """No time or owner in it: a second pack of the same tools has the same digest, and the
    state bucket keeps one copy."""
    staging = tmp_path / "staging"
    for name, data in GOOD.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_bytes(data)
    (staging / "pulumi" / "pulumi").chmod(0o755)
    runner_tools._write_tar(tmp_path / "one.tar.gz", staging)
    for path in staging.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))
    runner_tools._write_tar(tmp_path / "two.tar.gz", staging)
    assert (tmp_path / "one.tar.gz").read_bytes() == (tmp_path / "two.tar.gz").read_bytes()
    (staging / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"other")
    runner_tools._write_tar(tmp_path / "three.tar.gz", staging)
    assert (tmp_path / "three.tar.gz").read_bytes() != (tmp_path / "one.tar.gz").read_bytes()
    env = unpack(tmp_path / "one.tar.gz", file_sha256(tmp_path / "one.tar.gz"), tmp_path / "tools")
    assert os.access(Path(env["PATH"]) / "pulumi", os.X_OK)  # the CLI still runs


def test_the_states_providers_are_read_from_an_export():
    exported = {"version": 3, "deployment": {"resources": [
        {"type": "pulumi:providers:aws", "inputs": {"version": "7.40.0", "region": "me-central-1"}},
        {"type": "pulumi:providers:aws", "inputs": {"version": "7.51.1"}},
        {"type": "pulumi:providers:kubernetes", "inputs": {"version": "4.34.2"}},
        {"type": "pulumi:providers:kubernetes", "inputs": {"kubeconfig": "..."}},  # no version: the default's
        {"type": "aws:s3/bucket:Bucket", "inputs": {"version": "not a provider"}},
    ]}}
    assert runner_tools.state_plugins(exported) == [("aws", "7.40.0"), ("aws", "7.51.1"), ("kubernetes", "4.34.2")]
    assert runner_tools.state_plugins({"version": 3, "deployment": {}}) == []


def test_a_fifo_a_missing_file_and_an_oversized_one_are_one_line(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ToolsError, match="not a regular file"):
        unpack(tmp_path / "fifo", "0" * 64, tmp_path / "t1")
    with pytest.raises(ToolsError, match="No such file"):
        unpack(tmp_path / "absent", "0" * 64, tmp_path / "t2")
    digest = bundle(tmp_path / "b.tar.gz", GOOD)
    monkeypatch.setattr(runner_tools, "MAX_BYTES", 10)
    with pytest.raises(ToolsError, match="more than the 10 a tools bundle may have"):
        unpack(tmp_path / "b.tar.gz", digest, tmp_path / "t3")


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2048))
def test_any_bytes_with_their_digest_are_unpacked_or_one_line(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "b.tar.gz").write_bytes(data)
    try:
        unpack(folder / "b.tar.gz", hashlib.sha256(data).hexdigest(), folder / "tools")
    except ToolsError as err:
        assert "\n" not in str(err)


NAMES = st.lists(st.sampled_from(["pulumi", "wheels", "home", "plugins", "..", ".", "", "/", "x", "pulumi-x",
                                  "python3", "a b", "\u00e9"]), min_size=1, max_size=5).map("/".join)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(NAMES, st.sampled_from(["file", "dir", "link", "hardlink", "fifo"]), NAMES), max_size=8))
def test_any_real_archive_is_unpacked_inside_its_folder_or_refused_in_one_line(tmp_path_factory, members):
    """Archives of every kind of member (files, folders, links, hard links, FIFOs) with any
    names and targets, each with its own digest: nothing lands outside the folder."""
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "a" / "b.tar.gz"
    path.parent.mkdir()
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, target in members:
            info = tarfile.TarInfo(name)
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE,
                         "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            info.linkname = target if kind in ("link", "hardlink") else ""
            tar.addfile(info, io.BytesIO(b"") if kind == "file" else None)
    into = folder / "a" / "tools"
    try:
        unpack(path, hashlib.sha256(path.read_bytes()).hexdigest(), into)
    except ToolsError as err:
        assert "\n" not in str(err)
    outside = [p for p in folder.rglob("*") if not p.is_relative_to(into) and p not in (path, path.parent)]
    assert outside == []


@pytest.mark.parametrize("text, expected", [
    ("a" * 64, "a" * 64), ("sha256:" + "b" * 64, "b" * 64), (" " + "c" * 64 + "\n", "c" * 64)])
def test_the_digest_the_supply_job_printed_is_read(text, expected):
    assert parse_digest(text) == expected


@pytest.mark.parametrize("text", ["", "A" * 64, "a" * 63, "sha512:" + "a" * 64, "a" * 64 + "/../x"])
def test_a_malformed_digest_is_refused(text):
    with pytest.raises(ToolsError, match="expected 64 lowercase hex digits"):
        parse_digest(text)


def test_the_state_backend_names_the_bucket():
    assert bucket_of("s3://mlplat-state-111122223333-me-central-1?region=me-central-1") == \
        ("mlplat-state-111122223333-me-central-1", "me-central-1")
    for bad in ("file:///tmp/state", "s3://", "s3://bucket/prefix", "https://api.pulumi.com"):
        with pytest.raises(ToolsError, match="expected s3://<state bucket>"):
            bucket_of(bad)


def test_the_job_is_told_through_github_files_or_shell_lines(tmp_path):
    env = {"PATH": "/t/pulumi", "PIP_NO_INDEX": "1"}
    export(env, tmp_path / "env", tmp_path / "path", print)
    assert (tmp_path / "env").read_text() == "PIP_NO_INDEX=1\n" and (tmp_path / "path").read_text() == "/t/pulumi\n"
    said: list[str] = []
    export(env, None, None, said.append)
    assert said == ["export PIP_NO_INDEX=1", "export PATH=/t/pulumi:$PATH"]


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infra.runner_tools", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("args, expected", [
    (["fetch", "--backend", "s3://b?region=me-central-1", "--sha256", "nope", "--into", "{tmp}/new"],
     "--sha256 'nope': expected 64 lowercase hex digits"),
    (["fetch", "--backend", "file:///x", "--sha256", "a" * 64, "--into", "{tmp}/new"], "expected s3://<state bucket>"),
    (["fetch", "--backend", "s3://b", "--sha256", "a" * 64, "--into", "{tmp}"], "not an empty directory"),
    (["fetch", "--backend", "s3://b", "--sha256", "a" * 64, "--into", "{tmp}/something"], "not an empty directory"),
    (["fetch", "--backend", "s3://b", "--sha256", "a" * 64, "--into", "{tmp}/new", "--github-env", "{tmp}/e"],
     "--github-env and --github-path go together"),
    (["pack", "--upload", "https://api.pulumi.com"], "expected s3://<state bucket>"),
], ids=["digest", "backend", "not empty", "a file", "half github", "pack upload url"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, expected):
    (tmp_path / "something").write_text("x")
    done = cli(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").iterdir())


def test_no_aws_cli_is_one_line_and_exit_1(tmp_path):
    done = cli("fetch", "--backend", "s3://b", "--sha256", "a" * 64, "--into", str(tmp_path / "new"),
               "--aws", "/nonexistent/aws")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "/nonexistent/aws: not found" in done.stderr


def test_a_failed_download_is_one_line_and_exit_1(tmp_path):
    failing = tmp_path / "aws"
    failing.write_text("#!/bin/sh\necho 'fatal error: An error occurred (403) when calling the HeadObject operation: "
                       "Forbidden' >&2\nexit 1\n")
    failing.chmod(0o755)
    done = cli("fetch", "--backend", "s3://b?region=me-central-1", "--sha256", "a" * 64, "--into",
               str(tmp_path / "new"), "--aws", str(failing))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "downloading s3://b/runner-tools/sha256-" + "a" * 64 + ".tar.gz failed (exit 1): fatal error" in done.stderr


def test_the_wheels_are_chosen_for_the_runners_platform_and_python():
    """pip download takes the runner's tags, not the packing machine's: CodeBuild's standard
    7.0 image is Ubuntu 22.04 (glibc 2.35) and the cluster job sets up Python 3.11. A new
    image or Python changes both."""
    import yaml

    from components.specs.deploy_runner import IMAGE

    assert IMAGE == "aws/codebuild/standard:7.0", "a new runner image: set RUNNER_WHEEL_TAGS to its glibc"
    tags = runner_tools.RUNNER_WHEEL_TAGS
    assert "--platform=manylinux_2_35_x86_64" in tags and "--platform=manylinux_2_36_x86_64" not in tags
    assert {"--platform=manylinux_2_17_x86_64", "--platform=manylinux2014_x86_64"} <= set(tags)  # older tags too
    jobs = yaml.safe_load((REPO / ".github" / "workflows" / "deploy-environment.yml").read_text())["jobs"]
    [python] = [s["with"]["python-version"] for s in jobs["cluster"]["steps"]
                if str(s.get("uses", "")).startswith("actions/setup-python@")]
    assert f"--python-version={python}" in tags and f"--abi=cp{python.replace('.', '')}" in tags
