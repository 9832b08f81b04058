"""The model laid out on a device mesh: tensor, pipeline and data parallelism together.

The mesh's dimensions, outermost first, are `pp`, `dp_replicate`, `dp_shard` and `tp`
(workloads/train/shapes.py). The model is built on the meta device (no memory), then
split into this rank's pipeline stages, then tensor-parallelised, then sharded (FSDP2) or
replicated (DDP), and only then materialised: each rank allocates its own part, and
`GPT.init_weights(seed)` fills it with the values the unsharded model would have. A model
that does not fit on one GPU is therefore never whole anywhere.

Tensor parallelism is Megatron's, with sequence parallelism (torchtitan's plan for a
decoder): column-wise qkv and fc, row-wise attention and MLP output projections, norms and
dropout on sequence shards, a vocabulary-parallel token embedding and output projection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from workloads.train.model import GPT
from workloads.train.shapes import STAGES_PER_RANK, GPTConfig, Layout

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")


@dataclass
class Parallel:
    """This rank's view of the layout: its modules (one per pipeline stage it runs; the
    model itself without pipelining), where it sits, and the groups it talks in."""

    layout: Layout
    world_size: int
    modules: list[nn.Module]  # state-dict handles: no wrapper prefixes in their keys
    callables: list[nn.Module]  # what forward calls: DDP or compiled wrappers, or the modules
    mesh: Any = None  # DeviceMesh; None in a single process
    dp_rank: int = 0
    dp_size: int = 1
    stage_indices: list[int] = field(default_factory=list)
    tie_group: Any = None  # first and last pipeline stage: their token embeddings' gradients are summed

    @property
    def pipelined(self) -> bool:
        return self.layout.pp > 1

    @property
    def has_last_stage(self) -> bool:
        return not self.pipelined or self.stage_indices[-1] == self.num_stages - 1

    @property
    def num_stages(self) -> int:
        return self.layout.pp * STAGES_PER_RANK[self.layout.pp_schedule]

    def parameters(self) -> list[nn.Parameter]:
        return [p for m in self.modules for p in m.parameters()]

    def norm_parameters(self) -> list[nn.Parameter]:
        """Parameters counted in the gradient norm: the last stage's copy of the token
        embedding is left out, or the tied matrix would count twice."""
        skip = {id(m.lm_head.weight) for m in self.modules if m.wte is None and m.lm_head is not None}
        return [p for p in self.parameters() if id(p) not in skip]


def build_mesh(layout: Layout, world_size: int, device: torch.device) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    shape = (layout.pp, layout.dp_replicate, layout.dp_shard(world_size), layout.tp)
    # A model left on the meta device (a layout's dry run) still needs real process groups.
    return init_device_mesh("cpu" if device.type == "meta" else device.type, shape, mesh_dim_names=MESH_DIMS)


def stage_blocks(n_layer: int, num_stages: int, stage: int) -> tuple[int, int]:
    """Blocks [first, end) of `stage`: as even as the layer count allows, earlier stages
    taking the remainder (the last stage also runs the output projection)."""
    base, extra = divmod(n_layer, num_stages)
    first = stage * base + min(stage, extra)
    return first, first + base + (1 if stage < extra else 0)


def apply_tensor_parallel(model: GPT, tp_mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    plan: dict[str, Any] = {}
    if model.wte is not None:
        # Vocabulary-parallel lookups summed straight into sequence shards (a reduce-scatter).
        plan["wte"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
        plan["wpe"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))
    for name in model.blocks:
        plan.update({
            f"blocks.{name}.ln_1": SequenceParallel(),
            f"blocks.{name}.attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            f"blocks.{name}.attn.qkv": ColwiseParallel(),
            f"blocks.{name}.attn.proj": RowwiseParallel(output_layouts=Shard(1)),
            f"blocks.{name}.ln_2": SequenceParallel(),
            f"blocks.{name}.mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            f"blocks.{name}.mlp.fc": ColwiseParallel(),
            f"blocks.{name}.mlp.proj": RowwiseParallel(output_layouts=Shard(1)),
        })
    if model.lm_head is not None:
        plan["ln_f"] = SequenceParallel()
        plan["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    parallelize_module(model, tp_mesh, plan)
    model.tie_weights()  # each style distributed its own copy; both are Shard(0) on the vocabulary


def apply_fsdp(model: GPT, dp_mesh: Any, dtype: torch.dtype | None, compile_blocks: bool) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # Parameters gathered in the training dtype, gradients reduced in fp32: bf16 sums over
    # many ranks lose the small updates.
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
    # One FSDP unit per block: only one block's full parameters exist at a time. The root
    # unit holds the embeddings and the (tied) output projection together.
    for block in model.blocks.values():
        if compile_blocks:
            block.compile()
        fully_shard(block, mesh=dp_mesh, mp_policy=policy)
    fully_shard(model, mesh=dp_mesh, mp_policy=policy)


def tie_group(mesh: Any, num_pp: int) -> Any:
    """The group of the first and the last pipeline rank at this rank's data and tensor
    coordinates (every rank creates every such group, in one order, as new_group needs)."""
    grid = mesh.mesh  # [pp, dp_replicate, dp_shard, tp] of global ranks
    me = dist.get_rank()
    mine = None
    for ends in grid[[0, num_pp - 1]].reshape(2, -1).t().tolist():
        group = dist.new_group(ends)
        if me in ends:
            mine = group
    return mine


def build(config: GPTConfig, layout: Layout, world_size: int, device: torch.device, *, strategy: str,
          dtype: torch.dtype | None, activation_checkpoint: str, compile_model: bool, seed: int,
          distributed: bool) -> Parallel:
    """This rank's part of the model, materialised and initialised, on `layout` (left
    unmaterialised on the meta device, to see how a layout shards a model)."""
    mesh = build_mesh(layout, world_size, device) if distributed else None
    parallel = Parallel(layout, world_size, modules=[], callables=[], mesh=mesh)
    if mesh is not None:
        rep, shard = mesh["dp_replicate"].get_local_rank(), mesh["dp_shard"].get_local_rank()
        parallel.dp_rank = rep * layout.dp_shard(world_size) + shard
        parallel.dp_size = layout.dp(world_size)
    if layout.pp > 1:
        pp_rank = mesh["pp"].get_local_rank()
        parallel.stage_indices = [pp_rank + v * layout.pp for v in range(STAGES_PER_RANK[layout.pp_schedule])]
        parallel.tie_group = tie_group(mesh, layout.pp)
    for stage in parallel.stage_indices or [0]:
        with torch.device("meta"):
            model = GPT(config)
        if layout.pp > 1:
            model.keep_stage(*stage_blocks(config.n_layer, parallel.num_stages, stage))
        model.activation_checkpoint = activation_checkpoint
        if layout.tp > 1:
            apply_tensor_parallel(model, mesh["tp"])
        if strategy == "fsdp":
            dims = ("dp_replicate", "dp_shard") if layout.dp_replicate > 1 else ("dp_shard",)
            apply_fsdp(model, mesh[dims], dtype, compile_model)
        model.to_empty(device=device)
        model.tie_weights()
        if device.type != "meta":
            model.init_weights(seed)
        parallel.modules.append(model)
        parallel.callables.append(wrap(model, strategy, mesh, layout, world_size, device, compile_model))
    return parallel


def wrap(model: GPT, strategy: str, mesh: Any, layout: Layout, world_size: int, device: torch.device,
         compile_model: bool) -> nn.Module:
    """What the step calls: FSDP2 modules themselves, or DDP over the data-parallel group
    (replicas start equal: every rank initialised from the same seed), then compiled."""
    if strategy == "fsdp":
        return model
    module: nn.Module = model
    if mesh is not None and layout.dp(world_size) > 1:
        module = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                     process_group=mesh["dp_shard"].get_group(), init_sync=False)
    if compile_model:
        module = torch.compile(module)
    return module
