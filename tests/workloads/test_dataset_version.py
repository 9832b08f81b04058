"""Dataset versions: content-addressed manifests, checked byte for byte, and a trainer that
resumes only on the data and model its checkpoint was made with (one line, exit 2)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.workloads.launch import events, torchrun
from workloads.train import dataset_version as dv
from workloads.train.data import ShardedTokens, generate_synthetic_shards, write_shard
from workloads.train.train import main


@pytest.fixture
def shards(tmp_path):
    directory = tmp_path / "shards"
    generate_synthetic_shards(directory, num_shards=3, tokens_per_shard=4000, vocab_size=256, seed=0)
    return directory


def test_a_manifest_is_content_addressed_and_counts_what_the_loader_cuts(shards, tmp_path):
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text('{"vocab": 256}')
    version = dv.build(shards, tokenizer, sources=["s3://corpus/2026-11/"])
    assert version.id == version.content_id() and version.id.startswith("sha256:")
    assert [s.name for s in version.shards] == ["shard_00000.bin", "shard_00001.bin", "shard_00002.bin"]
    assert all(s.tokens == 4000 for s in version.shards)
    assert version.tokenizer == f"sha256:{dv.file_sha256(tokenizer)}"
    assert version.samples(64) == ShardedTokens(shards, 64, seed=0).num_samples
    # Same bytes and provenance, same id; another source or tokenizer, another version.
    copy = shutil.copytree(shards, tmp_path / "copy")
    assert dv.build(copy, tokenizer, sources=["s3://corpus/2026-11/"]).id == version.id
    assert dv.build(shards, tokenizer, sources=["s3://corpus/2026-12/"]).id != version.id
    assert dv.build(shards, "gpt2-bpe").id != version.id


def test_written_manifests_are_read_back_and_never_replaced(shards):
    version = dv.build(shards, "gpt2-bpe")
    path = dv.write(version, shards)
    assert dv.read(path) == version
    assert dv.write(version, shards) == path  # the same version again: nothing to do
    other = dv.build(shards, "another-tokenizer")
    with pytest.raises(dv.DatasetMismatch, match="a dataset version is immutable"):
        dv.write(other, shards)
    assert dv.read(path) == version


def test_an_edited_manifest_is_refused(shards):
    path = dv.write(dv.build(shards, "gpt2-bpe"), shards)
    body = json.loads(path.read_text())
    body["shards"][0]["tokens"] += 1
    path.write_text(json.dumps(body))
    with pytest.raises(dv.DatasetMismatch, match="is not the hash of its content"):
        dv.read(path)
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    with pytest.raises(dv.DatasetMismatch, match="not a readable dataset manifest") as caught:
        dv.read(path)
    assert "\n" not in str(caught.value)


def test_verify_names_the_shard_that_differs(shards):
    version = dv.build(shards, "gpt2-bpe")
    dv.verify(version, shards)
    tampered = shards / "shard_00001.bin"
    data = bytearray(tampered.read_bytes())
    data[-1] ^= 1  # one bit of one token: same size
    tampered.write_bytes(bytes(data))
    with pytest.raises(dv.DatasetMismatch) as caught:
        dv.verify(version, shards)
    assert str(caught.value).startswith(f"{tampered}: does not match dataset {version.id}")
    tampered.unlink()
    with pytest.raises(dv.DatasetMismatch, match="shard_00001.bin: missing"):
        dv.verify(version, shards)


def test_an_added_shard_is_a_new_version(shards):
    version = dv.build(shards, "gpt2-bpe")
    write_shard(shards / "shard_00003.bin", np.arange(100), vocab_size=256)
    with pytest.raises(dv.DatasetMismatch, match="shard_00003.bin: not in dataset"):
        dv.verify(version, shards)


# --- the trainer ------------------------------------------------------------------------


def _train(shards, run, *extra):
    return main(["--data", str(shards), "--model", "tiny", "--precision", "fp32", "--micro-batch", "4",
                 "--metrics", str(run / "m.jsonl"), "--checkpoint-dir", str(run / "ckpt"), *extra])


def test_resume_refuses_a_tampered_shard_with_its_name(shards, tmp_path, capsys):
    version = dv.build(shards, "gpt2-bpe")
    dv.write(version, shards)
    assert _train(shards, tmp_path, "--max-steps", "2") == 0
    tampered = shards / "shard_00002.bin"
    data = bytearray(tampered.read_bytes())
    data[100] ^= 1
    tampered.write_bytes(bytes(data))
    capsys.readouterr()

    assert _train(shards, tmp_path, "--max-steps", "4") == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"train: error: {tampered}: does not match dataset {version.id} (sha256 or size "
                                "differs from its manifest); restore the shard or make a new dataset version"]
    assert events(tmp_path / "m.jsonl", "start")[-1]["step"] == 0  # the second run never started


def test_resume_refuses_other_data_and_another_model(shards, tmp_path, capsys):
    assert _train(shards, tmp_path, "--max-steps", "2") == 0  # no manifest: built from the shards
    [start] = events(tmp_path / "m.jsonl", "start")
    assert start["dataset"] == dv.build(shards, "unrecorded").id
    recorded = json.loads(next((tmp_path / "ckpt").glob("step_*/config.json")).read_text())["dataset"]
    assert recorded == start["dataset"]

    write_shard(shards / "shard_00003.bin", np.arange(200) % 256, vocab_size=256)  # one more shard
    capsys.readouterr()
    assert _train(shards, tmp_path, "--max-steps", "4") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("train: error: cannot resume from ") and "the dataset version differs (checkpoint " \
        f"{recorded}, --data sha256:" in err and "\n" not in err

    (shards / "shard_00003.bin").unlink()
    assert _train(shards, tmp_path, "--max-steps", "4", "--n-layer", "3") == 2
    err = capsys.readouterr().err.strip()
    assert "the model config differs (n_layer 2 -> 3)" in err and "\n" not in err
    assert _train(shards, tmp_path, "--max-steps", "4") == 0  # the same data and model: resumes
    assert events(tmp_path / "m.jsonl", "start")[-1]["step"] == 2


def test_two_ranks_refuse_a_tampered_shard_at_resume(shards, tmp_path):
    dv.write(dv.build(shards, "gpt2-bpe"), shards)
    args = ["--data", str(shards), "--model", "tiny", "--precision", "fp32", "--micro-batch", "2",
            "--metrics", str(tmp_path / "m.jsonl"), "--checkpoint-dir", str(tmp_path / "ckpt")]
    done = torchrun(2, "workloads.train", *args, "--max-steps", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    tampered = shards / "shard_00000.bin"
    data = bytearray(tampered.read_bytes())
    data[-2] ^= 1
    tampered.write_bytes(bytes(data))

    refused = torchrun(2, "workloads.train", *args, "--max-steps", "4")
    assert refused.returncode != 0
    assert f"train: error: {tampered}: does not match dataset" in refused.stderr
