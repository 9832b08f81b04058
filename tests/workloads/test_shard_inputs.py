"""What sits in a data directory or a checkpoint folder a user names is read bounded: a FIFO
named like a token shard or a checkpoint's config, or a file that is not a shard, is one
line and exit 2, never a hang or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.train.data import generate_synthetic_shards

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("plant", ["fifo", "not-a-shard"])
def test_a_data_directory_holding_what_is_not_a_shard_is_one_line(tmp_path, plant):
    data = tmp_path / "data"
    generate_synthetic_shards(data, num_shards=1, tokens_per_shard=5000, vocab_size=256, seed=0)
    if plant == "fifo":
        os.mkfifo(data / "shard_00009.bin")
    else:
        (data / "shard_00009.bin").write_bytes(b"\x00" * 3)
    done = run("workloads.train", "--data", str(data), "--model", "tiny", "--max-steps", "1", "--device", "cpu",
               "--metrics", str(tmp_path / "m.jsonl"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "shard_00009.bin" in lines[0], done.stderr[-2000:]
    assert not (tmp_path / "m.jsonl").exists()


@pytest.mark.parametrize("plant", ["fifo", "huge", "nested"])
def test_a_checkpoint_whose_config_is_not_one_is_one_line(tmp_path, plant):
    checkpoint = tmp_path / "ckpt"
    step = checkpoint / "step_00000001"
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"")
    if plant == "fifo":  # not taken for a complete checkpoint: nothing opens it
        os.mkfifo(step / "config.json")
    elif plant == "huge":
        (step / "config.json").write_text('{"model": "' + "x" * (2 << 20) + '"}')
    else:
        (step / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    done = run("workloads.serve", "export", "--checkpoint", str(checkpoint), "--repository", str(tmp_path / "repo"),
               "--model-name", "gpt", "--device", "cpu")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert ("no complete checkpoint" if plant == "fifo" else "config.json") in lines[0], lines
    assert not (tmp_path / "repo").exists()
