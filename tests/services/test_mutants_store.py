"""The checkpoint store's edges that `make mutate` (bench/mutate.py) found untested: which
URIs name a store location, what a refused S3 call says, where a store client is pinned,
the step a manifest records, and the scope check of a tenant's keys (answered by botocore's
Stubber, as S3 answers a key scoped to the tenant's prefix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.services.test_checkpoint_store import BUCKET, s3  # noqa: F401 (the moto bucket fixture)
from workloads.tracking import store

Location = store.Location


@pytest.mark.parametrize("uri", ["gs://bucket/runs", "s3:/bucket/runs", "s3:///runs", "s3:///runs/tenant-a", "",
                                 "S3://bucket"])
def test_what_is_not_an_s3_location_is_refused_naming_it(uri):
    with pytest.raises(store.StoreError, match=r"is not s3://bucket\[/prefix\]") as refused:
        Location.parse(uri)
    assert repr(uri) in str(refused.value)


@pytest.mark.parametrize(("uri", "bucket", "key"), [
    ("s3://b/runs", "b", "runs"),
    ("s3://bucket", "bucket", ""),
    ("s3://bucket/", "bucket", ""),
    ("s3://bucket/runs/tenant-a/", "bucket", "runs/tenant-a"),
    ("s3://bucket//runs//", "bucket", "runs"),
    ("s3://bucket/X-runs/X", "bucket", "X-runs/X"),
])
def test_a_location_is_its_bucket_and_its_key_without_outer_slashes(uri, bucket, key):
    where = Location.parse(uri)
    assert (where.bucket, where.key) == (bucket, key)
    assert where.uri == f"s3://{bucket}/{key}"


def test_a_store_client_is_pinned_to_the_region_asked_for(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert store._s3("me-central-1").meta.region_name == "me-central-1"
    assert store._s3().meta.region_name == "us-east-1"


def checkpoint_dir(tmp_path, name="step_00000007"):
    path = tmp_path / "ckpt" / name
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_the_manifest_records_the_configs_step_and_zero_without_one(s3, tmp_path):  # noqa: F811
    uri, _ = store.upload(checkpoint_dir(tmp_path), f"s3://{BUCKET}/runs", run_id="r", dataset="sha256:" + "d" * 64,
                          config={"step": 7, "precision": "bf16"})
    manifest, _ = store.read_manifest(uri)
    assert manifest.step == 7 and manifest.config == {"step": 7, "precision": "bf16"}
    uri, _ = store.upload(checkpoint_dir(tmp_path / "other", "first"), f"s3://{BUCKET}/runs", run_id="r",
                          dataset="sha256:" + "d" * 64, config={})
    assert store.read_manifest(uri)[0].step == 0


def test_a_download_reads_from_the_region_asked_for(s3, tmp_path, monkeypatch):  # noqa: F811
    uri, _ = store.upload(checkpoint_dir(tmp_path), f"s3://{BUCKET}/runs", run_id="r", dataset="sha256:" + "d" * 64,
                          config={})
    real, regions = store._s3, []
    monkeypatch.setattr(store, "_s3", lambda region=None: regions.append(region) or real(region))
    store.download(uri, tmp_path / "into", region="me-central-1")
    assert regions and set(regions) == {"me-central-1"}


def test_a_download_makes_the_folders_it_needs_and_takes_an_existing_one(s3, tmp_path):  # noqa: F811
    uri, digest = store.upload(checkpoint_dir(tmp_path), f"s3://{BUCKET}/runs", run_id="r",
                               dataset="sha256:" + "d" * 64, config={})
    nested = store.download(uri, tmp_path / "a" / "b" / "into", expect_sha256=digest)
    assert nested == tmp_path / "a" / "b" / "into" / "step_00000007" and (nested / "config.json").is_file()
    (tmp_path / "existing").mkdir()
    assert (store.download(uri, tmp_path / "existing") / "config.json").is_file()


def test_files_arrive_in_a_hidden_folder_beside_the_target_until_all_match(s3, tmp_path, monkeypatch):  # noqa: F811
    """Beside the target (one file system, so the last step is a rename) and named with a
    leading dot (a resume that lists the folder for step_* directories does not see it)."""
    uri, digest = store.upload(checkpoint_dir(tmp_path), f"s3://{BUCKET}/runs", run_id="r",
                               dataset="sha256:" + "d" * 64, config={})
    real, written = store._s3, []

    def recording(region=None):
        client = real(region)
        download = client.download_file
        client.download_file = lambda bucket, key, path: written.append(path) or download(bucket, key, path)
        return client

    monkeypatch.setattr(store, "_s3", recording)
    into = tmp_path / "into"
    store.download(uri, into, expect_sha256=digest)
    [path] = written
    partial = Path(path).parent
    assert partial.parent == into and partial.name.startswith(".step_00000007.partial-")
    assert not partial.exists() and [p.name for p in into.iterdir()] == ["step_00000007"]


def test_files_folders_deep_come_back_where_they_were(s3, tmp_path):  # noqa: F811
    checkpoint = checkpoint_dir(tmp_path)
    (checkpoint / "model" / "layers" / "0").mkdir(parents=True)
    (checkpoint / "model" / "layers" / "0" / "weights.distcp").write_bytes(b"w" * 10)
    uri, digest = store.upload(checkpoint, f"s3://{BUCKET}/runs", run_id="r", dataset="sha256:" + "d" * 64, config={})
    path = store.download(uri, tmp_path / "into", expect_sha256=digest)
    assert (path / "model" / "layers" / "0" / "weights.distcp").read_bytes() == b"w" * 10


def test_a_damaged_file_is_refused_saying_the_stored_checkpoint_is_damaged(s3, tmp_path):  # noqa: F811
    uri, digest = store.upload(checkpoint_dir(tmp_path), f"s3://{BUCKET}/runs", run_id="r",
                               dataset="sha256:" + "d" * 64, config={})
    s3.put_object(Bucket=BUCKET, Key="runs/r/step_00000007/config.json", Body=b"{ }")
    with pytest.raises(store.StoreError, match=rf"^s3://{BUCKET}/runs/r/step_00000007/config.json: does not match its "
                                               r"manifest \(sha256 differs\); the stored checkpoint is damaged$"):
        store.download(uri, tmp_path / "into", expect_sha256=digest)


def test_a_refused_upload_names_the_services_error_code(s3, tmp_path):  # noqa: F811
    """boto3's managed upload raises S3UploadFailedError; the code is S3's, on the error
    it was raised from."""
    with pytest.raises(store.StoreError, match=r"cannot upload .*step_00000007 to s3://no-such-bucket/runs/r/"
                                               r"step_00000007: NoSuchBucket$"):
        store.upload(checkpoint_dir(tmp_path), "s3://no-such-bucket/runs", run_id="r", dataset="sha256:" + "d" * 64,
                     config={})


def test_a_missing_manifest_names_the_services_error_code(s3):  # noqa: F811
    with pytest.raises(store.StoreError, match=rf"^cannot read checkpoint manifest s3://{BUCKET}/runs/x/manifest.json: "
                                               "NoSuchKey$"):
        store.read_manifest(f"s3://{BUCKET}/runs/x/manifest.json")


def test_an_unreachable_store_names_the_client_error_type(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "me-central-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    with pytest.raises(store.StoreError, match=r"^cannot read checkpoint manifest s3://b/m.json: "
                                               "EndpointConnectionError$"):
        store.read_manifest("s3://b/m.json")


def test_a_manifest_larger_than_the_limit_is_refused(s3, monkeypatch):  # noqa: F811
    s3.put_object(Bucket=BUCKET, Key="runs/big/manifest.json", Body=b" " * 101)
    monkeypatch.setattr(store, "MANIFEST_LIMIT", 100)
    with pytest.raises(store.StoreError, match="larger than 100 bytes; not a checkpoint manifest"):
        store.read_manifest(f"s3://{BUCKET}/runs/big/manifest.json")
    s3.put_object(Bucket=BUCKET, Key="runs/big/manifest.json", Body=b"{" + b" " * 98 + b"}")
    with pytest.raises(store.StoreError, match=r"not a checkpoint manifest \("):
        store.read_manifest(f"s3://{BUCKET}/runs/big/manifest.json")


def test_an_uploaded_manifest_lists_each_file_with_its_hash_and_size(s3, tmp_path):  # noqa: F811
    import hashlib

    path = checkpoint_dir(tmp_path)
    (path / "shards").mkdir()
    (path / "shards" / "0.distcp").write_bytes(b"x" * 300)
    uri, digest = store.upload(path, f"s3://{BUCKET}/runs", run_id="r", dataset="sha256:" + "e" * 64, config={})
    assert uri == f"s3://{BUCKET}/runs/r/step_00000007/manifest.json"
    body = s3.get_object(Bucket=BUCKET, Key="runs/r/step_00000007/manifest.json")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == digest
    manifest = json.loads(body)
    assert manifest["format"] == store.FORMAT and manifest["run_id"] == "r" and manifest["dataset"] == "sha256:" + "e" * 64
    assert {f["path"]: (f["sha256"], f["bytes"]) for f in manifest["files"]} == {
        "config.json": (hashlib.sha256(b"{}").hexdigest(), 2),
        "shards/0.distcp": (hashlib.sha256(b"x" * 300).hexdigest(), 300)}


# -- the scope check of a tenant's keys --------------------------------------------------


def stubbed(monkeypatch, answers):
    """A real S3 client whose answers are `answers` in order: "ok" (a listing) or an error
    code; each request must be the one-key listing of the prefix given."""
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("s3", region_name="me-central-1", aws_access_key_id="k", aws_secret_access_key="s")
    stub = Stubber(client)
    for prefix, answer in answers:
        expected = {"Bucket": "checkpoints", "Prefix": prefix, "Delimiter": "/", "MaxKeys": 1}
        if answer == "ok":
            stub.add_response("list_objects_v2", {"KeyCount": 0}, expected)
        else:
            stub.add_client_error("list_objects_v2", service_error_code=answer, http_status_code=403,
                                  expected_params=expected)
    stub.activate()
    regions = []
    monkeypatch.setattr(store, "_s3", lambda region=None: regions.append(region) or client)
    return stub, regions


def test_keys_scoped_to_the_tenant_pass(monkeypatch):
    stub, regions = stubbed(monkeypatch, [("runs/", "AccessDenied"), ("", "AccessDenied")])
    store.check_scope("s3://checkpoints/runs/tenant-a", region="me-central-1")
    stub.assert_no_pending_responses()
    assert regions == ["me-central-1", "me-central-1"]


def test_a_403_code_counts_as_denied_too(monkeypatch):
    stub, _ = stubbed(monkeypatch, [("runs/", "403"), ("", "403")])
    store.check_scope("s3://checkpoints/runs/tenant-a")
    stub.assert_no_pending_responses()


def test_keys_that_list_the_parent_prefix_are_refused_naming_it(monkeypatch):
    stubbed(monkeypatch, [("runs/", "ok")])
    with pytest.raises(store.StoreError, match=r"^the object store keys can list s3://checkpoints/runs/, beyond "
                                               r"s3://checkpoints/runs/tenant-a/: every tenant's data is in reach of "
                                               r"this tenant; give it keys scoped to its own prefixes "
                                               r"\(docs/onprem.md\)$"):
        store.check_scope("s3://checkpoints/runs/tenant-a/")


def test_keys_that_list_the_buckets_root_are_refused_naming_it(monkeypatch):
    stub, _ = stubbed(monkeypatch, [("runs/", "AccessDenied"), ("", "ok")])
    with pytest.raises(store.StoreError, match=r"^the object store keys can list s3://checkpoints/, beyond"):
        store.check_scope("s3://checkpoints/runs/tenant-a")
    stub.assert_no_pending_responses()


def test_a_tenant_at_the_buckets_root_is_checked_once(monkeypatch):
    stub, _ = stubbed(monkeypatch, [("", "AccessDenied")])
    store.check_scope("s3://checkpoints/tenant-a")
    stub.assert_no_pending_responses()


def test_any_other_answer_stops_the_check_with_its_code(monkeypatch):
    stubbed(monkeypatch, [("runs/", "NoSuchBucket")])
    with pytest.raises(store.StoreError, match=r"^cannot check the store's keys on s3://checkpoints/runs/: "
                                               "NoSuchBucket$"):
        store.check_scope("s3://checkpoints/runs/tenant-a")


def test_a_service_error_raised_while_handling_another_names_its_own_code(monkeypatch):
    """botocore may raise S3's answer while it handles an earlier failure (a retried
    request): the answer's code is the one to report, not the earlier error's."""
    from botocore.exceptions import ClientError

    class Client:
        def list_objects_v2(self, **_):
            try:
                raise ConnectionResetError("the first attempt")
            except ConnectionResetError:
                raise ClientError({"Error": {"Code": "NoSuchBucket"}}, "ListObjectsV2")  # noqa: B904

    monkeypatch.setattr(store, "_s3", lambda region=None: Client())
    with pytest.raises(store.StoreError, match=r"^cannot check the store's keys on s3://checkpoints/runs/: "
                                               "NoSuchBucket$"):
        store.check_scope("s3://checkpoints/runs/tenant-a")


def test_an_unreachable_store_stops_the_check(monkeypatch):
    from botocore.exceptions import EndpointConnectionError

    def unreachable(region=None):
        class Client:
            def list_objects_v2(self, **_):
                raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
        return Client()

    monkeypatch.setattr(store, "_s3", unreachable)
    with pytest.raises(store.StoreError, match=r"^cannot check the store's keys on s3://checkpoints/runs/: "
                                               "EndpointConnectionError$"):
        store.check_scope("s3://checkpoints/runs/tenant-a")
