"""A tenant's training role against a real S3 API that enforces IAM: moto, its
authorization turned on once the buckets exist, with a user holding exactly the statements
the training role gets (components/training_spec.py s3_statements). The trainer's own
checkpoint copy (workloads/tracking/store.py) lands in its tenant's prefix and is refused in
another's; its tenant's datasets read, another's refused."""

from __future__ import annotations

import json
import subprocess

import pytest
import requests

from components.training_spec import s3_statements
from infra.training import checkpoint_upload
from tests.services.tracking import REGION, REPO, require_tracking, start_moto, stop_processes
from workloads.tracking.store import StoreError, check_scope, upload

KEY = "arn:aws:kms:me-central-1:111122223333:key/k"
WIDE: dict[str, str] = {}  # the whole-bucket user's keys, made by the store fixture
SCOPED: dict[str, str] = {}  # keys to runs/research/ alone


@pytest.fixture(scope="module")
def store():
    """(endpoint, the research training user's keys) on a moto server enforcing IAM."""
    import boto3

    require_tracking()
    processes: list[subprocess.Popen] = []
    endpoint = start_moto(processes)
    try:
        admin = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
        s3 = admin.client("s3", endpoint_url=endpoint)
        for bucket in ("datasets", "checkpoints"):
            s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
        for tenant in ("research", "applied"):
            s3.put_object(Bucket="datasets", Key=f"{tenant}/tokens/shard-0001.bin", Body=b"tokens")
        iam = admin.client("iam", endpoint_url=endpoint)
        iam.create_user(UserName="research-training")
        statements = s3_statements("arn:aws:s3:::datasets", "arn:aws:s3:::checkpoints", "research",
                                   read_key_arns=[KEY], write_key_arns=[KEY])
        iam.put_user_policy(UserName="research-training", PolicyName="training",
                            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
        keys = iam.create_access_key(UserName="research-training")["AccessKey"]
        # Keys a customer might hand out: the whole checkpoints bucket.
        iam.create_user(UserName="whole-bucket")
        iam.put_user_policy(UserName="whole-bucket", PolicyName="everything", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": [
                "arn:aws:s3:::checkpoints", "arn:aws:s3:::checkpoints/*"]}]}))
        WIDE.update(iam.create_access_key(UserName="whole-bucket")["AccessKey"])
        # Keys scoped to the tenant's prefix with no listing at all (moto ignores the
        # s3:prefix condition the training role's listing carries, so it cannot judge that
        # one; the IAM path table does).
        iam.create_user(UserName="research-store")
        iam.put_user_policy(UserName="research-store", PolicyName="own-runs", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
                                                    "Resource": ["arn:aws:s3:::checkpoints/runs/research/*"]}]}))
        SCOPED.update(iam.create_access_key(UserName="research-store")["AccessKey"])
        # From here on, every request is authenticated and authorized.
        requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=10).raise_for_status()
        yield endpoint, keys
    finally:
        stop_processes(processes)


@pytest.fixture
def as_research(store, monkeypatch):
    endpoint, keys = store
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": keys["AccessKeyId"],
                        "AWS_SECRET_ACCESS_KEY": keys["SecretAccessKey"], "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    import boto3

    # boto3's default session keeps the credentials it first found: an earlier test on the
    # same worker may have made it with other keys. This one is built from the keys above.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    return boto3.client("s3", region_name=REGION)


def test_authorization_is_on(store):
    import boto3
    from botocore.exceptions import ClientError

    endpoint, _keys = store
    stranger = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="testing",
                            aws_secret_access_key="testing")
    with pytest.raises(ClientError, match="InvalidClientTokenId|AccessDenied|InvalidAccessKeyId"):
        stranger.get_object(Bucket="datasets", Key="research/tokens/shard-0001.bin")


def test_the_trainer_copies_checkpoints_into_its_tenants_prefix_only(as_research, tmp_path):
    checkpoint = tmp_path / "step_00000010"
    checkpoint.mkdir()
    (checkpoint / "model.pt").write_bytes(b"weights")
    manifest, _digest = upload(checkpoint, checkpoint_upload("checkpoints", "research"), run_id="r1", dataset="d",
                               config={"step": 10}, region=REGION)
    assert manifest == "s3://checkpoints/runs/research/r1/step_00000010/manifest.json"
    assert as_research.get_object(Bucket="checkpoints", Key="runs/research/r1/step_00000010/model.pt")[
        "Body"].read() == b"weights"
    with pytest.raises(StoreError, match="cannot upload .* to s3://checkpoints/runs/applied/r1/step_00000010: "
                                         "AccessDenied"):
        upload(checkpoint, checkpoint_upload("checkpoints", "applied"), run_id="r1", dataset="d",
               config={"step": 10}, region=REGION)
    with pytest.raises(StoreError, match="AccessDenied"):  # nor the bucket's root, as before
        upload(checkpoint, "s3://checkpoints/runs", run_id="r1", dataset="d", config={"step": 10}, region=REGION)


def test_the_trainer_reads_its_tenants_datasets_only(as_research):
    from botocore.exceptions import ClientError

    assert as_research.get_object(Bucket="datasets", Key="research/tokens/shard-0001.bin")["Body"].read() == b"tokens"
    with pytest.raises(ClientError, match="AccessDenied"):
        as_research.get_object(Bucket="datasets", Key="applied/tokens/shard-0001.bin")
    with pytest.raises(ClientError, match="AccessDenied"):
        as_research.put_object(Bucket="datasets", Key="research/tokens/shard-0002.bin", Body=b"x")


def test_the_scope_check_passes_the_tenants_keys_and_refuses_whole_bucket_keys(as_research, store, monkeypatch):
    """What a customer's store keys are checked for before a run (workloads/train/train.py):
    keys to the tenant's prefix pass; keys to the whole bucket are refused in one line."""
    import boto3

    def keys(made: dict[str, str]) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", made["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", made["SecretAccessKey"])
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it keeps the keys it first read

    keys(SCOPED)
    check_scope(checkpoint_upload("checkpoints", "research"), region=REGION)
    keys(WIDE)
    with pytest.raises(StoreError, match=r"can list s3://checkpoints/runs/, beyond s3://checkpoints/runs/research/"):
        check_scope(checkpoint_upload("checkpoints", "research"), region=REGION)


def test_the_trainer_stops_before_training_on_whole_bucket_keys(store, tmp_path):
    """The trainer, as a customer's pod runs it (a store that is not AWS's), exits 2 with
    one line before it starts, on keys that reach the whole bucket."""
    import os
    import sys

    endpoint, _keys = store
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(tmp_path),
           "AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": WIDE["AccessKeyId"],
           "AWS_SECRET_ACCESS_KEY": WIDE["SecretAccessKey"], "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
           "MLPLAT_CHECKPOINT_UPLOAD": checkpoint_upload("checkpoints", "research")}
    done = subprocess.run([sys.executable, "-m", "workloads.train", "--model", "tiny", "--max-steps", "1",
                           "--data", str(tmp_path / "data"), "--checkpoint-dir", str(tmp_path / "ckpt")],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-1500:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: error: the object store keys can list s3://checkpoints/")
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "data").exists()  # stopped before anything
