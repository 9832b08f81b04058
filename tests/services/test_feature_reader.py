"""The in-process online reader (workloads/features/reader.py) against Feast's own read, with
real parts: a redis-server with TLS and the tenant's ACL user, the platform's IAM-token
online store, and the registry in S3 (moto). The checks run in Feast's environment
(tests/services/feature_reader_check.py); here they are started and their verdicts read."""

from __future__ import annotations

import json
import subprocess

import pytest

from components.features_spec import project_name
from tests.services.features import BUCKET, PYTHON, REPO, FeatureStack, require_features, start_redis
from tests.services.tracking import REGION

pytestmark = pytest.mark.xdist_group("feature-reader")
CHECK = REPO / "tests" / "services" / "feature_reader_check.py"
TENANT = "research"
EXAMPLES = 150


@pytest.fixture(scope="module")
def stack(moto_endpoint, tmp_path_factory):
    require_features()
    import boto3

    boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                 region_name=REGION).create_bucket(Bucket=BUCKET,
                                                   CreateBucketConfiguration={"LocationConstraint": REGION})
    folder = tmp_path_factory.mktemp("reader")
    stack = FeatureStack(folder, None, moto_endpoint)  # type: ignore[arg-type]
    stack.redis = start_redis(folder / "redis", {stack.user(TENANT): project_name(TENANT)})
    try:
        yield stack
    finally:
        stack.redis.stop()


@pytest.fixture(scope="module")
def checks(stack) -> dict[str, dict]:
    """Every check in one Feast process (importing Feast and applying the project take
    seconds); each check's verdict by name."""
    done = subprocess.run([str(PYTHON), str(CHECK), str(stack.config(TENANT)), "guard", "refusals", "registry",
                           f"equivalence={EXAMPLES}"], cwd=REPO, env=stack.env(TENANT), capture_output=True, text=True,
                          timeout=900)
    verdicts = {}
    for line in done.stdout.splitlines():
        if line.startswith('{"check"'):
            verdict = json.loads(line)
            verdicts[verdict["check"]] = verdict
    assert verdicts, f"the checks did not run (exit {done.returncode}): {done.stderr[-4000:]}"
    return verdicts


def verdict(checks: dict[str, dict], name: str) -> dict:
    assert name in checks, f"{name} did not report: {sorted(checks)}"
    assert checks[name]["ok"], checks[name]["error"]
    return checks[name]


def test_reader_returns_what_get_online_features_returns(checks):
    """Over every value type Feast writes (43 in 0.66), missing, expired and past-TTL
    entities, repeated rows, several views sharing a key and views with other keys."""
    result = verdict(checks, "equivalence")
    assert result["examples"] == EXAMPLES and result["types"] >= 40, result


def test_bad_requests_are_typed_errors_naming_the_view_or_key(checks):
    verdict(checks, "refusals")


def test_a_view_applied_elsewhere_is_read_after_a_refresh_and_a_removed_one_is_refused(checks):
    verdict(checks, "registry")


def test_feast_key_layout_is_the_one_the_reader_was_checked_against(checks):
    """A Feast upgrade that moves keys or fields fails here (and the pin must match)."""
    verdict(checks, "guard")


# --- python -m workloads.features read: bad input is one line and exit 2 --------------------

def read(stack: FeatureStack, config, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PYTHON), "-m", "workloads.features", "read", "--config", str(config), *args], cwd=REPO,
                          env=stack.env(TENANT), capture_output=True, text=True, timeout=120)


def refused(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


def test_cli_reads_and_refuses_in_one_line(stack, checks):
    # `checks` first: the project is applied by then.
    config = stack.config(TENANT)
    done = read(stack, config, "--features", "typed_a:a_int64,merchant_stats:m_double", "--entities",
                '{"customer_id": [1, 2], "merchant_id": ["m", "n"]}')
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"customer_id": [1, 2], "merchant_id": ["m", "n"], "a_int64": [None, None],
                                       "m_double": [None, None]}
    assert "feature view 'nope'" in refused(read(stack, config, "--features", "nope:x", "--entities",
                                                 '{"customer_id": [1]}'))
    assert "entity key 'customer_id': '1' is not an int64" in refused(
        read(stack, config, "--features", "typed_a:a_int64", "--entities", '{"customer_id": ["1"]}'))
    other = stack.config(TENANT, project=project_name("analytics"))
    assert "is not tenant 'research'" in refused(read(stack, other, "--features", "typed_a:a_int64", "--entities",
                                                      '{"customer_id": [1]}'))
    assert "--entities: not JSON" in refused(read(stack, config, "--features", "typed_a:a_int64", "--entities", "[1"))
