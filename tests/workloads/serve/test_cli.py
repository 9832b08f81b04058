"""`python -m workloads.serve`: bad input is one line and exit 2; export publishes a
parity-checked version that Triton's config parser accepts."""

from __future__ import annotations

import difflib
import re
import shutil

import subprocess
import sys
from pathlib import Path

import pytest

from workloads.serve.cli import main
from workloads.serve.triton_config import parse

REPO = Path(__file__).resolve().parents[3]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workloads.serve", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, line", [
    (["--model-name", "gpt 2"],
     "--model-name: model name 'gpt 2' is not servable: use 1-63 letters, digits, '_', '-' or '.', starting and "
     "ending with a letter or digit (it is a directory, a URL path segment and a Kubernetes label value)"),
    (["--model-name", "gpt", "--max-batch-size", "99999999999"],
     "--max-batch-size: max batch size 99999999999 is above Triton's limit 2147483647"),
    (["--model-name", "gpt", "--instances", "3000000000"],
     "--instances: instance count 3000000000 is above Triton's limit 2147483647"),
    (["--model-name", "gpt", "--max-queue-delay-us", "100000000000000000000"],
     "--max-queue-delay-us: max queue delay 100000000000000000000 us is above Triton's limit 18446744073709551615"),
    (["--model-name", "gpt", "--max-batch-size", "16", "--preferred-batch-sizes", "8", "32"],
     "--preferred-batch-sizes: preferred batch size 32 is above the max batch size 16; use sizes from 1 to 16"),
    (["--model-name", "gpt", "--max-queue-delay-us", "-100"],
     "--max-queue-delay-us: max queue delay -100 us is below zero; use 0 or more microseconds"),
    (["--model-name", "gpt", "--stack", "smb", "--device", "gpu"],
     "--device: 'gpu' is not available: the smb stack is CPU-only; use 'cpu' (ONNX Runtime on the CPU pool)"),
    # dev serves no model: its file has no mlplat:inference, so no modelName to default to.
    (["--stack", "dev"],
     "--model-name is required: --stack dev serves no model (no mlplat:inference); pass --model-name NAME, or "
     "--stack of a stack that serves a model (prod, smb)"),
    ([], "--model-name is required: no --stack to take mlplat:inference.modelName from; pass --model-name NAME, or "
     "--stack of a stack that serves a model (prod, smb)"),
])
def test_bad_input_is_one_line_and_exit_2(args, line):
    done = run_cli("config", "--vocab-size", "256", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"python -m workloads.serve config: error: {line}\n"
    assert done.stdout == ""


def test_export_refuses_bad_settings_before_loading_anything(tmp_path):
    done = run_cli("export", "--checkpoint", str(tmp_path / "none"), "--repository", str(tmp_path / "repo"),
                   "--model-name", "gpt", "--stack", "smb", "--device", "gpu")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.endswith("error: --device: 'gpu' is not available: the smb stack is CPU-only; use 'cpu' "
                                "(ONNX Runtime on the CPU pool)\n")
    assert not (tmp_path / "repo").exists()


def test_missing_checkpoint_is_bad_input(tmp_path, capsys):
    code = main(["export", "--checkpoint", str(tmp_path), "--repository", str(tmp_path / "repo"),
                 "--model-name", "gpt"])
    assert code == 2
    assert capsys.readouterr().err == (f"python -m workloads.serve export: error: --checkpoint {tmp_path}: "
                                       f"cannot be loaded: no complete checkpoint in {tmp_path}\n")


def test_export_publishes_versions_and_rolls_back(checkpoint_root, tmp_path, capsys):
    repo = tmp_path / "repo"
    args = ["export", "--checkpoint", str(checkpoint_root), "--repository", str(repo), "--model-name", "gpt",
            "--device", "cpu", "--preferred-batch-sizes", "4", "8", "--max-batch-size", "8",
            "--max-queue-delay-us", "500", "--keep-versions", "2"]
    assert main(args) == 0
    # The int8 variant has the same tensors, so it is a version of the same model: the
    # two can be served side by side.
    assert main([*args, "--precision", "int8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"published gpt version 1 (fp32) to {repo} (ONNX Runtime vs PyTorch max |diff| ")
    assert re.match(rf"published gpt version 2 \(int8\) to {repo} \(ONNX Runtime vs PyTorch max \|diff\| \S+; "
                    r"int8 vs fp32: top-1 agreement (9[5-9]|100)\.\d%, top-16 overlap \d+\.\d% over 256 requests", out[1])
    assert sorted(p.name for p in (repo / "gpt").iterdir()) == ["1", "2", "config.pbtxt"]
    assert (repo / "gpt/2/PUBLISHED").is_file()
    assert 100_000 < (repo / "gpt/2/model.onnx").stat().st_size < (repo / "gpt/1/model.onnx").stat().st_size / 2
    config = parse((repo / "gpt/config.pbtxt").read_text())
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert [(o.name, list(o.dims)) for o in config.output] == [("logits", [256]), ("top_k_ids", [16]),
                                                               ("top_k_logprobs", [16])]

    assert main(["check", str(repo / "gpt/config.pbtxt")]) == 0
    assert capsys.readouterr().out == f"{repo}/gpt/config.pbtxt: ok (gpt, max batch 8)\n"

    assert main(["rollback", "--repository", str(repo), "--model-name", "gpt"]) == 0
    assert capsys.readouterr().out.startswith("retired gpt version 2 (kept as retired-2); version 1 is now the "
                                              "newest.")
    assert sorted(p.name for p in (repo / "gpt").iterdir()) == ["1", "config.pbtxt", "retired-2"]
    # The next export takes a number never issued before.
    assert main(args) == 0
    assert capsys.readouterr().out.startswith(f"published gpt version 3 (fp32) to {repo}")


def test_export_refuses_a_version_whose_tensors_differ_from_the_published_config(checkpoint_root, tmp_path,
                                                                                 capsys):
    """Triton has one config per model: a checkpoint with another vocabulary would leave the
    versions kept beside it unloadable."""
    repo = tmp_path / "repo"
    assert main(["config", "--vocab-size", "512", "--model-name", "gpt", "--out", str(repo / "gpt/config.pbtxt")]) == 0
    before = (repo / "gpt/config.pbtxt").read_text()
    code = main(["export", "--checkpoint", str(checkpoint_root), "--repository", str(repo), "--model-name", "gpt"])
    assert code == 2
    assert capsys.readouterr().err == (
        "python -m workloads.serve export: error: --model-name gpt: the published config has input_ids INT64 [-1]; "
        "logits FP32 [512]; top_k_ids INT64 [16]; top_k_logprobs FP32 [16]; max batch on; this version needs "
        "input_ids INT64 [-1]; logits FP32 [256]; top_k_ids INT64 [16]; top_k_logprobs FP32 [16]; max batch on; Triton has one config for all versions of a model, so publish this checkpoint under a new "
        "--model-name\n")
    assert (repo / "gpt/config.pbtxt").read_text() == before
    assert sorted(p.name for p in (repo / "gpt").iterdir()) == ["config.pbtxt"]


def test_a_damaged_checkpoint_is_bad_input(checkpoint_root, tmp_path, capsys):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(checkpoint_root, damaged)
    for shard in damaged.rglob("*.distcp"):
        shard.write_bytes(shard.read_bytes()[:100])
    code = main(["export", "--checkpoint", str(damaged), "--repository", str(tmp_path / "repo"), "--model-name", "gpt"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"python -m workloads.serve export: error: --checkpoint {damaged}: cannot be loaded: ")
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("make_args, line", [
    (lambda t: ["config", "--vocab-size", "256", "--model-name", "gpt", "--out", f"{t}/file/config.pbtxt"],
     lambda t: f"python -m workloads.serve config: error: --out {t}/file/config.pbtxt: cannot be written: File "
               f"exists: {t}/file\n"),
    (lambda t: ["check", f"{t}/binary.pbtxt"],
     lambda t: f"python -m workloads.serve check: error: {t}/binary.pbtxt: not a text file (config.pbtxt is UTF-8 "
               "protobuf text)\n"),
    (lambda t: ["rollback", "--repository", f"{t}/repo", "--model-name", "../x"],
     lambda t: "python -m workloads.serve rollback: error: --model-name: model name '../x' is not servable: use "
               "1-63 letters, digits, '_', '-' or '.', starting and ending with a letter or digit (it is a directory, "
               "a URL path segment and a Kubernetes label value)\n"),
    (lambda t: ["rollback", "--repository", f"{t}/file", "--model-name", "gpt"],
     lambda t: f"python -m workloads.serve rollback: error: --repository: {t}/file: is a file; give a directory or "
               "an s3:// URI\n"),
    (lambda t: ["smoke", "--url", "localhost:1", "--model-name", "gpt", "--root-certificates", f"{t}/missing.pem"],
     lambda t: f"python -m workloads.serve smoke: error: --root-certificates {t}/missing.pem: no such file\n"),
])
def test_unusable_paths_are_one_line_and_exit_2(make_args, line, tmp_path, capsys):
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "binary.pbtxt").write_bytes(b"\xff\xfe\x00name")
    assert main(make_args(tmp_path)) == 2
    assert capsys.readouterr().err == line(tmp_path)


def test_export_into_a_file_is_bad_input(checkpoint_root, tmp_path, capsys):
    (tmp_path / "file").write_text("not a directory")
    code = main(["export", "--checkpoint", str(checkpoint_root), "--repository", str(tmp_path / "file"),
                 "--model-name", "gpt"])
    assert code == 2
    assert capsys.readouterr().err == (f"python -m workloads.serve export: error: --repository: {tmp_path}/file: "
                                       "is a file; give a directory or an s3:// URI\n")


def test_check_rejects_a_typo_and_a_bad_batch(tmp_path, capsys):
    path = tmp_path / "gpt" / "config.pbtxt"
    path.parent.mkdir()
    assert main(["config", "--vocab-size", "256", "--model-name", "gpt", "--out", str(path)]) == 0
    good = path.read_text()
    path.write_text(good.replace("preferred_batch_size: 32", "prefered_batch_size: 32"))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m workloads.serve check: error: {path}: ") and err.count("\n") == 1
    assert 'has no field named "prefered_batch_size"' in err
    path.write_text(good.replace("preferred_batch_size: 32", "preferred_batch_size: 33"))
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err == (f"python -m workloads.serve check: error: {path}: preferred batch size 33 "
                                       "is above the max batch size 32; use sizes from 1 to 32\n")


def test_the_stack_is_the_source_of_the_batching_settings(capsys):
    """`--stack` reads mlplat:inference, so the cluster's Triton and the exported config agree."""
    from infra.config import load_stack

    assert main(["config", "--vocab-size", "256", "--stack", "prod"]) == 0
    prod = parse(capsys.readouterr().out)
    settings = load_stack("prod").inference
    assert prod.name == settings.model_name and prod.max_batch_size == settings.max_batch_size
    assert list(prod.dynamic_batching.preferred_batch_size) == list(settings.preferred_batch_sizes)
    assert prod.dynamic_batching.max_queue_delay_microseconds == settings.max_queue_delay_microseconds
    assert prod.version_policy.latest.num_versions == settings.keep_versions
    assert prod.instance_group[0].kind == prod.instance_group[0].KIND_GPU
    assert "intra_op_thread_count" not in prod.parameters

    assert main(["config", "--vocab-size", "256", "--stack", "smb"]) == 0
    smb = parse(capsys.readouterr().out)
    assert smb.instance_group[0].kind == smb.instance_group[0].KIND_CPU
    # Each CPU replica has cpuPerReplica cores, shared by its instances; ONNX Runtime is held to them.
    settings = load_stack("smb").inference
    assert smb.instance_group[0].count == settings.instance_count
    assert smb.parameters["intra_op_thread_count"].string_value == str(
        max(1, settings.cpu_per_replica // settings.instance_count))
    # A flag still wins over the stack, and is checked like the stack's value.
    assert main(["config", "--vocab-size", "256", "--stack", "smb", "--max-queue-delay-us", "-1"]) == 2
    assert capsys.readouterr().err.endswith("--max-queue-delay-us: max queue delay -1 us is below zero; use 0 or "
                                            "more microseconds\n")


# --- canary: a published version becomes the stack's served version -----------------------


def _published_repository(tmp_path, checkpoint_root, count: int) -> Path:
    repo = tmp_path / "repo"
    args = ["export", "--checkpoint", str(checkpoint_root), "--repository", str(repo), "--model-name", "gpt",
            "--device", "cpu", "--preferred-batch-sizes", "4", "8", "--max-batch-size", "8", "--keep-versions", "2"]
    for _ in range(count):
        assert main(args) == 0
    return repo


def test_a_canary_of_a_version_not_in_the_repository_is_refused(checkpoint_root, tmp_path, capsys):
    repo = _published_repository(tmp_path, checkpoint_root, 2)
    before = (REPO / "stacks" / "Pulumi.prod.yaml").read_bytes()
    capsys.readouterr()
    code = main(["canary", "--stack", "prod", "--repository", str(repo), "--version", "7"])
    assert code == 2
    assert capsys.readouterr().err == (
        "python -m workloads.serve canary: error: --version 7: gpt has no completely published version 7 in the "
        "repository (published: 1, 2); export it first\n")
    assert (REPO / "stacks" / "Pulumi.prod.yaml").read_bytes() == before  # nothing written


def test_a_canary_edits_only_the_version_and_keeps_the_stack_files_comments(checkpoint_root, tmp_path):
    from workloads.serve.canary import set_version

    stacks = tmp_path / "stacks"
    shutil.copytree(REPO / "stacks", stacks)
    original = (stacks / "Pulumi.prod.yaml").read_text()
    change = set_version("prod", 2, [1, 2], stacks_dir=stacks)
    assert (change.model, change.before, change.after, change.strategy) == ("gpt", 1, 2, "canary")
    edited = (stacks / "Pulumi.prod.yaml").read_text()
    # The one line changed; every comment and every other line as it was.
    added = [line for line in difflib.ndiff(original.splitlines(), edited.splitlines()) if line.startswith(("+", "-"))]
    assert added == ["-     version: 1", "+     version: 2"]
    from infra.config import load_stack

    assert load_stack("prod", stacks).inference.version == 2
    with pytest.raises(Exception, match="it is already the served version of gpt"):
        set_version("prod", 2, [1, 2], stacks_dir=stacks)


def test_the_smoke_client_refuses_a_token_file_that_holds_no_jwt(tmp_path, capsys):
    bad = tmp_path / "token"
    bad.write_bytes(b"\xff\xfe not a token")
    assert main(["smoke", "--url", "127.0.0.1:1", "--model-name", "gpt", "--token-file", str(bad)]) == 2
    assert capsys.readouterr().err == (f"python -m workloads.serve smoke: error: --token-file {bad}: cannot be read: "
                                       "not a text token\n")
    bad.write_text("just-a-password")
    assert main(["smoke", "--url", "127.0.0.1:1", "--model-name", "gpt", "--token-file", str(bad)]) == 2
    assert "does not hold a JWT" in capsys.readouterr().err
