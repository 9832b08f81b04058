"""Model shapes and parallel layouts, without torch: the stack's config check
(infra/training_plan.py) refuses a layout the trainer would refuse, before anything runs.

A layout splits the world's ranks over four named mesh dimensions, as torchtitan does:

    world = dp_replicate x dp_shard x tp x pp

- `pp`: pipeline stages, each a run of consecutive blocks (outermost: the slowest links);
- `dp_replicate`: replicas of the sharded model (HSDP: one per node, gradients all-reduced
  across nodes);
- `dp_shard`: FSDP2 shards parameters, gradients and optimizer state within a replica;
- `tp`: tensor (and sequence) parallelism within a node (innermost: NVLink).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

PIPELINE_SCHEDULES = ("1f1b", "interleaved")
STAGES_PER_RANK = {"1f1b": 1, "interleaved": 2}  # the interleaved schedule's virtual stages


class LayoutError(ValueError):
    """A layout the world size or the model's shape cannot take: one line saying which."""


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int  # longest sequence the position embedding covers
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not divisible by n_head {self.n_head}")

    @classmethod
    def gpt2_124m(cls, **overrides: Any) -> GPTConfig:
        """GPT-2 small. The vocabulary is GPT-2's 50257 padded to 50304, a multiple of 64,
        which keeps the output projection on fast tensor-core shapes."""
        return cls(**{"vocab_size": 50304, "block_size": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768,
                      **overrides})

    @classmethod
    def gpt_1_3b(cls, **overrides: Any) -> GPTConfig:
        """GPT-3 XL's shape (1.3B parameters): the one-GPU benchmark's larger model."""
        return cls(**{"vocab_size": 50304, "block_size": 2048, "n_layer": 24, "n_head": 16, "n_embd": 2048,
                      **overrides})

    @classmethod
    def gpt_6_7b(cls, **overrides: Any) -> GPTConfig:
        """GPT-3 6.7B's shape: too big for one GPU's memory with its optimizer state (about
        107 GB in fp32 AdamW), so it is built on the meta device and sharded."""
        return cls(**{"vocab_size": 50304, "block_size": 2048, "n_layer": 32, "n_head": 32, "n_embd": 4096,
                      **overrides})

    @classmethod
    def tiny(cls, **overrides: Any) -> GPTConfig:
        """A few hundred thousand parameters: for tests on CPU."""
        return cls(**{"vocab_size": 256, "block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


PRESETS = {"gpt2-124m": GPTConfig.gpt2_124m, "gpt-1.3b": GPTConfig.gpt_1_3b, "gpt-6.7b": GPTConfig.gpt_6_7b,
           "tiny": GPTConfig.tiny}


@dataclass(frozen=True)
class Layout:
    """How many ranks each mesh dimension takes; dp_shard is what the others leave."""

    tp: int = 1
    pp: int = 1
    dp_replicate: int = 1
    pp_schedule: str = "1f1b"

    def dp_shard(self, world_size: int) -> int:
        return world_size // (self.tp * self.pp * self.dp_replicate)

    def dp(self, world_size: int) -> int:
        """Data-parallel ranks: those that read different samples."""
        return self.dp_replicate * self.dp_shard(world_size)

    def describe(self, world_size: int) -> str:
        return (f"dp_replicate={self.dp_replicate} dp_shard={self.dp_shard(world_size)} tp={self.tp} "
                f"pp={self.pp}" + (f" ({self.pp_schedule})" if self.pp > 1 else ""))


def check_layout(layout: Layout, world_size: int, config: GPTConfig, strategy: str = "fsdp",
                 precision: str = "bf16", micro_batches: int | None = None) -> None:
    """Raise LayoutError naming the first thing `layout` cannot do with `config`'s shape on
    `world_size` ranks. `micro_batches`: per step, when known (the pipeline needs enough
    to fill its stages)."""
    for name in ("tp", "pp", "dp_replicate"):
        if getattr(layout, name) < 1:
            raise LayoutError(f"{name} {getattr(layout, name)} must be at least 1")
    if layout.pp_schedule not in PIPELINE_SCHEDULES:
        raise LayoutError(f"pipeline schedule {layout.pp_schedule!r} is not one of {', '.join(PIPELINE_SCHEDULES)}")
    if layout.tp > 1:
        for what, size in (("attention heads", config.n_head), ("the vocabulary", config.vocab_size),
                           ("the MLP width", 4 * config.n_embd)):
            if size % layout.tp:
                raise LayoutError(f"tp {layout.tp} does not divide {what} ({size}); tensor parallelism splits "
                                  f"them evenly, so choose a tp that divides {size}")
    stages = layout.pp * STAGES_PER_RANK[layout.pp_schedule]
    if layout.pp > 1 and stages > config.n_layer:
        raise LayoutError(f"pp {layout.pp} ({layout.pp_schedule}) makes {stages} pipeline stages but the model has "
                          f"{config.n_layer} layers; every stage needs at least one, so choose pp <= "
                          f"{config.n_layer // STAGES_PER_RANK[layout.pp_schedule]}")
    if layout.pp > 1 and precision == "fp16":
        raise LayoutError("pp with fp16: the pipeline schedules have no gradient scaler; use bf16")
    used = layout.tp * layout.pp * layout.dp_replicate
    if world_size % used:
        raise LayoutError(f"tp {layout.tp} x pp {layout.pp} x dp_replicate {layout.dp_replicate} = {used} does not "
                          f"divide the world size {world_size}; choose sizes whose product divides it")
    if layout.dp_replicate > 1 and strategy != "fsdp":
        raise LayoutError("dp_replicate (HSDP) replicates an FSDP-sharded model: it needs strategy fsdp")
    if layout.tp > 1 and layout.dp(world_size) > 1 and strategy != "fsdp":
        raise LayoutError("tp with data parallelism shards through FSDP2 (DDP cannot replicate tensor-parallel "
                          "parameters): use strategy fsdp")
    if layout.pp > 1 and micro_batches is not None:
        if micro_batches < layout.pp:
            raise LayoutError(f"pp {layout.pp} needs at least {layout.pp} micro-batches per step to fill the "
                              f"pipeline, and the step has {micro_batches}; raise the global batch or gradient "
                              "accumulation")
        if layout.pp_schedule == "interleaved" and micro_batches % layout.pp:
            raise LayoutError(f"the interleaved schedule needs the micro-batches per step ({micro_batches}) to be "
                              f"a multiple of pp {layout.pp}")
