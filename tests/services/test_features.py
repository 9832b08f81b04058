"""The feature store with real parts: Feast 0.66 through `python -m workloads.features` (the
verbs the server Deployment and the materialization CronJob run), the IAM-token online store
against a real redis-server with TLS and the tenants' ACL users, Parquet in S3 (moto), and
the tracking server for the dataset's lineage."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from tests.services.features import BUCKET, REPO, FeatureStack, start_feature_stack

DEFINITIONS = REPO / "tests" / "fixtures" / "features"
SOURCE_KEY = "features/research/customers/stats.parquet"
AS_OF = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)  # materialized up to here
FEATURES = ["customer_stats:spend", "customer_stats:visits"]


def _at(hours: float) -> str:
    return (AS_OF + timedelta(hours=hours)).isoformat()


# Three customers; each has rows before AS_OF and customer 1 one after it, which neither
# store may show as of AS_OF. Customer 3's only row is older than the view's 2-day TTL.
ROWS = {
    "customer_id": [1, 1, 1, 2, 2, 3],
    "event_timestamp": [_at(-5), _at(-1), _at(+3), _at(-30), _at(-2), _at(-60)],
    "spend": [10.5, 20.25, 99.0, 7.0, 8.5, 3.0],
    "visits": [1, 2, 9, 4, 5, 6],
}
# The newest row at or before AS_OF within the TTL, worked out by hand from ROWS.
AS_OF_VALUES = {1: (20.25, 2), 2: (8.5, 5), 3: (None, None)}


@pytest.fixture(scope="module")
def features(tracking, tmp_path_factory):
    stack = start_feature_stack(tmp_path_factory.mktemp("features"), tracking)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def research(features: FeatureStack):
    """The research tenant's project, applied and materialized up to AS_OF as the CronJob
    would; its config path."""
    source = features.put_parquet(SOURCE_KEY, ROWS)
    config = features.config("research")
    env_source = {"FEATURES_SOURCE": source}
    done = _with_env(features, "research", env_source, "apply", "--config", str(config),
                     "--repo", str(DEFINITIONS / "repo"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["applied"] == [
        "Entity:customer", "FeatureView:customer_stats", "FileSource:customer_stats_source"]
    # One TTL back, as the CronJob's first run starts (materialize-incremental from now - TTL).
    done = features.run("research", "materialize", "--config", str(config), "--start", _at(-48),
                        "--end", AS_OF.isoformat())
    assert done.returncode == 0, done.stderr[-3000:]
    return config


def _with_env(features: FeatureStack, tenant: str, extra: dict[str, str], *args: str):
    import subprocess

    from tests.services.features import PYTHON

    return subprocess.run([str(PYTHON), "-m", "workloads.features", *args], cwd=REPO,
                          env={**features.env(tenant), **extra}, capture_output=True, text=True, timeout=180)


def _online(url: str, ids: list[int]) -> dict[int, tuple]:
    reply = requests.post(f"{url}/get-online-features", json={"features": FEATURES, "entities": {"customer_id": ids}},
                          timeout=10)
    assert reply.ok, reply.text
    body = reply.json()
    names = body["metadata"]["feature_names"]
    columns = {name: result["values"] for name, result in zip(names, body["results"])}
    return {cid: (columns["spend"][i], columns["visits"][i]) for i, cid in enumerate(columns["customer_id"])}


def test_online_read_equals_point_in_time_offline_value(features, research, tmp_path):
    url = features.serve("research", research)
    online = _online(url, [1, 2, 3])
    # Online: what materialization up to AS_OF left, read through the feature server.
    assert online == AS_OF_VALUES

    # Offline: the same entities as of AS_OF, through the training-dataset pipeline.
    entities = features.put_parquet("features/research/labels/as-of.parquet",
                                    {"customer_id": [1, 2, 3], "event_timestamp": [AS_OF.isoformat()] * 3})
    done = features.run("research", "dataset", "--config", str(research), "--entities", entities,
                        "--features", ",".join(FEATURES), "--name", "as-of")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    rows = features.read_parquet(summary["uri"] + "data.parquet")
    offline = {r["customer_id"]: (r["spend"], r["visits"]) for r in rows}
    assert offline == online

    # An hour before, customer 1 had its earlier row: point in time, not the latest.
    earlier = features.put_parquet("features/research/labels/earlier.parquet",
                                   {"customer_id": [1], "event_timestamp": [_at(-3)]})
    done = features.run("research", "dataset", "--config", str(research), "--entities", earlier,
                        "--features", ",".join(FEATURES), "--name", "earlier")
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = features.read_parquet(json.loads(done.stdout.splitlines()[-1])["uri"] + "data.parquet")
    assert (row["spend"], row["visits"]) == (10.5, 1)


def test_freshness_is_a_prometheus_metric(features, research):
    # The research server of the test above exports Feast's freshness gauge on :8000.
    if not features.processes:
        features.serve("research", research)
    deadline, text = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        try:
            text = requests.get("http://127.0.0.1:8000/metrics", timeout=2).text
        except requests.RequestException:
            text = ""
        found = re.search(r'feast_feature_freshness_seconds\{feature_view="customer_stats",project="research"\} '
                          r'([0-9.e+]+)', text)
        if found:
            break
        time.sleep(1)
    assert found, text[-2000:]
    age = datetime.now(timezone.utc) - AS_OF
    assert abs(float(found.group(1)) - age.total_seconds()) < 600


def test_training_dataset_is_a_dataset_version_in_the_lineage(features, research):
    entities = features.put_parquet("features/research/labels/lineage.parquet",
                                    {"customer_id": [2, 1], "event_timestamp": [AS_OF.isoformat()] * 2})
    args = ("dataset", "--config", str(research), "--entities", entities, "--features", ",".join(FEATURES),
            "--name", "churn")
    first = features.run("research", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout.splitlines()[-1])
    # The same features for the same entities are the same version.
    again = json.loads(features.run("research", *args).stdout.splitlines()[-1])
    assert again["id"] == summary["id"] and again["uri"] == summary["uri"]

    manifest = json.loads(features.python("research", (
        "import boto3, sys; b, k = sys.argv[1].removeprefix('s3://').split('/', 1);"
        "print(boto3.client('s3').get_object(Bucket=b, Key=k + 'dataset.json')['Body'].read().decode())"),
        summary["uri"]).stdout)
    assert manifest["id"] == summary["id"] and manifest["project"] == "research"
    assert manifest["features"] == sorted(FEATURES) and manifest["files"][0]["rows"] == 2
    assert summary["uri"].startswith(f"s3://{BUCKET}/features/research/datasets/churn/")

    from workloads.tracking.client import DATASET_TAG, tracking_client

    env = features.tracking.env("research")
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run = tracking_client(features.tracking.uri).get_run(summary["run_id"])
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert run.data.tags[DATASET_TAG] == summary["id"]
    (given,) = run.inputs.dataset_inputs
    assert json.loads(given.dataset.source) == {"uri": summary["uri"], "id": summary["id"]}


def test_a_tenant_cannot_read_another_tenants_project(features, research):
    redis, own, other = features.redis, features.user("research"), features.user("analytics")
    # No user may list keys: key names are entity ids, and SCAN ignores key patterns.
    for command in (("SCAN", "0"), ("RANDOMKEY",), ("DBSIZE",), ("KEYS", "*")):
        assert "NOPERM" in redis.cli(own, *command), command

    # The analytics user, bypassing the CLI's checks, pointed at research's project: every
    # read of its keys is refused by the Redis ACL.
    code = (
        "import sys, yaml\n"
        "from feast import FeatureStore\n"
        "from feast.repo_config import RepoConfig\n"
        "data = yaml.safe_load(open(sys.argv[1]))\n"
        "data['online_store']['user'] = sys.argv[2]\n"
        "store = FeatureStore(config=RepoConfig(repo_path='.', **data))\n"
        "try:\n"
        "    store.get_online_features(features=['customer_stats:spend'], entity_rows=[{'customer_id': 1}])\n"
        "except Exception as err:\n"
        "    print(type(err).__name__, err)\n"
        "else:\n"
        "    print('read')\n")
    done = features.python("analytics", code, str(research), other)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("NoPermissionError") and "no permissions to access one of the keys" in done.stdout
    # The same read as research's own user succeeds: the refusal is the ACL's, not the code's.
    done = features.python("research", code, str(research), own)
    assert done.stdout.strip() == "read", done.stdout + done.stderr[-2000:]

    # Redis itself: the other user cannot write a key of research's project, can write its own.
    assert "NOPERM" in redis.cli(other, "HSET", "\x01research", "f", "1")
    assert redis.cli(other, "HSET", "\x01analytics", "f", "1") == "1"
    assert "NOPERM" in redis.cli(other, "FLUSHALL")


def _one_line_exit_2(done) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_source_outside_the_datasets_bucket_is_refused(features, tmp_path):
    config = features.config("analytics")
    done = features.run("analytics", "apply", "--config", str(config), "--repo", str(DEFINITIONS / "outside"))
    line = _one_line_exit_2(done)
    assert "feature view order_totals: source s3://someone-elses-bucket/orders.parquet is outside the datasets " \
           "bucket" in line
    assert f"s3://{BUCKET}/features/analytics/" in line


def test_source_in_another_tenants_prefix_is_refused(features):
    config = features.config("analytics")
    done = _with_env(features, "analytics", {"FEATURES_SOURCE": f"s3://{BUCKET}/{SOURCE_KEY}"},
                     "apply", "--config", str(config), "--repo", str(DEFINITIONS / "repo"))
    assert "is outside tenant 'analytics''s prefix" in _one_line_exit_2(done)


def test_a_source_path_that_only_reads_as_the_tenants_is_refused(features):
    """Feast's runtime type checks are off (workloads/features/__init__.py): a path object whose
    text is the tenant's prefix, and whose file-system path is another's, is refused by name."""
    config = features.config("analytics")
    done = features.run("analytics", "apply", "--config", str(config), "--repo", str(DEFINITIONS / "lookalike"))
    assert "feature view order_totals: source path must be a string, not Sneaky" in _one_line_exit_2(done)


def test_tenant_naming_another_tenants_project_is_refused(features):
    config = features.config("analytics", project="research")
    done = features.run("analytics", "materialize", "--config", str(config))
    line = _one_line_exit_2(done)
    assert "project 'research' is not tenant 'analytics''s project 'analytics'" in line


def test_online_store_without_tls_is_refused(features):
    config = features.config("analytics")
    text = config.read_text().replace(",ssl=true", "")
    config.write_text(text)
    done = features.run("analytics", "materialize", "--config", str(config))
    assert "online_store.connection_string has no ssl=true: the online store accepts TLS only" in _one_line_exit_2(done)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"project: [unclosed"])
def test_unreadable_config_is_one_line(features, tmp_path, content):
    path = tmp_path / "feature_store.yaml"
    path.write_bytes(content)
    line = _one_line_exit_2(features.run("analytics", "serve", "--config", str(path)))
    assert str(path) in line


def test_rendered_config_is_what_feast_reads(features, tmp_path):
    """The cluster layer's feature_store.yaml, unchanged but for the local endpoint, passes
    the checks and loads as Feast's RepoConfig with the IAM online store."""
    config: Path = features.config("analytics")
    code = ("import sys\n"
            "from workloads.features.repo import load_config, tenant_from_env\n"
            "c = load_config(sys.argv[1], tenant_from_env())\n"
            "print(type(c.online_store).__name__, c.project, c.registry.path)\n")
    done = features.python("analytics", code, str(config))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["IamRedisOnlineStoreConfig", "analytics",
                                   f"s3://{BUCKET}/features/analytics/registry.pb"]


def test_the_online_store_signs_an_elasticache_iam_token(features):
    """The password the online store sends: a SigV4-signed `connect` for the tenant's user on
    the replication group, valid 15 minutes, signed with the pod's credentials; reused while
    fresh."""
    code = ("from urllib.parse import urlsplit, parse_qs\n"
            "from workloads.features.online import IamCredentials\n"
            "c = IamCredentials('mlplat-prod-features-research', 'mlplat-prod-features', 'me-central-1')\n"
            "user, token = c.get_credentials()\n"
            "assert c.get_credentials() == (user, token)\n"
            "parts = urlsplit('https://' + token)\n"
            "q = {k: v[0] for k, v in parse_qs(parts.query).items()}\n"
            "print(user, parts.netloc, q['Action'], q['User'], q['X-Amz-Expires'], q['X-Amz-Algorithm'], "
            "q['X-Amz-Credential'].split('/', 1)[1], len(q['X-Amz-Signature']))\n")
    done = features.python("research", code)
    assert done.returncode == 0, done.stderr[-2000:]
    user, host, action, named, expires, algorithm, scope, signature = done.stdout.split()
    assert (user, host, action, named) == ("mlplat-prod-features-research", "mlplat-prod-features", "connect",
                                           "mlplat-prod-features-research")
    assert (expires, algorithm, signature) == ("900", "AWS4-HMAC-SHA256", "64")
    assert scope.split("/")[1:] == ["me-central-1", "elasticache", "aws4_request"]


def test_a_registry_write_over_a_newer_version_is_refused(features, research):
    """Two writers of one registry (an apply and the CronJob): the one that read the older
    version cannot write over the newer one, and the newer one stays."""
    code = ("import sys, boto3\n"
            "from pathlib import Path\n"
            "from workloads.features.registry import RegistryConflict, TenantS3RegistryStore\n"
            "from workloads.features.repo import load_config, tenant_from_env\n"
            "config = load_config(sys.argv[1], tenant_from_env())\n"
            "store = TenantS3RegistryStore(config.registry, Path('.'))\n"
            "proto = store.get_registry_proto()\n"
            "s3 = boto3.client('s3')\n"
            "from feast.protos.feast.core.Registry_pb2 import Registry\n"
            "newer = Registry.FromString(s3.get_object(Bucket=store._bucket, Key=store._key)['Body'].read())\n"
            "newer.version_id = 'the-other-writer'\n"
            "s3.put_object(Bucket=store._bucket, Key=store._key, Body=newer.SerializeToString())\n"
            "newer_tag = s3.head_object(Bucket=store._bucket, Key=store._key)['ETag']\n"
            "try:\n"
            "    store.update_registry_proto(proto)\n"
            "except RegistryConflict as err:\n"
            "    print('conflict', err)\n"
            "print('kept' if s3.head_object(Bucket=store._bucket, Key=store._key)['ETag'] == newer_tag else 'lost')\n")
    done = features.python("research", code, str(research))
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.splitlines()
    assert first.startswith("conflict ") and "nothing was written: run it again" in first
    assert second == "kept"


def test_materializing_a_project_with_no_views_is_a_quiet_success(features):
    done = features.run("analytics", "materialize", "--config", str(features.config("analytics")))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"project": "analytics", "materialized_until": None,
                                                        "feature_views": 0}


def test_feast_runs_without_its_runtime_type_checks():
    """As the features image runs Feast (a module of workloads.features imported first), its
    classes are not recompiled with typeguard's checks, seconds of every start; Feast imported
    alone, as the look-alike, still is."""
    import subprocess

    from tests.services.features import PYTHON

    code = ("import sys\n"
            "if sys.argv[1] == 'ours':\n"
            "    from workloads.features import repo\n"
            "from feast.feature_view import FeatureView\n"
            "print('typeguard' in FeatureView.__init__.__code__.co_names)\n")
    seen = {}
    for how in ("ours", "alone"):
        done = subprocess.run([str(PYTHON), "-c", code, how], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        seen[how] = done.stdout.strip()
    assert seen == {"ours": "False", "alone": "True"}
