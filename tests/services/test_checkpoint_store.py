"""The checkpoints bucket read back as the claims say, against moto's S3 server: a copy is
refused when a stored file's byte flipped, when a file is missing, or when the manifest was
replaced after registration (the registry's recorded hash given); what the manifest does
not list is never read; a refused download leaves nothing a resume could take for a
checkpoint; a manifest naming a path outside the checkpoint is refused."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.services.tracking import REGION
from workloads.tracking import store

BUCKET = "checkpoints"


@pytest.fixture
def s3(moto_endpoint, monkeypatch):
    import boto3

    for key, value in {"AWS_ENDPOINT_URL_S3": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    # The store's clients come from boto3's default session, which keeps the credentials it
    # first found: a session of this test's own, dropped after it, so no later test
    # (tests/services/test_scoped_roles.py signs as a tenant) inherits these keys.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    client = boto3.client("s3", region_name=REGION, endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    yield client
    for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


@pytest.fixture
def stored(s3, tmp_path):
    """A three-file checkpoint uploaded: (manifest URI, its SHA-256, the prefix)."""
    checkpoint = tmp_path / "ckpt" / "step_00000010"
    (checkpoint / "shards").mkdir(parents=True)
    (checkpoint / ".metadata").write_bytes(b"metadata " * 100)
    (checkpoint / "config.json").write_text(json.dumps({"step": 10}))
    (checkpoint / "shards" / "0.distcp").write_bytes(bytes(range(256)) * 64)
    uri, digest = store.upload(checkpoint, f"s3://{BUCKET}/runs", run_id="run1", dataset="sha256:" + "d" * 64,
                               config={"step": 10})
    return uri, digest, "runs/run1/step_00000010"


def test_an_intact_checkpoint_downloads_whole(stored, tmp_path):
    uri, digest, _ = stored
    path = store.download(uri, tmp_path / "into", expect_sha256=digest)
    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()) == [
        ".metadata", "config.json", "shards/0.distcp"]
    assert (path / "shards" / "0.distcp").read_bytes() == bytes(range(256)) * 64


def test_a_flipped_byte_is_refused_and_nothing_is_left(stored, s3, tmp_path):
    uri, digest, prefix = stored
    key = f"{prefix}/shards/0.distcp"
    data = bytearray(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    data[1000] ^= 0x01
    s3.put_object(Bucket=BUCKET, Key=key, Body=bytes(data))
    with pytest.raises(store.StoreError, match=r"shards/0.distcp: does not match its manifest \(sha256 differs\)"):
        store.download(uri, tmp_path / "into", expect_sha256=digest)
    assert list((tmp_path / "into").iterdir()) == []  # no damaged copy for a resume to find


def test_a_missing_file_is_refused(stored, s3, tmp_path):
    uri, digest, prefix = stored
    s3.delete_object(Bucket=BUCKET, Key=f"{prefix}/config.json")
    with pytest.raises(store.StoreError, match="cannot read s3://checkpoints/runs/run1/step_00000010/config.json"):
        store.download(uri, tmp_path / "into", expect_sha256=digest)
    assert list((tmp_path / "into").iterdir()) == []


def replace_manifest(s3, prefix: str, change) -> bytes:
    key = f"{prefix}/manifest.json"
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    change(manifest)
    body = json.dumps(manifest).encode()
    s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    return body


def test_a_replaced_manifest_is_refused_by_the_recorded_hash(stored, s3, tmp_path):
    """Someone swaps a shard and writes a manifest that matches it: each file then matches
    the new manifest, so only the hash the registry recorded at registration catches it
    (every caller passes it: workloads/serve/cli.py). Without that hash the copy is
    consistent with itself, and read as such."""
    uri, digest, prefix = stored
    swapped = b"another model" * 100
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/shards/0.distcp", Body=swapped)

    def point_at_swapped(manifest):
        entry = next(f for f in manifest["files"] if f["path"] == "shards/0.distcp")
        entry.update(sha256=hashlib.sha256(swapped).hexdigest(), bytes=len(swapped))

    body = replace_manifest(s3, prefix, point_at_swapped)
    with pytest.raises(store.StoreError, match=f"its SHA-256 is {hashlib.sha256(body).hexdigest()}, but {digest} was "
                                               "recorded; the checkpoint was replaced after it was registered"):
        store.download(uri, tmp_path / "into", expect_sha256=digest)
    assert not (tmp_path / "into").exists()
    read = store.download(uri, tmp_path / "unchecked")
    assert (read / "shards" / "0.distcp").read_bytes() == swapped


def test_only_what_the_manifest_lists_is_read(stored, s3, tmp_path):
    uri, digest, prefix = stored
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/shards/1.distcp", Body=b"planted")
    path = store.download(uri, tmp_path / "into", expect_sha256=digest)
    assert not (path / "shards" / "1.distcp").exists()


@pytest.mark.parametrize("path", ["../escaped", "shards/../../escaped", "shards//0.distcp", "./config.json"])
def test_a_manifest_naming_a_path_outside_the_checkpoint_is_refused(stored, s3, tmp_path, path):
    uri, _digest, prefix = stored
    replace_manifest(s3, prefix, lambda m: m["files"][0].update(path=path))
    with pytest.raises(store.StoreError, match="not a checkpoint manifest"):
        store.download(uri, tmp_path / "deep" / "into")
    assert not (tmp_path / "deep" / "escaped").exists() and not (tmp_path / "escaped").exists()


def test_a_download_never_writes_over_a_folder(stored, tmp_path):
    uri, digest, _ = stored
    (tmp_path / "into" / "step_00000010").mkdir(parents=True)
    with pytest.raises(store.StoreError, match="already exists"):
        store.download(uri, tmp_path / "into", expect_sha256=digest)
