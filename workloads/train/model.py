"""A GPT-2 style decoder-only language model.

`GPT.forward` maps token ids `[B, T]` to logits `[B, T, vocab]` and computes no loss, so the
same module trains here and exports to ONNX for serving: forward has no Python branches on
tensor values, and causal attention is `scaled_dot_product_attention(is_causal=True)`.
"""

from __future__ import annotations

import functools
import math
import zlib

import torch
from torch import nn
from torch.nn import functional as F

from workloads.train.shapes import GPTConfig


# Selective activation checkpointing keeps what is costly to recompute (matmuls, attention,
# and the tensor-parallel reduce-scatters, which would otherwise run twice) and recomputes
# the rest (norms, GELU, dropout, adds) in the backward pass.
_SAVED_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
}


def _keep_or_recompute(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in _SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.head_dim = config.n_embd // config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # qkv's output is head-major, [B, T, H * (q, k, v) * D], so a tensor-parallel split
        # of its rows hands each rank whole heads with their q, k and v; -1 is the heads
        # this rank holds (all of them without tensor parallelism).
        q, k, v = self.qkv(x).unflatten(-1, (-1, 3, self.head_dim)).permute(3, 0, 2, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).flatten(-2)  # [B, T, C] (C / tp under tensor parallelism)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """The whole model, or one pipeline stage of it (`keep_stage`): a stage keeps its run of
    blocks under their original names (`blocks.7` stays `blocks.7`), so every stage's state
    dict is a slice of the whole model's and checkpoints move between layouts."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte: nn.Embedding | None = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe: nn.Embedding | None = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleDict({str(i): Block(config) for i in range(config.n_layer)})
        self.ln_f: nn.LayerNorm | None = nn.LayerNorm(config.n_embd)
        self.lm_head: nn.Linear | None = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()
        # none, selective (recompute all but matmuls and attention) or full (recompute
        # every block); parallel.py sets it.
        self.activation_checkpoint = "none"
        self.init_weights()

    def tie_weights(self) -> None:
        """Input and output embeddings share one matrix (as in GPT-2): fewer parameters, and
        rare tokens' input vectors learn from every output step. Called again after
        anything that replaces parameters (`to_empty`, tensor parallelism), which unties them."""
        if self.wte is not None and self.lm_head is not None:
            self.lm_head.weight = self.wte.weight

    def keep_stage(self, first_block: int, end_block: int) -> None:
        """Become the pipeline stage of blocks [first_block, end_block): the first stage
        keeps the embeddings, the last the final norm and the output projection (its own
        copy of the token embedding: parallel.py keeps the two copies' gradients summed)."""
        last = end_block == self.config.n_layer
        for name in list(self.blocks):
            if not first_block <= int(name) < end_block:
                del self.blocks[name]
        if first_block > 0:
            if last:  # untie: the output projection stays, its weight a parameter of its own
                self.lm_head.weight = nn.Parameter(self.lm_head.weight.detach())
            self.wte = self.wpe = None
        if not last:
            self.ln_f = self.lm_head = None

    def init_weights(self, seed: int | None = None) -> None:
        """GPT-2's initialisation; residual output projections are scaled down by
        sqrt(2 * n_layer) so the residual stream's variance does not grow with depth.

        With `seed`, each parameter is drawn whole from its own generator, seeded from the
        seed and the parameter's name, and each rank keeps its part: a model sharded any
        way (tensor, pipeline or FSDP) starts from the weights of the unsharded one, and
        only one parameter is ever whole in memory. A pipeline stage's output projection is
        drawn as the token embedding it stands for."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        with torch.no_grad():
            for name, param in self.named_parameters():
                draw = "wte.weight" if name == "lm_head.weight" else name
                full = torch.empty(param.shape, device=param.device, dtype=param.dtype)
                generator = None
                if seed is not None:
                    generator = torch.Generator(param.device).manual_seed(seed * 1_000_003 + zlib.crc32(draw.encode()))
                if draw.endswith("bias"):
                    full.zero_()
                elif ".ln_" in f".{draw}" or draw.startswith("ln_f."):
                    full.fill_(1.0)
                else:
                    std = 0.02 / math.sqrt(2 * self.config.n_layer) if draw.endswith(".proj.weight") else 0.02
                    full.normal_(0.0, std, generator=generator)
                if isinstance(param, DTensor):
                    full = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
                param.copy_(full)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids [B, T] (T <= block_size) -> logits [B, T, vocab_size]. A pipeline
        stage without the embeddings takes the previous stage's hidden states [B, T, C], and
        one without the output projection returns its own."""
        if self.wte is not None:
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.drop(self.wte(x) + self.wpe(positions))
        for block in self.blocks.values():
            x = self._run_block(block, x)
        if self.lm_head is None:
            return x
        return self.lm_head(self.ln_f(x))

    def _run_block(self, block: Block, x: torch.Tensor) -> torch.Tensor:
        if self.activation_checkpoint == "none" or not self.training:
            return block(x)
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        if self.activation_checkpoint == "full":
            return checkpoint(block, x, use_reentrant=False)
        # A functools.partial, not a lambda: torch.compile traces checkpoint's context_fn only
        # as a partial or a module-level function (a nested one fails to compile).
        return checkpoint(block, x, use_reentrant=False,
                          context_fn=functools.partial(create_selective_checkpoint_contexts, _keep_or_recompute))

    def num_params(self, exclude_position_embedding: bool = False) -> int:
        """Parameters, the shared embedding counted once."""
        total = sum(p.numel() for p in self.parameters())
        return total - self.config.block_size * self.config.n_embd if exclude_position_embedding else total

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs (forward + backward) per token, as in the PaLM paper's appendix B:

            6 * N + 12 * L * H * Q * T

        N: parameters that take part in matrix multiplies (all but the position embedding,
        which is a lookup; the token embedding counts because it is also the output
        projection); L layers, H heads, Q head size, T sequence length. The first term is
        2 FLOPs per multiply-add per parameter, times 3 for forward + backward; the second
        is the attention score and weighted-sum matmuls, which have no parameters.
        Recomputation and attention's causal mask saving are not counted, as is customary
        for model FLOPs utilisation.
        """
        t = self.config.block_size if seq_len is None else seq_len
        n = self.num_params(exclude_position_embedding=True)
        return 6 * n + 12 * self.config.n_layer * self.config.n_embd * t
