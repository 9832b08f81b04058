"""The model repository layout, publishing new versions, and rolling back."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.serve.repository import (
    LocalStore, S3Store, StoreError, next_version, open_store, publish, rollback, stage_version,
)


def staged(tmp_path: Path, version: int, payload: bytes = b"onnx") -> Path:
    source = tmp_path / f"export-{version}" / "model.onnx"
    source.parent.mkdir(parents=True)
    source.write_bytes(payload)
    return stage_version(tmp_path / f"staging-{version}", "gpt", version, f"name: \"gpt\"  # v{version}\n",
                         [source])


def test_layout_and_versions_grow(tmp_path):
    store = LocalStore(tmp_path / "repo")
    assert next_version(store, "gpt") == 1
    publish(store, staged(tmp_path, 1, b"one"), 1)
    publish(store, staged(tmp_path, 2, b"two"), 2)
    (tmp_path / "repo" / "gpt" / "scratch").mkdir()  # not a version: ignored, as Triton does
    files = sorted(str(p.relative_to(tmp_path / "repo")) for p in (tmp_path / "repo").rglob("*") if p.is_file())
    assert files == ["gpt/1/model.onnx", "gpt/2/model.onnx", "gpt/config.pbtxt"]
    assert store.versions("gpt") == [1, 2] and next_version(store, "gpt") == 3
    assert (tmp_path / "repo/gpt/2/model.onnx").read_bytes() == b"two"
    assert (tmp_path / "repo/gpt/config.pbtxt").read_text().endswith("# v2\n")


def test_a_version_is_never_overwritten(tmp_path):
    store = LocalStore(tmp_path / "repo")
    publish(store, staged(tmp_path, 1), 1)
    with pytest.raises(StoreError, match=r"repo/gpt/1 already exists; versions are never overwritten"):
        publish(store, _restage(tmp_path), 1)
    assert (tmp_path / "repo/gpt/1/model.onnx").read_bytes() == b"onnx"


def _restage(tmp_path: Path) -> Path:
    source = tmp_path / "again" / "model.onnx"
    source.parent.mkdir()
    source.write_bytes(b"other")
    return stage_version(tmp_path / "staging-again", "gpt", 1, "name: \"gpt\"\n", [source])


def test_rollback_removes_the_newest_and_keeps_the_last(tmp_path):
    store = LocalStore(tmp_path / "repo")
    for v in (1, 2, 3):
        publish(store, staged(tmp_path, v), v)
    assert rollback(store, "gpt") == (3, 2)
    assert store.versions("gpt") == [1, 2]
    assert rollback(store, "gpt") == (2, 1)
    with pytest.raises(StoreError, match="has 1 version\\(s\\); rollback needs an older one"):
        rollback(store, "gpt")
    assert store.versions("gpt") == [1]


class FakeAws:
    """Records AWS CLI calls and answers `s3 ls` from a listing."""

    def __init__(self, listing: str = "") -> None:
        self.calls: list[list[str]] = []
        self.listing = listing

    def __call__(self, argv):
        self.calls.append(list(argv))
        return self.listing if argv[2] == "ls" else ""


LISTING = """                           PRE 1/
                           PRE 12/
                           PRE tmp/
2026-11-20 10:00:00        512 config.pbtxt
"""


def test_s3_store_speaks_the_aws_cli(tmp_path):
    aws = FakeAws(LISTING)
    store = open_store("s3://models-bucket/triton/", region="me-central-1", run=aws)
    assert isinstance(store, S3Store) and store.versions("gpt") == [1, 12]
    assert next_version(store, "gpt") == 13
    model_dir = staged(tmp_path, 13)
    publish(store, model_dir, 13)
    pin = ["--region", "me-central-1", "--only-show-errors"]
    assert aws.calls[-2:] == [
        ["aws", "s3", "cp", "--recursive", str(model_dir / "13"), "s3://models-bucket/triton/gpt/13/", *pin],
        ["aws", "s3", "cp", str(model_dir / "config.pbtxt"), "s3://models-bucket/triton/gpt/config.pbtxt", *pin],
    ]
    # The bucket's default encryption (the models CMK) applies: no flag may override it.
    assert not any("--sse" in call for call in aws.calls)
    assert rollback(store, "gpt") == (12, 1)
    assert aws.calls[-1] == ["aws", "s3", "rm", "--recursive", "s3://models-bucket/triton/gpt/12/", *pin]


@pytest.mark.parametrize("target, message", [
    ("s3://", "'s3://' is not an s3://bucket[/prefix] URI"),
    ("gs://bucket/models", "'gs://bucket/models': only s3:// URIs and local directories are supported"),
])
def test_bad_targets(target, message):
    with pytest.raises(StoreError) as err:
        open_store(target, run=FakeAws())
    assert str(err.value) == message
