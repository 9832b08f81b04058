"""The serving pods' init container script (components/inference_spec.FETCH_SCRIPT), run by
a real `sh` against a stand-in `aws` that copies a local folder as `aws s3 sync` would
(including exiting 0 for a prefix that does not exist): it copies one model, keeps its
completely published versions, drops half-published ones, never copies retired ones,
starts from an empty folder on a retry, and fails when there is nothing to serve."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path

import pytest

from components.inference_spec import FETCH_SCRIPT, PUBLISHED_MARKER, RETIRED_PATTERN

# `aws s3 sync s3://bucket/<path>/ DEST [--exclude|--include PATTERN ...]`, served from $BUCKET_DIR;
# patterns match keys relative to the source, as the CLI's do.
FAKE_AWS = f"""#!{sys.executable}
import fnmatch, os, shutil, sys
from pathlib import Path
args = sys.argv[1:]
if args[:2] != ["s3", "sync"] or not args[2].startswith("s3://"):
    sys.exit("unexpected call: " + " ".join(args))
if os.environ.get("FAIL"):
    sys.exit("fatal error: An error occurred (AccessDenied) when calling the ListObjectsV2 operation")
source = Path(os.environ["BUCKET_DIR"]) / args[2][len("s3://"):].split("/", 1)[1]
# Filters apply in order, a later one overriding an earlier one, as the CLI's do.
filters = [(a, args[i + 1]) for i, a in enumerate(args) if a in ("--exclude", "--include")]
def wanted(key):
    keep = True
    for flag, pattern in filters:
        if fnmatch.fnmatch(key, pattern):
            keep = flag == "--include"
    return keep
for file in source.rglob("*"):
    key = str(file.relative_to(source))
    if file.is_file() and wanted(key):
        target = Path(args[3]) / key
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
"""


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    """gpt: 2 and 3 published, 4 half-uploaded (no marker), retired-1 rolled back; bert: 1;
    draft: a config and a half-uploaded first version."""
    root = tmp_path / "bucket" / "triton"
    files = ["gpt/config.pbtxt", "gpt/2/model.onnx", f"gpt/2/{PUBLISHED_MARKER}", "gpt/3/model.onnx",
             "gpt/3/model.onnx.data", f"gpt/3/{PUBLISHED_MARKER}", "gpt/4/model.onnx", "gpt/retired-1/model.onnx",
             "bert/config.pbtxt", "bert/1/model.onnx", f"bert/1/{PUBLISHED_MARKER}",
             "draft/config.pbtxt", "draft/1/model.onnx"]
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    return tmp_path / "bucket"


def fetch(tmp_path: Path, bucket: Path, model: str = "gpt", version: str = "", **env: str) -> subprocess.CompletedProcess:
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    (tools / "aws").write_text(FAKE_AWS)
    (tools / "aws").chmod(0o755)
    return subprocess.run(
        ["sh", "-c", FETCH_SCRIPT, "fetch-models", "s3://models-bucket/triton/", f"{tmp_path / 'models'}/", model,
         version],
        env={"PATH": f"{tools}:/usr/bin:/bin", "BUCKET_DIR": str(bucket), **env},
        capture_output=True, text=True, timeout=60,
    )


def copied(tmp_path: Path) -> list[str]:
    models = tmp_path / "models"
    return sorted(str(p.relative_to(models)) for p in models.rglob("*") if p.is_file())


def test_only_the_models_completely_published_versions_are_kept(tmp_path, bucket):
    done = fetch(tmp_path, bucket)
    assert done.returncode == 0, done.stderr
    assert copied(tmp_path) == ["gpt/2/PUBLISHED", "gpt/2/model.onnx", "gpt/3/PUBLISHED", "gpt/3/model.onnx",
                                "gpt/3/model.onnx.data", "gpt/config.pbtxt"]
    assert done.stdout == "not serving gpt version 4: it is not completely published\ncopied gpt: 2 version(s)\n"


def test_a_retry_starts_from_an_empty_folder(tmp_path, bucket):
    """An attempt that failed halfway may have left a marker whose model file has since
    moved to retired-<N>: the retry must not keep it."""
    stale = tmp_path / "models" / "gpt" / "5"
    stale.mkdir(parents=True)
    (stale / PUBLISHED_MARKER).write_text("left by a failed attempt")
    assert fetch(tmp_path, bucket).returncode == 0
    assert not any(name.startswith("gpt/5/") for name in copied(tmp_path))


@pytest.mark.parametrize("model", ["draft", "absent"])
def test_nothing_to_serve_fails_the_pods_start(tmp_path, bucket, model):
    done = fetch(tmp_path, bucket, model=model)
    assert done.returncode == 1
    assert done.stderr == (f"nothing to serve: s3://models-bucket/triton/{model}/ holds no config.pbtxt or no "
                           "completely published version\n")


def test_a_failed_copy_fails_the_pods_start(tmp_path, bucket):
    done = fetch(tmp_path, bucket, FAIL="1")
    assert done.returncode != 0
    assert "AccessDenied" in done.stderr


def test_the_exclude_pattern_matches_retired_versions_only():
    assert fnmatch.fnmatch("retired-12/model.onnx", RETIRED_PATTERN)
    assert not fnmatch.fnmatch("12/model.onnx", RETIRED_PATTERN)


def test_a_pinned_version_is_the_only_one_copied(tmp_path, bucket):
    """A rollout's stable and canary pods differ in the version they pin."""
    done = fetch(tmp_path, bucket, version="2")
    assert done.returncode == 0, done.stderr
    assert copied(tmp_path) == ["gpt/2/PUBLISHED", "gpt/2/model.onnx", "gpt/config.pbtxt"]
    assert done.stdout == "copied gpt: 1 version(s)\n"


@pytest.mark.parametrize("version", ["4", "1", "9"])  # half-uploaded, retired, never issued
def test_a_pinned_version_that_is_not_completely_published_fails_the_start(tmp_path, bucket, version):
    done = fetch(tmp_path, bucket, version=version)
    assert done.returncode == 1
    assert done.stderr == ("nothing to serve: s3://models-bucket/triton/gpt/ holds no config.pbtxt or no completely "
                           f"published version {version}\n")
