"""Token shards and the loader: format, determinism, and batches that do not depend on
how many processes share a step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workloads.train.data import (
    HEADER_BYTES,
    ShardedTokens,
    generate_synthetic_shards,
    list_shards,
    micro_batch_start,
    read_shard,
    synthetic_tokens,
    write_shard,
)


def test_shard_round_trip(tmp_path):
    tokens = np.arange(1000) % 300
    path = write_shard(tmp_path / "a.bin", tokens, vocab_size=300)
    assert path.stat().st_size == HEADER_BYTES + 2 * 1000  # uint16 for a small vocabulary
    np.testing.assert_array_equal(read_shard(path), tokens)
    assert not list(tmp_path.glob("*.partial"))


def test_large_vocabulary_uses_four_bytes(tmp_path):
    tokens = np.array([0, 70000, 99999])
    path = write_shard(tmp_path / "a.bin", tokens, vocab_size=100000)
    assert path.stat().st_size == HEADER_BYTES + 4 * 3
    np.testing.assert_array_equal(read_shard(path), tokens)


def test_tokens_outside_the_vocabulary_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\)"):
        write_shard(tmp_path / "a.bin", np.array([3, 10]), vocab_size=10)


def test_foreign_file_is_refused(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"NOTASHARD" + bytes(64))
    with pytest.raises(ValueError, match="not a token shard"):
        read_shard(path)


def test_empty_directory_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.bin token shards"):
        list_shards(tmp_path)


def test_synthetic_chain_is_learnable():
    """Each token has at most 4 successors, so a model can do far better than chance."""
    tokens = synthetic_tokens(20000, vocab_size=64, seed=1)
    successors = {}
    for a, b in zip(tokens[:-1], tokens[1:]):
        successors.setdefault(int(a), set()).add(int(b))
    assert max(len(s) for s in successors.values()) <= 4
    assert len(set(tokens.tolist())) > 32  # and it still visits much of the vocabulary


def test_synthetic_shards_are_reproducible(tmp_path):
    a = generate_synthetic_shards(tmp_path / "a", 2, 500, vocab_size=64, seed=3)
    b = generate_synthetic_shards(tmp_path / "b", 2, 500, vocab_size=64, seed=3)
    assert [p.name for p in a] == ["shard_00000.bin", "shard_00001.bin"]
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes()


@pytest.fixture
def shards(tmp_path):
    # Shards of unequal length: samples must never cross a shard boundary.
    write_shard(tmp_path / "s0.bin", np.arange(0, 41), vocab_size=1000)  # 4 samples of 10+1
    write_shard(tmp_path / "s1.bin", np.arange(500, 531), vocab_size=1000)  # 3 samples
    return tmp_path


def test_an_epoch_visits_every_sample_once(shards):
    data = ShardedTokens(shards, seq_len=10, seed=0)
    assert data.num_samples == 7
    firsts = sorted(int(data.sample(i)[0]) for i in range(7))
    assert firsts == [0, 10, 20, 30, 500, 510, 520]
    for i in range(7):
        sample = data.sample(i)
        assert len(sample) == 11 and np.all(np.diff(sample) == 1)  # contiguous, inside one shard


def test_order_is_fixed_by_seed_and_differs_between_epochs(shards):
    a, b = ShardedTokens(shards, 10, seed=5), ShardedTokens(shards, 10, seed=5)
    first = [int(a.sample(i)[0]) for i in range(14)]
    assert first == [int(b.sample(i)[0]) for i in range(14)]
    assert sorted(first[7:]) == sorted(first[:7])
    orders = {tuple(int(ShardedTokens(shards, 10, seed=s).sample(i)[0]) for i in range(7)) for s in range(6)}
    assert len(orders) > 1


def test_batch_shifts_targets_by_one(shards):
    batch = ShardedTokens(shards, 10, seed=0).batch(0, 3)
    assert batch.inputs.shape == batch.targets.shape == (3, 10)
    assert batch.inputs.dtype == torch.int64
    torch.testing.assert_close(batch.inputs[:, 1:], batch.targets[:, :-1])


@pytest.mark.parametrize("world_size, micro_batch, accum", [(1, 8, 1), (2, 4, 1), (4, 2, 1), (1, 4, 2), (2, 2, 2)])
def test_step_covers_the_same_samples_for_any_layout(world_size, micro_batch, accum):
    """Global batch 8: every layout of processes x micro-batches x accumulation must cover
    samples [seen, seen + 8) exactly once."""
    seen = 24
    covered = []
    for micro in range(accum):
        for rank in range(world_size):
            first = micro_batch_start(seen, micro, rank, micro_batch, world_size)
            covered.extend(range(first, first + micro_batch))
    assert sorted(covered) == list(range(24, 32))


def test_rank_slices_concatenate_to_the_single_process_batch(shards):
    data = ShardedTokens(shards, 10, seed=0)
    whole = data.batch(micro_batch_start(5, 0, 0, 4, 1), 4).inputs
    halves = [data.batch(micro_batch_start(5, 0, r, 2, 2), 2).inputs for r in range(2)]
    torch.testing.assert_close(torch.cat(halves), whole)
