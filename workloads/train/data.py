"""Tokenized binary shards and a loader whose position is one integer.

Shard file (`*.bin`): a 16-byte header, then the tokens as little-endian unsigned integers.

    bytes 0-7    magic b"MLPTOKS1"
    bytes 8-11   uint32 bytes per token (2 for vocabularies up to 65536, else 4)
    bytes 12-15  uint32 reserved (0)

A *sample* is `seq_len + 1` consecutive tokens of one shard (inputs and targets shifted by
one); shard k holds `(tokens_k - 1) // seq_len` of them. Every epoch visits all samples in
an order fixed by (seed, epoch). Batches are cut from that order by a global sample counter,
so where the run stands is one number (`samples_seen`), and the samples of a step do not
depend on how many processes share it: rank r of w takes the r-th of w equal slices.
"""

from __future__ import annotations

import os
import shutil
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

MAGIC = b"MLPTOKS1"
HEADER = struct.Struct("<8sII")
HEADER_BYTES = HEADER.size  # 16


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


def write_shard(path: str | Path, tokens: np.ndarray, vocab_size: int) -> Path:
    """Write one shard; the file appears under its final name only when complete."""
    path = Path(path)
    dtype = token_dtype(vocab_size)
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as fh:
        fh.write(HEADER.pack(MAGIC, dtype.itemsize, 0))
        fh.write(tokens.astype(dtype).tobytes())
    partial.replace(path)
    return path


class ShardError(ValueError):
    """A file in the data directory is not a token shard: one line, exit 2."""


def read_shard(path: str | Path) -> np.ndarray:
    """The tokens of one shard, memory-mapped (nothing is read until used)."""
    path = Path(path)
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open, a device never end
        raise ShardError(f"{path}: not a regular file, so not a token shard")
    with open(path, "rb") as fh:
        head = fh.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        raise ShardError(f"{path}: too short to be a token shard")
    magic, width, _ = HEADER.unpack(head)
    if magic != MAGIC or width not in (2, 4):
        raise ShardError(f"{path}: not a token shard (magic {magic!r}, {width} bytes per token)")
    return np.memmap(path, dtype=np.dtype(f"<u{width}"), mode="r", offset=HEADER_BYTES)


def synthetic_tokens(num_tokens: int, vocab_size: int, seed: int, successors: int = 4) -> np.ndarray:
    """Tokens from a random sparse Markov chain: each token is followed by one of
    `successors` fixed tokens. A model can learn it (the loss falls from ln(vocab) towards
    ln(successors)), unlike uniform noise."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, vocab_size, size=(vocab_size, successors)).ravel().tolist()
    # Row offset plus choice, drawn up front; the walk itself is sequential by nature and
    # runs on plain Python ints (several times faster than indexing NumPy arrays).
    choices = rng.integers(0, successors, size=num_tokens).tolist()
    token = int(rng.integers(0, vocab_size))
    out = [token]
    append = out.append
    for choice in choices[1:]:
        token = table[token * successors + choice]
        append(token)
    return np.asarray(out, dtype=np.int64)


def generate_synthetic_shards(
    directory: str | Path, num_shards: int, tokens_per_shard: int, vocab_size: int, seed: int = 0
) -> list[Path]:
    """Write `num_shards` synthetic shards (one chain, so shards share its statistics).

    They are written into a temporary sibling directory that is then renamed, so a run
    killed half-way never leaves a partial set that a restarted run would train on."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = directory.with_name(f".{directory.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    tokens = synthetic_tokens(num_shards * tokens_per_shard, vocab_size, seed)
    for k in range(num_shards):
        write_shard(staging / f"shard_{k:05d}.bin", tokens[k * tokens_per_shard : (k + 1) * tokens_per_shard],
                    vocab_size)
    if directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()
    os.replace(staging, directory)
    return sorted(directory.glob("shard_*.bin"))


def list_shards(directory: str | Path) -> list[Path]:
    shards = sorted(Path(directory).glob("*.bin"))
    if not shards:
        raise FileNotFoundError(f"no *.bin token shards in {directory}")
    return shards


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor  # [B, T] int64
    targets: torch.Tensor  # [B, T] int64


class ShardedTokens:
    """All samples of a shard directory, in a seeded order per epoch."""

    def __init__(self, directory: str | Path, seq_len: int, seed: int) -> None:
        self.shards = [read_shard(p) for p in list_shards(directory)]
        self.seq_len = seq_len
        self.seed = seed
        counts = np.array([max(0, (len(s) - 1) // seq_len) for s in self.shards], dtype=np.int64)
        if counts.sum() == 0:
            raise ValueError(f"shards in {directory} hold no sample of {seq_len + 1} tokens")
        self.starts = np.concatenate([[0], np.cumsum(counts)])  # first sample index of each shard
        self.num_samples = int(counts.sum())
        self._order_epoch = -1
        self._order: np.ndarray | None = None

    def _order_of(self, epoch: int) -> np.ndarray:
        if epoch != self._order_epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._order = rng.permutation(self.num_samples)
            self._order_epoch = epoch
        assert self._order is not None
        return self._order

    def sample(self, position: int) -> np.ndarray:
        """The `position`-th sample of the whole run (epochs follow each other)."""
        epoch, offset = divmod(position, self.num_samples)
        index = int(self._order_of(epoch)[offset])
        shard = int(np.searchsorted(self.starts, index, side="right") - 1)
        start = (index - int(self.starts[shard])) * self.seq_len
        return np.asarray(self.shards[shard][start : start + self.seq_len + 1], dtype=np.int64)

    def batch(self, first: int, size: int) -> Batch:
        rows = torch.from_numpy(np.stack([self.sample(first + i) for i in range(size)]))
        return Batch(inputs=rows[:, :-1].contiguous(), targets=rows[:, 1:].contiguous())


def micro_batch_start(samples_seen: int, micro_step: int, rank: int, micro_batch: int, world_size: int) -> int:
    """First sample of `rank`'s micro-batch `micro_step` in the optimizer step that begins
    at `samples_seen`. Micro-step m covers global samples [m*w*b, (m+1)*w*b) of the step,
    rank r its r-th slice, so one process with w*b rows sees exactly what w processes see."""
    return samples_seen + (micro_step * world_size + rank) * micro_batch
