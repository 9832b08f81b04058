"""Token shards the distributed training tests share (each module gets its own copy)."""

from __future__ import annotations

import pytest

from workloads.train.data import generate_synthetic_shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("shards")
    generate_synthetic_shards(directory, num_shards=4, tokens_per_shard=25000, vocab_size=256, seed=0)
    return directory
