"""The model repository layout, publishing new versions, retiring old ones, rolling back;
the same operations against the bucket through the AWS CLI's command lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.serve.repository import (
    PUBLISHED_MARKER,
    LocalStore,
    S3Store,
    StoreError,
    next_version,
    open_store,
    publish,
    published_config,
    rollback,
    published_from,
    stage_version,
    versions,
)


def staged(tmp_path: Path, version: int, payload: bytes = b"onnx") -> Path:
    source = tmp_path / f"export-{version}" / "model.onnx"
    source.parent.mkdir(parents=True)
    source.write_bytes(payload)
    return stage_version(tmp_path / f"staging-{version}", "gpt", version, f"name: \"gpt\"  # v{version}\n",
                         [source])


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_layout_markers_and_versions_grow(tmp_path):
    store = LocalStore(tmp_path / "repo")
    assert next_version(store, "gpt") == 1
    assert publish(store, staged(tmp_path, 1, b"one"), 1, keep=2) == []
    assert publish(store, staged(tmp_path, 2, b"two"), 2, keep=2) == []
    for stray in ("scratch", "07"):  # not versions (nor is a number with a leading zero), as for Triton
        (tmp_path / "repo" / "gpt" / stray).mkdir()
        (tmp_path / "repo" / "gpt" / stray / PUBLISHED_MARKER).write_text("")
    assert [f for f in tree(tmp_path / "repo") if "scratch" not in f and "07" not in f] == ["gpt/1/PUBLISHED", "gpt/1/model.onnx", "gpt/1/published-config.pbtxt",
                                       "gpt/2/PUBLISHED", "gpt/2/model.onnx", "gpt/2/published-config.pbtxt",
                                       "gpt/config.pbtxt"]
    assert versions(store, "gpt") == [1, 2] and next_version(store, "gpt") == 3
    assert (tmp_path / "repo/gpt/2/model.onnx").read_bytes() == b"two"
    assert (tmp_path / "repo/gpt/config.pbtxt").read_text().endswith("# v2\n")


def test_a_version_is_never_overwritten(tmp_path):
    store = LocalStore(tmp_path / "repo")
    publish(store, staged(tmp_path, 1), 1, keep=2)
    with pytest.raises(StoreError, match=r"repo/gpt/1 was issued before; versions are never overwritten"):
        publish(store, _restage(tmp_path), 1, keep=2)
    assert (tmp_path / "repo/gpt/1/model.onnx").read_bytes() == b"onnx"


def _restage(tmp_path: Path) -> Path:
    source = tmp_path / "again" / "model.onnx"
    source.parent.mkdir()
    source.write_bytes(b"other")
    return stage_version(tmp_path / "staging-again", "gpt", 1, "name: \"gpt\"\n", [source])


def test_rollback_retires_the_newest_and_its_number_is_never_reused(tmp_path):
    store = LocalStore(tmp_path / "repo")
    for v in (1, 2, 3):
        publish(store, staged(tmp_path, v), v, keep=2)
    assert rollback(store, "gpt") == (3, 2)
    assert versions(store, "gpt") == [1, 2]
    # Kept, without its marker, where Triton and the pods' copies do not look; the config
    # version 2 was published with is the model's config again.
    assert tree(tmp_path / "repo/gpt/retired-3") == ["model.onnx", "published-config.pbtxt"]
    assert (tmp_path / "repo/gpt/config.pbtxt").read_text().endswith("# v2\n")
    assert next_version(store, "gpt") == 4
    with pytest.raises(StoreError, match="gpt/3 was issued before"):
        publish(store, _restage(tmp_path), 3, keep=2)
    assert rollback(store, "gpt") == (2, 1)
    with pytest.raises(StoreError, match="has 1 published version\\(s\\); rollback needs an older one"):
        rollback(store, "gpt")
    assert versions(store, "gpt") == [1]


def test_publishing_retires_versions_beyond_one_spare(tmp_path):
    """Triton serves the newest `keep`; one more stays so a rollback still serves `keep`."""
    store = LocalStore(tmp_path / "repo")
    retired = [publish(store, staged(tmp_path, v), v, keep=2) for v in (1, 2, 3, 4, 5)]
    assert retired == [[], [], [], [1], [2]]
    assert versions(store, "gpt") == [3, 4, 5]
    assert sorted(p.name for p in (tmp_path / "repo/gpt").iterdir()) == [
        "3", "4", "5", "config.pbtxt", "retired-1", "retired-2"]


def test_a_failed_export_neither_counts_nor_survives_the_next(tmp_path):
    """An export that died after uploading files but before its marker leaves a folder pods
    never serve: it is not a version to keep or roll back onto, its number is not reused,
    and the next export retires it."""
    store = LocalStore(tmp_path / "repo")
    for v in (1, 2):
        publish(store, staged(tmp_path, v), v, keep=1)
    failed = staged(tmp_path, 3)
    store.put_tree(failed / "3", "gpt/3")  # files, no marker
    assert versions(store, "gpt") == [1, 2] and next_version(store, "gpt") == 4
    assert rollback(store, "gpt") == (2, 1)  # onto 1, never onto the unfinished 3
    assert publish(store, staged(tmp_path, 4), 4, keep=1) == [3]
    assert versions(store, "gpt") == [1, 4]
    assert sorted(p.name for p in (tmp_path / "repo/gpt").iterdir()) == [
        "1", "4", "config.pbtxt", "retired-2", "retired-3"]


def test_local_store_errors_are_one_line(tmp_path):
    file = tmp_path / "not-a-directory"
    file.write_text("x")
    with pytest.raises(StoreError) as err:
        open_store(str(file))
    assert str(err.value) == f"{file}: is a file; give a directory or an s3:// URI"
    store = LocalStore(tmp_path / "repo")
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "gpt").write_text("a file where the model's folder belongs")
    with pytest.raises(StoreError, match=r"repo/gpt"):
        publish(store, staged(tmp_path, 1), 1, keep=2)


class FakeS3:
    """An in-memory bucket behind the AWS CLI's command lines.

    It answers only the commands and options the real CLI accepts for each subcommand (an
    option the CLI would reject, such as `--only-show-errors` on `s3api` or `ls`, fails
    here too), and lists the way `s3api list-objects-v2` does.
    """

    OPTIONS = {  # options each command accepts (beyond its positional arguments)
        ("s3api", "list-objects-v2"): {"--bucket", "--prefix", "--output", "--region"},
        ("s3", "cp"): {"--recursive", "--region", "--only-show-errors"},
        ("s3", "mv"): {"--recursive", "--region", "--only-show-errors"},
        ("s3", "rm"): {"--recursive", "--region", "--only-show-errors"},
    }
    VALUED = {"--bucket", "--prefix", "--output", "--region"}

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self.objects: dict[str, bytes] = {}
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        argv = list(argv)
        self.calls.append(argv)
        assert argv[0] == "aws"
        command = (argv[1], argv[2])
        if command not in self.OPTIONS:
            raise StoreError(f"aws {' '.join(command)}: not a command the store should need")
        options, positional, rest = {}, [], argv[3:]
        while rest:
            word = rest.pop(0)
            if word.startswith("--"):
                if word not in self.OPTIONS[command]:
                    raise StoreError(f"aws {' '.join(command)} failed: Unknown options: {word}")
                options[word] = rest.pop(0) if word in self.VALUED else True
            else:
                positional.append(word)
        return getattr(self, command[1].replace("-", "_"))(options, positional)

    def _key(self, uri: str) -> str:
        assert uri.startswith(f"s3://{self.bucket}/"), uri
        return uri[len(f"s3://{self.bucket}/"):]

    def list_objects_v2(self, options, _positional):
        assert options["--bucket"] == self.bucket and options["--output"] == "json"
        keys = sorted(k for k in self.objects if k.startswith(options["--prefix"]))
        # The CLI prints nothing at all for an empty listing.
        return json.dumps({"Contents": [{"Key": k, "Size": len(self.objects[k])} for k in keys]}) if keys else ""

    def cp(self, options, positional):
        source, target = positional
        if options.get("--recursive"):
            for file in Path(source).rglob("*"):
                if file.is_file():
                    self.objects[self._key(target) + str(file.relative_to(source))] = file.read_bytes()
        elif target == "-":
            return self.objects[self._key(source)].decode()
        elif source.startswith("s3://"):
            self.objects[self._key(target)] = self.objects[self._key(source)]
        else:
            self.objects[self._key(target)] = Path(source).read_bytes()
        return ""

    def mv(self, options, positional):
        source, target = (self._key(p) for p in positional)
        assert options.get("--recursive") and source.endswith("/") and target.endswith("/")
        for key in [k for k in self.objects if k.startswith(source)]:
            self.objects[target + key[len(source):]] = self.objects.pop(key)
        return ""

    def rm(self, options, positional):
        key = self._key(positional[0])
        assert not options.get("--recursive")
        self.objects.pop(key, None)
        return ""


def test_s3_store_publishes_retires_and_rolls_back_through_the_cli(tmp_path):
    s3 = FakeS3("models-bucket")
    store = open_store("s3://models-bucket/triton/", region="me-central-1", run=s3)
    assert isinstance(store, S3Store)
    # A model's first version: its prefix does not exist yet.
    assert versions(store, "gpt") == [] and next_version(store, "gpt") == 1
    def listings() -> int:
        return sum(c[1:3] == ["s3api", "list-objects-v2"] for c in s3.calls)

    for v in (1, 2, 3, 4):
        before = listings()
        publish(store, staged(tmp_path, v), v, keep=2)
        assert listings() == before + 1  # each export lists the model's folder once
    assert versions(store, "gpt") == [2, 3, 4] and next_version(store, "gpt") == 5
    assert sorted(k for k in s3.objects if not k.endswith("published-config.pbtxt")) == [
        "triton/gpt/2/PUBLISHED", "triton/gpt/2/model.onnx", "triton/gpt/3/PUBLISHED", "triton/gpt/3/model.onnx",
        "triton/gpt/4/PUBLISHED", "triton/gpt/4/model.onnx", "triton/gpt/config.pbtxt",
        "triton/gpt/retired-1/model.onnx"]
    # Files first, the shared config next, the version's marker last; every call pinned to
    # the bucket's region, and the bucket's default encryption (the models CMK) never overridden.
    uploads = [c for c in s3.calls if c[1:3] == ["s3", "cp"]][-3:]
    assert [c[-4] for c in uploads] == [
        "s3://models-bucket/triton/gpt/4/", "s3://models-bucket/triton/gpt/config.pbtxt",
        "s3://models-bucket/triton/gpt/4/PUBLISHED"]
    assert all(c[c.index("--region") + 1] == "me-central-1" for c in s3.calls)
    assert not any("--sse" in " ".join(c) for c in s3.calls)
    before = listings()
    assert rollback(store, "gpt") == (4, 3)
    assert listings() == before + 1
    # The marker goes before the folder moves, so no pod copies a half-moved version; then
    # version 3's config comes back, copied inside the bucket.
    changes = [c for c in s3.calls if c[1:3] != ["s3api", "list-objects-v2"]][-3:]
    assert [c[1:3] for c in changes] == [["s3", "rm"], ["s3", "mv"], ["s3", "cp"]]
    assert changes[0][3] == "s3://models-bucket/triton/gpt/4/PUBLISHED"
    assert changes[2][3:5] == ["s3://models-bucket/triton/gpt/3/published-config.pbtxt",
                               "s3://models-bucket/triton/gpt/config.pbtxt"]
    assert versions(store, "gpt") == [2, 3] and next_version(store, "gpt") == 5
    assert published_config(store, "gpt").endswith("# v3\n")


def test_a_failing_cli_call_is_one_line(tmp_path):
    def broken(argv):
        raise StoreError("s3api list-objects-v2 --bucket failed: An error occurred (AccessDenied)")

    with pytest.raises(StoreError, match=r"^s3api list-objects-v2 --bucket failed: An error occurred"):
        next_version(open_store("s3://models-bucket/triton", run=broken), "gpt")


@pytest.mark.parametrize("target, message", [
    ("s3://", "'s3://' is not an s3://bucket[/prefix] URI"),
    ("gs://bucket/models", "'gs://bucket/models': only s3:// URIs and local directories are supported"),
])
def test_bad_targets(target, message):
    with pytest.raises(StoreError) as err:
        open_store(target, run=FakeS3("bucket"))
    assert str(err.value) == message


def test_the_marker_is_what_a_pods_copy_looks_for():
    from components.inference_spec import PUBLISHED_MARKER as EXPECTED_BY_PODS

    assert PUBLISHED_MARKER == EXPECTED_BY_PODS


def test_the_version_a_stack_pins_is_never_retired(tmp_path):
    """Pinned pods copy that version only: retiring it would fail every new pod's start."""
    store = LocalStore(tmp_path / "repo")
    for v in (1, 2, 3, 4, 5):
        publish(store, staged(tmp_path, v), v, keep=1, protect=frozenset({1}))
    assert versions(store, "gpt") == [1, 4, 5]  # 2 and 3 retired beyond the spare; 1 kept for the stack
    with pytest.raises(StoreError, match=r"gpt version 5 is the version the stack serves \(mlplat:inference.version\)"):
        rollback(store, "gpt", protect=frozenset({5}))
    assert versions(store, "gpt") == [1, 4, 5]


def test_a_version_is_found_again_by_the_registered_version_it_was_published_from(tmp_path):
    store = LocalStore(tmp_path / "repo")
    for version, source in ((1, "models:/research-gpt/3"), (2, "models:/research-gpt/4"), (3, "")):
        model_dir = staged(tmp_path, version)
        stage_version(tmp_path / f"restaged-{version}", "gpt", version, "name: \"gpt\"\n",
                      [model_dir / str(version) / "model.onnx"], source)
        publish(store, tmp_path / f"restaged-{version}" / "gpt", version, keep=5)
    assert (tmp_path / "repo/gpt/1/PUBLISHED").read_text() == "gpt 1\nsource models:/research-gpt/3\n"
    assert published_from(store, "gpt", "models:/research-gpt/3") == 1
    assert published_from(store, "gpt", "models:/research-gpt/4") == 2
    # Look-alikes: another version of the model, a prefix of a source, and none at all.
    assert published_from(store, "gpt", "models:/research-gpt/5") is None
    assert published_from(store, "gpt", "models:/research-gpt/") is None
    # A version whose upload never finished (no marker) is not one published.
    (tmp_path / "repo/gpt/2/PUBLISHED").unlink()
    assert published_from(store, "gpt", "models:/research-gpt/4") is None
