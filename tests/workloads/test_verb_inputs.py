"""The workloads' verbs against hostile input: a number out of any sensible range, NaN or
inf, a device or a FIFO where a file goes, an endless or oversized file, text with a
newline or an escape that would land in a tag. Each is one line on stderr, exit 2, within
seconds and well under 1 GB, with nothing written; the look-alikes (the largest legal
number, a real file, a symlink to one) still work."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.isolation import isolated
from tests.workloads.processes import Done, run

REPO = Path(__file__).resolve().parents[2]
FEATURES_PYTHON = REPO / ".venv-features" / "bin" / "python"
FIXTURES = Path(__file__).parent / "fixtures" / "gpucheck"
SECONDS = 10
MAX_RSS = 1 << 30


def refused(done: Done) -> str:
    """The one line of a refusal: exit 2, nothing on stdout, no traceback, in seconds and
    bounded memory."""
    lines = done.err.strip().splitlines()
    assert done.code == 2, (done.code, done.err[-2000:])
    assert len(lines) == 1 and "Traceback" not in done.err, done.err[-2000:]
    assert done.out == ""
    assert done.seconds < SECONDS and done.rss < MAX_RSS, (done.seconds, done.rss)
    return lines[0]


@pytest.fixture
def hostile(tmp_path):
    """A FIFO, a symlink loop, a directory, a symlink to /dev/zero; and a real file with a
    symlink to it."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    (tmp_path / "dir").mkdir()
    (tmp_path / "zero").symlink_to("/dev/zero")
    return tmp_path


# --- python -m workloads.serve ------------------------------------------------------------

SERVE = "workloads.serve"
GPT = ("--model-name", "gpt")
SMOKE = ("smoke", "--url", "127.0.0.1:1", "--model-name", "gpt")


@pytest.mark.parametrize(("args", "says"), [
    (("config", "--vocab-size", "99999999999999999999", *GPT),
     "config: error: argument --vocab-size: 99999999999999999999 is out of range; use a whole number from 1 to "
     "10,000,000"),
    (("config", "--vocab-size", "0", *GPT), "argument --vocab-size: 0 is out of range"),
    (("config", "--vocab-size", "9" * 5000, *GPT),
     f"argument --vocab-size: '{'9' * 40}' (cut; 5,000 characters) is not a whole number; use one from 1 to "
     "10,000,000"),
    (("config", "--vocab-size", "nan", *GPT), "argument --vocab-size: 'nan' is not a whole number"),
    (("config", "--vocab-size", "256", *GPT, "--cpu-threads", "100000"), "argument --cpu-threads: 100000 is out of "
                                                                         "range; use a whole number from 0 to 1,024"),
    (("config", "--vocab-size", "256", *GPT, "--max-batch-size", "9" * 5000), "argument --max-batch-size: '999"),
    (("config", "--vocab-size", "256", *GPT, "--top-k", "99999999999999999999"),
     "--top-k: top-k 99999999999999999999 is out of range; use 1 to the vocabulary size 256"),
    (("canary", "--stack", "prod", "--repository", "r", "--version", "99999999999999999999"),
     "argument --version: 99999999999999999999 is out of range; use a whole number from 1 to "
     "9,223,372,036,854,775,807"),
    ((*SMOKE, "--batch-size", "100000000"), "argument --batch-size: 100000000 is out of range; use a whole number "
                                            "from 1 to 1,024"),
    ((*SMOKE, "--sequence", "1000000000"), "argument --sequence: 1000000000 is out of range"),
    ((*SMOKE, "--rounds", "0"), "argument --rounds: 0 is out of range"),
    ((*SMOKE, "--max-latency-ms", "nan"), "argument --max-latency-ms: 'nan' is not a finite number; use one above 0 "
                                          "and at most 3,600,000"),
    ((*SMOKE, "--max-latency-ms", "inf"), "argument --max-latency-ms: 'inf' is not a finite number"),
    ((*SMOKE, "--max-latency-ms", "0"), "argument --max-latency-ms: 0 is out of range"),
    (("export", "--checkpoint", "c", "--repository", "r", *GPT, "--serving-image", "img\nINJECTED"),
     "argument --serving-image: 'img\\nINJECTED' holds '\\n', which does not print"),
    (("rollback", "--repository", "repo\x1b[2J", *GPT), "argument --repository: 'repo\\x1b[2J' holds '\\x1b'"),
], ids=["vocab-huge", "vocab-zero", "vocab-5000-digits", "vocab-nan", "cpu-threads", "batch-5000-digits", "top-k",
        "canary-version", "smoke-batch", "smoke-sequence", "smoke-rounds", "latency-nan", "latency-inf",
        "latency-zero", "image-newline", "repository-escape"])
def test_serve_numbers_and_tags_are_bounded(args, says, tmp_path):
    out = tmp_path / "out" / "config.pbtxt"
    line = refused(run(SERVE, *args, *(("--out", str(out)) if args[0] == "config" else ())))
    assert line.startswith(f"python -m workloads.serve {args[0]}: error: ") and says in line, line
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize(("name", "says"), [
    ("/dev/zero", "/dev/zero: is a character device, not a model config (config.pbtxt); name the file itself"),
    ("zero", "zero: is a character device, not a model config"),
    ("fifo", "fifo: is a FIFO (named pipe), not a model config"),
    ("loop", "loop: is a symbolic link that loops; point it at the model config"),
    ("dir", "dir: is a directory, not a model config"),
    ("big", "big: is 1,048,577 bytes; a model config (config.pbtxt) may be at most 1,048,576"),
])
def test_serve_check_reads_a_regular_file_only(hostile, name, says):
    (hostile / "big").write_bytes(b"#" * ((1 << 20) + 1))
    path = name if name.startswith("/") else str(hostile / name)
    line = refused(run(SERVE, "check", path))
    assert line.startswith("python -m workloads.serve check: error: ") and says in line, line


@pytest.mark.parametrize(("flag", "name", "says"), [
    ("--token-file", "/dev/urandom", "--token-file /dev/urandom: is a character device, not a token file"),
    ("--token-file", "fifo", "fifo: is a FIFO (named pipe), not a token file"),
    ("--token-file", "loop", "loop: is a symbolic link that loops"),
    ("--token-file", "big", "big: is 65,537 bytes; a token file may be at most 65,536"),
    ("--root-certificates", "zero", "zero: is a character device, not a CA bundle"),
    ("--root-certificates", "fifo", "fifo: is a FIFO (named pipe), not a CA bundle"),
])
def test_smoke_reads_its_files_bounded(hostile, flag, name, says):
    (hostile / "big").write_bytes(b"a" * ((64 << 10) + 1))
    path = name if name.startswith("/") else str(hostile / name)
    line = refused(run(SERVE, *SMOKE, flag, path))
    assert line.startswith(f"python -m workloads.serve smoke: error: {flag} ") and says in line, line


def test_config_refuses_a_fifo_as_its_output(hostile):
    line = refused(run(SERVE, "config", "--vocab-size", "256", *GPT, "--out", str(hostile / "fifo")))
    assert line.endswith("fifo: is a FIFO (named pipe); name a regular file to write the model config to")


def test_serve_look_alikes_still_work(tmp_path):
    """The largest vocabulary, a real config and a symlink to it, a real token file through
    a symlink (its smoke test then fails to connect: exit 1, not bad input)."""
    out = tmp_path / "gpt" / "config.pbtxt"
    done = run(SERVE, "config", "--vocab-size", "10000000", *GPT, "--out", str(out))
    assert done.code == 0 and out.is_file(), done.err
    link = tmp_path / "link.pbtxt"
    link.symlink_to(out)
    for path in (out, link):
        done = run(SERVE, "check", str(path))
        assert done.code == 0 and done.out.startswith(f"{path}: ok (gpt, max batch 32)"), done.err
    (tmp_path / "token").write_text("aaa.bbb.ccc\n")
    (tmp_path / "token-link").symlink_to(tmp_path / "token")
    done = run(SERVE, *SMOKE, "--token-file", str(tmp_path / "token-link"), "--batch-size", "1024",
               "--sequence", "32768", "--rounds", "1000", "--max-latency-ms", "3600000")
    assert done.code == 1 and "cannot reach the server" in done.out, done.out + done.err


def test_a_checkpoints_vocabulary_is_bounded_as_the_flag_is():
    """export takes the vocabulary from the checkpoint: the same bound, in the spec."""
    from workloads.serve.spec import MAX_VOCAB, ModelSpec, ServeSpecError

    assert ModelSpec(name="gpt", vocab_size=MAX_VOCAB).vocab_size == 10_000_000
    with pytest.raises(ServeSpecError, match=r"^vocabulary size 10000001 is above 10,000,000; no served model has a "
                                             r"larger one$"):
        ModelSpec(name="gpt", vocab_size=MAX_VOCAB + 1)


def test_the_repository_and_the_stack_file_are_read_bounded(hostile):
    """A published config.pbtxt in a local repository, and the stack file a canary edits."""
    from workloads.serve.canary import CanaryError, set_version
    from workloads.serve.repository import LocalStore, StoreError

    (hostile / "gpt").mkdir()
    os.mkfifo(hostile / "gpt" / "config.pbtxt")
    with pytest.raises(StoreError, match=r"config.pbtxt: is a FIFO \(named pipe\), not a model config; name the "
                                         r"file itself$"):
        isolated(lambda: LocalStore(hostile).read_text("gpt/config.pbtxt"))
    stacks = hostile / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.x.yaml").symlink_to("/dev/zero")
    with pytest.raises(CanaryError, match=r"^--stack x: .*Pulumi.x.yaml: is a character device, not a stack file"):
        isolated(lambda: set_version("x", 2, [1, 2], stacks_dir=stacks))
    assert (stacks / "Pulumi.x.yaml").is_symlink()  # left as it was


# --- python -m workloads.tracking ---------------------------------------------------------

TRACKING = "workloads.tracking"


@pytest.mark.parametrize(("args", "says"), [
    (("register", "--run", "0" * 32, "--name", "m", "--step", "99999999999999999999"),
     "register: error: argument --step: 99999999999999999999 is out of range; use a whole number from 0 to "
     "1,000,000,000"),
    (("register", "--run", "0" * 32, "--name", "m", "--step", "-1"), "argument --step: -1 is out of range"),
    (("register", "--run", "abc\ndef", "--name", "m"),
     "argument --run: 'abc\\ndef' is not an MLflow run id (letters, digits, '_' and '-')"),
    (("register", "--run", "0" * 32, "--name", "gpt\x1b[31m"), "argument --name: 'gpt\\x1b[31m' holds '\\x1b', "
                                                               "which does not print"),
    (("register", "--run", "0" * 32, "--name", "a/b"), "argument --name: 'a/b' holds '/' or '@'"),
    (("alias", "--name", "m", "--alias", "production\n", "--version", "1"),
     "argument --alias: 'production\\n' is not an alias of letters, digits, '_' and '-', e.g. production"),
    (("alias", "--name", "m", "--alias", "production", "--version", "99999999999"),
     "argument --version: 99999999999 is out of range; use a whole number from 1 to 2,147,483,647"),
    (("lineage", "models:/m/1\r\nx"), "argument model: 'models:/m/1\\r\\nx' holds '\\r'"),
], ids=["step-huge", "step-negative", "run-newline", "name-escape", "name-slash", "alias-newline", "version-huge",
        "lineage-crlf"])
def test_tracking_numbers_and_names_are_bounded(args, says):
    line = refused(run(TRACKING, "--tracking-uri", "http://127.0.0.1:1", *args))
    assert line.startswith(f"python -m workloads.tracking {args[0]}: error: ") and says in line, line


def test_tracking_largest_step_and_version_get_past_the_parser():
    """Legal values reach the server check (no server here: its own line, not the flag's)."""
    for args in (("register", "--run", "a" * 256, "--name", "research-gpt", "--step", "1000000000"),
                 ("alias", "--name", "research-gpt", "--alias", "p" * 255, "--version", "2147483647")):
        line = refused(run(TRACKING, "--tracking-uri", "http://127.0.0.1:1", *args))
        assert "tracking server http://127.0.0.1:1 is unreachable" in line, line


def test_the_tracking_servers_secret_files_are_read_bounded(hostile):
    from workloads.tracking.server import settings_from_files

    users = hostile / "users"
    users.mkdir()
    (users / "admin").symlink_to("/dev/zero")
    (hostile / "dsn").write_text("postgresql://u:p@db:5432/mlflow")
    env = {"MLPLAT_DB_DSN_FILE": str(hostile / "dsn"), "MLPLAT_USERS_DIR": str(users), "MLPLAT_ARTIFACTS": "s3://a"}
    with pytest.raises(ValueError, match=r"admin: is a character device, not a secret file; name the file itself$"):
        isolated(lambda: settings_from_files(env) and None)
    env["MLPLAT_DB_DSN_FILE"] = str(hostile / "fifo")
    with pytest.raises(ValueError, match=r"fifo: is a FIFO \(named pipe\), not a secret file"):
        isolated(lambda: settings_from_files(env) and None)


# --- python -m workloads.gpucheck ---------------------------------------------------------

GPUCHECK = "workloads.gpucheck"
P5 = ("--instance-type", "p5.48xlarge")
HEALTHY = FIXTURES / "p5.48xlarge-healthy.json"


def _readings(tmp_path: Path, name: str, body: str) -> str:
    (tmp_path / name).write_text(body)
    return str(tmp_path / name)


@pytest.mark.parametrize(("args", "says"), [
    (("--expect-gpus", "99999999999999999999"), "gpucheck: argument --expect-gpus: 99999999999999999999 is out of "
                                                "range; use a whole number from 1 to 64"),
    (("--expect-memory-gib", "1e9"), "gpucheck: argument --expect-memory-gib: '1e9' is not a whole number"),
    (("--expect-hcas", "mlx5_0", "--expect-port-rate-gbps", "-400"), "argument --expect-port-rate-gbps: -400 is out "
                                                                     "of range"),
    (("--expect-hcas", "mlx5_0,../../../etc"), "gpucheck: argument --expect-hcas: '../../../etc' is not an RDMA "
                                               "device name as the kernel gives it (e.g. mlx5_0)"),
    (("--watch", "nan"), "gpucheck: argument --watch: 'nan' is not a finite number; use one from 0 to 86,400"),
    (("--watch", "inf"), "argument --watch: 'inf' is not a finite number"),
    (("--watch", "-1"), "argument --watch: -1 is out of range"),
    (("--expect-model", "h100\n"), "argument --expect-model: 'h100\\n' holds '\\n'"),
], ids=["gpus", "memory", "rate", "hca-path", "watch-nan", "watch-inf", "watch-negative", "model-newline"])
def test_gpucheck_numbers_are_bounded(args, says):
    line = refused(run(GPUCHECK, *P5, "--readings", str(HEALTHY), *args))
    assert line.startswith("gpucheck: ") and says in line, line


@pytest.mark.parametrize(("make", "says"), [
    (lambda t: "/dev/zero", "gpucheck: /dev/zero: is a character device, not a readings file; name the file itself"),
    (lambda t: str(t / "fifo"), "fifo: is a FIFO (named pipe), not a readings file"),
    (lambda t: str(t / "loop"), "loop: is a symbolic link that loops"),
    (lambda t: _readings(t, "big.json", " " * ((1 << 20) + 1)), "is 1,048,577 bytes; a readings file may be at "
                                                                 "most 1,048,576"),
    (lambda t: _readings(t, "deep.json", "[" * 5000 + "]" * 5000), "deep.json: nested more than 64 deep"),
    (lambda t: _readings(t, "digits.json", '{"gpus": [], "x": ' + "9" * 5000 + "}"), "an integer of 5,000 digits"),
    (lambda t: _readings(t, "nan.json", '{"gpus": [NaN]}'), "NaN is not JSON"),
    (lambda t: _readings(t, "list.json", "[]"), "list.json: is not recorded readings (an object with a list of gpus)"),
    (lambda t: _readings(t, "gpu.json", '{"gpus": ["x"]}'), "gpu.json: gpus[0]: is not an object"),
    (lambda t: _readings(t, "field.json", json.dumps({"gpus": [{**json.loads(HEALTHY.read_text())["gpus"][0],
                                                                 "memory_total_bytes": "80GB"}]})),
     "field.json: gpus[0]: memory_total_bytes is str, not int"),
    (lambda t: _readings(t, "links.json", json.dumps({"gpus": [{**json.loads(HEALTHY.read_text())["gpus"][0],
                                                                 "nvlinks_active": 18}]})),
     "links.json: gpus[0]: nvlinks_active is not a list of true/false"),
    (lambda t: _readings(t, "ports.json", json.dumps({"gpus": [], "rdma_ports": {"mlx5_0/1": [1]}})),
     "ports.json: rdma_ports is not an object of ports, each null or of text attributes"),
    (lambda t: _readings(t, "many.json", json.dumps({"gpus": [{}] * 100000})), "lists 100,000 GPUs; a node has at "
                                                                                "most 64"),
], ids=["dev-zero", "fifo", "loop", "big", "deep", "digits", "nan", "list", "gpu", "field", "links", "ports", "many"])
def test_gpucheck_readings_are_read_bounded_and_checked(hostile, make, says):
    line = refused(run(GPUCHECK, *P5, "--readings", make(hostile)))
    assert line.startswith("gpucheck: ") and says in line, line


def test_gpucheck_watch_refuses_unusable_status_files_before_writing(hostile):
    heartbeat = hostile / "heartbeat"
    for flag, path, says in (("--status-file", hostile / "dir", "is not a regular file"),
                             ("--status-file", hostile / "fifo", "is not a regular file"),
                             ("--heartbeat-file", hostile / "none" / "beat", "is missing or cannot be written")):
        args = (flag, str(path), "--heartbeat-file" if flag == "--status-file" else "--status-file",
                str(heartbeat) if flag == "--status-file" else str(hostile / "status"))
        line = refused(run(GPUCHECK, *P5, "--readings", str(HEALTHY), "--watch", "1", *args))
        assert line.startswith(f"gpucheck: {flag} {path}: ") and says in line, line
        assert not heartbeat.exists() and not (hostile / "status").exists()  # nothing written


def test_gpucheck_look_alikes_still_work(tmp_path):
    """The largest legal expectations, readings through a symlink: judged (unhealthy, exit
    1: the node has 8 GPUs, not 64), not refused."""
    link = tmp_path / "readings.json"
    link.symlink_to(HEALTHY)
    done = run(GPUCHECK, *P5, "--readings", str(link))
    assert done.code == 0 and json.loads(done.out)["healthy"], done.err
    done = run(GPUCHECK, *P5, "--readings", str(link), "--expect-gpus", "64", "--expect-memory-gib", "1024")
    assert done.code == 1 and "8 GPUs visible" in done.out, done.err


# --- python -m workloads.features -----------------------------------------------------------

def features(*args: str) -> Done:
    if not FEATURES_PYTHON.exists():
        pytest.skip("needs .venv-features (make services)")
    env = {"MLPLAT_TENANT": "research", "MLPLAT_FEATURE_PROJECT": "research", "MLPLAT_DATASETS_BUCKET": "datasets"}
    return run("workloads.features", *args, python=FEATURES_PYTHON, env=env)


@pytest.mark.parametrize(("args", "says"), [
    (("serve", "--config", "c.yaml", "--port", "70000"), "error: argument --port: 70000 is out of range; use a whole "
                                                         "number from 1 to 65,535"),
    (("serve", "--config", "c.yaml", "--port", "0"), "error: argument --port: 0 is out of range"),
    (("serve", "--config", "c.yaml", "--workers", "99999999999999999999"), "error: argument --workers: "
                                                                           "99999999999999999999 is out of range"),
    (("materialize", "--config", "c.yaml", "--end", "2026-" + "1" * 5000),
     f"error: --end: '2026-{'1' * 35}' (cut; 5,005 characters) is not an ISO time"),
    (("dataset", "--config", "c.yaml", "--entities", "e", "--features", "v:f", "--name", "n", "--experiment",
      "x\ny"), "error: argument --experiment: 'x\\ny' holds '\\n'"),
    (("serve", "--config", "/dev/zero"), "error: /dev/zero: is a character device, not a feature_store.yaml; name "
                                         "the file itself"),
], ids=["port-high", "port-zero", "workers", "iso-time", "experiment-newline", "config-dev-zero"])
def test_features_numbers_and_config_are_bounded(args, says):
    line = refused(features(*args))
    assert line.startswith(says), line


def test_features_config_is_read_bounded(hostile):
    (hostile / "dup.yaml").write_text("project: research\nproject: analytics\n")
    (hostile / "laughs.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)))
    for name, says in (("fifo", "fifo: is a FIFO (named pipe), not a feature_store.yaml"),
                       ("loop", "loop: is a symbolic link that loops"),
                       ("dup.yaml", "dup.yaml: line 2: key 'project' appears twice (first on line 1); keep one"),
                       ("laughs.yaml", "laughs.yaml: its aliases expand to more than 1,000,000 values")):
        line = refused(features("materialize", "--config", str(hostile / name)))
        assert line.startswith("error: ") and says in line, line


def test_features_look_alikes_get_past_the_parser():
    """The largest port and worker count reach the config check (here: no such file)."""
    line = refused(features("serve", "--config", "missing.yaml", "--port", "65535", "--workers", "64"))
    assert line == "error: missing.yaml: no such file; check the path of the feature_store.yaml"


def test_the_entity_table_is_read_bounded(hostile):
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    import pandas as pd

    from workloads.features.dataset import read_entities
    from workloads.features.repo import FeatureInputError

    for name, says in (("fifo", "fifo: is a FIFO (named pipe), not a Parquet entity table"),
                       ("zero", "zero: is a character device, not a Parquet entity table"),
                       ("loop", "loop: is a symbolic link that loops"),
                       ("missing", "missing: no such entity table")):
        with pytest.raises(FeatureInputError) as raised:
            isolated(lambda: read_entities(str(hostile / name)) and None)
        assert says in str(raised.value) and "\n" not in str(raised.value)
    pd.DataFrame({"user": [1, 2], "event_timestamp": pd.to_datetime(["2026-01-01", "2026-01-02"], utc=True)}) \
        .to_parquet(hostile / "entities.parquet")
    (hostile / "entities-link.parquet").symlink_to(hostile / "entities.parquet")
    assert list(read_entities(str(hostile / "entities-link.parquet"))["user"]) == [1, 2]


def test_the_redis_password_file_is_read_bounded(hostile):
    """In the feature store's environment (Feast is there only): a device as the mounted
    password is one line, not an endless read."""
    if not FEATURES_PYTHON.exists():
        pytest.skip("needs .venv-features (make services)")
    probe = ("from workloads.features.online import PasswordFileCredentials as P\n"
             f"try:\n    P('u', {str(hostile / 'zero')!r}).get_credentials()\n"
             "except RuntimeError as err:\n    print(err)\n")
    done = subprocess.run([str(FEATURES_PYTHON), "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout == (f"{hostile / 'zero'}: is a character device, not a Redis password file; name the file "
                           "itself (the customer's Secret must be in the tenant's namespace)\n"), done.stderr[-2000:]


# --- python -m workloads.pipeline engine ------------------------------------------------------
# The engine's pods refuse a setting their spec or a mounted Secret got wrong before Airflow
# starts (workloads/pipeline/engine.py); its database secret, made by the tracking server, is
# tests/services/test_pipeline_engine.py's.

ENGINE = "workloads.pipeline"
AWS_ENGINE = {"MLPLAT_DB_DSN_FILE": "", "MLPLAT_TENANT": "research", "MLPLAT_DB_HOST": "db",
              "MLPLAT_PIPELINE_DB_SECRET_ARN": "arn:aws:secretsmanager:me-central-1:1:secret:x"}


@pytest.mark.parametrize(("name", "text", "says"), [
    ("fifo", None, "is a FIFO"),
    ("zero", None, "is a character device, not a database DSN file"),
    ("loop", None, "is a symbolic link that loops"),
    ("dsn", "mysql://u:p@db/x", "is not postgresql://"),
    ("dsn", "postgresql://u@db:5432/x", "the DSN has no password"),
    ("dsn", "x" * (1 << 20), "may be at most 65,536"),
], ids=["fifo", "dev-zero", "loop", "mysql", "no-password", "big"])
def test_the_engines_dsn_file_is_read_bounded(hostile, name, text, says):
    if text is not None:
        (hostile / name).write_text(text)
    line = refused(run(ENGINE, "engine", "migrate", env={"MLPLAT_DB_DSN_FILE": str(hostile / name)}))
    assert line.startswith("python -m workloads.pipeline engine migrate: error: ") and says in line, line


@pytest.mark.parametrize(("env", "says"), [
    ({"MLPLAT_PIPELINE_DB_SECRET_ARN": ""}, "MLPLAT_PIPELINE_DB_SECRET_ARN not set"),
    ({"MLPLAT_TENANT": ""}, "MLPLAT_TENANT not set"),
    ({"MLPLAT_PIPELINE_API_PORT": "80800"}, "is not a port"),
    ({"MLPLAT_TENANT": "Bad_Name"}, "is not a tenant name"),
    ({"MLPLAT_DB_PORT": "5432x"}, "MLPLAT_DB_PORT '5432x' is not a port"),
])
def test_a_setting_missing_from_the_engines_pod_is_one_line(tmp_path, env, says):
    line = refused(run(ENGINE, "engine", "api-server", env={**AWS_ENGINE, "AIRFLOW_HOME": str(tmp_path), **env}))
    assert line.startswith("python -m workloads.pipeline engine api-server: error: ") and says in line, line


# --- python -m workloads.train --------------------------------------------------------------

@pytest.mark.parametrize(("args", "says"), [
    (("--vocab-size", "99999999999999999999"), "train: error: argument --vocab-size: 99999999999999999999 is out of "
                                               "range; use a whole number from 1 to 10,000,000"),
    (("--log-every", "0"), "argument --log-every: 0 is out of range; use a whole number from 1 to 1,000,000,000"),
    (("--track-every", "0"), "argument --track-every: 0 is out of range"),
    (("--lr", "nan"), "argument --lr: 'nan' is not a finite number; use one from 0 to 10"),
    (("--dropout", "1.5"), "argument --dropout: 1.5 is out of range; use a number from 0 to 1"),
    (("--min-lr-ratio", "-0.1"), "argument --min-lr-ratio: -0.1 is out of range"),
    (("--seed", "-1"), "argument --seed: -1 is out of range; use a whole number from 0 to 4,294,967,295"),
    (("--micro-batch", "9" * 5000), "argument --micro-batch: '9999"),
    (("--synthetic-tokens", "1000000000000"), "argument --synthetic-tokens: 1000000000000 is out of range"),
    (("--peak-tflops", "inf"), "argument --peak-tflops: 'inf' is not a finite number"),
    (("--tp", "0"), "argument --tp: 0 is out of range"),
    (("--run-name", "run\x1b]0;pwned\x07"), "argument --run-name: 'run\\x1b]0;pwned\\x07' holds '\\x1b'"),
    (("--experiment", "a" * 300), f"argument --experiment: '{'a' * 40}' (cut; 300 characters) is longer than 256 "
                                  "characters"),
], ids=["vocab", "log-every", "track-every", "lr-nan", "dropout", "min-lr", "seed", "micro-batch-digits", "synthetic",
        "peak-inf", "tp", "run-name-escape", "experiment-long"])
def test_train_numbers_and_names_are_bounded(tmp_path, capsys, args, says):
    """In this process (torch is imported once): argparse's refusal, as the trainer's own
    one line and exit 2, nothing written."""
    from workloads.train.train import main as train_main

    data = tmp_path / "data"
    with pytest.raises(SystemExit) as exited:
        train_main(["--data", str(data), "--synthetic-tokens", "1000", "--metrics", str(tmp_path / "m.jsonl"),
                    *args])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and says in err, err
    assert err.startswith("train: error: argument ")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no shards, no metrics


def test_train_refuses_in_one_line_from_the_command_line(tmp_path):
    """The real entry point: one line from rank 0, none from the others."""
    line = refused(run("workloads.train", "--data", str(tmp_path), "--lr", "inf"))
    assert line == "train: error: argument --lr: 'inf' is not a finite number; use one from 0 to 10"
    done = run("workloads.train", "--data", str(tmp_path), "--lr", "inf", env={"RANK": "1"})
    assert done.code == 2 and done.err == "" and not any(tmp_path.iterdir())


def test_train_checks_its_flags_before_importing_torch():
    """`python -m workloads.train` as launched: every rank of every refused launch would
    spend seconds importing torch first."""
    code = ("import runpy, sys\n"
            "sys.argv = ['train', '--data', 'x', '--lr', 'inf']\n"
            "try:\n"
            "    runpy.run_module('workloads.train', run_name='__main__')\n"
            "except SystemExit as done:\n"
            "    print(done.code, sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n")
    done = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "2 []", (done.stdout, done.stderr[-2000:])
    assert "--lr: 'inf' is not a finite number" in done.stderr


def test_the_flags_precisions_are_the_trainers():
    from workloads.train import options, train

    assert sorted(options.PRECISION_NAMES) == sorted(train.PRECISIONS)


def test_train_outputs_are_checked_before_anything_starts(hostile, capsys):
    from workloads.train.train import main as train_main

    (hostile / "file").write_text("x")
    # The FIFO last: were it not refused, the run would block on it.
    for flag, path, says in (("--metrics", hostile / "dir", "dir: is a directory; name the file to write the metrics "
                                                            "file to"),
                             ("--checkpoint-dir", hostile / "file", "file: is not a directory; name a folder for the "
                                                                    "checkpoints"),
                             ("--metrics", hostile / "fifo", "fifo: is a FIFO (named pipe); name a regular file to "
                                                             "write the metrics file to")):
        with pytest.raises(SystemExit) as exited:
            train_main(["--data", str(hostile / "data"), flag, str(path)])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err == f"train: error: argument {flag}: {path}: {says.split(': ', 1)[1]}\n"
    assert not (hostile / "data").exists()


def test_train_largest_legal_numbers_are_parsed():
    from workloads.train.train import build_parser

    args = build_parser().parse_args([
        "--data", "d", "--vocab-size", "10000000", "--seed", str(2**32 - 1), "--max-steps", "1000000000",
        "--synthetic-tokens", "100000000", "--dropout", "1", "--lr", "10", "--min-lr-ratio", "1", "--tp", "65536",
        "--micro-batch", "65536", "--global-batch", str(1 << 24), "--seq-len", str(1 << 20), "--run-name", "r" * 256,
        "--lr", "0", "--grad-clip", "0", "--weight-decay", "0", "--max-steps", "0"])
    assert (args.vocab_size, args.seed, args.synthetic_tokens, args.lr, args.max_steps) == (
        10_000_000, 2**32 - 1, 100_000_000, 0.0, 0)


@pytest.mark.parametrize(("make", "says"), [
    (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a dataset manifest; name the file itself"),
    (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a dataset manifest"),
    (lambda p: p.symlink_to(p), "is a symbolic link that loops"),
    (lambda p: p.symlink_to(p.with_name("nowhere")), "no such file; check the path of the dataset manifest"),
    (lambda p: p.write_bytes(b" " * ((16 << 20) + 1)), "is 16,777,217 bytes; a dataset manifest may be at most "
                                                       "16,777,216"),
    (lambda p: p.write_text("[" * 100000 + "]" * 100000), "nested more than 64 deep"),
    (lambda p: p.write_text('{"shards": [{"tokens": ' + "1" * 5000 + "}]}"), "an integer of 5,000 digits"),
], ids=["fifo", "dev-zero", "loop", "dangling", "big", "deep", "digits"])
def test_a_dataset_manifest_is_read_bounded(tmp_path, make, says):
    from workloads.train import dataset_version as dv

    path = tmp_path / dv.MANIFEST
    make(path)
    with pytest.raises(dv.DatasetMismatch) as raised:
        isolated(lambda: dv.load_or_build(tmp_path) and None)
    message = str(raised.value)
    assert message.startswith(f"{path}: not a readable dataset manifest (") and says in message, message
    assert "\n" not in message


def test_a_dataset_manifest_through_a_symlink_is_read(tmp_path):
    from workloads.train import dataset_version as dv
    from workloads.train.data import generate_synthetic_shards

    shards = tmp_path / "shards"
    generate_synthetic_shards(shards, num_shards=2, tokens_per_shard=1000, vocab_size=64, seed=0)
    version = dv.build(shards, "synthetic")
    real = dv.write(version, tmp_path)  # beside the shards' folder, linked into it
    (shards / dv.MANIFEST).symlink_to(real)
    assert dv.load_or_build(shards).id == version.id
