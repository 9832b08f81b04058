"""A GPT-2 style decoder-only language model.

`GPT.forward` maps token ids `[B, T]` to logits `[B, T, vocab]` and computes no loss, so the
same module trains here and exports to ONNX for serving: forward has no Python branches on
tensor values, and causal attention is `scaled_dot_product_attention(is_causal=True)`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


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
    def tiny(cls, **overrides: Any) -> GPTConfig:
        """A few hundred thousand parameters: for tests on CPU."""
        return cls(**{"vocab_size": 256, "block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


PRESETS = {"gpt2-124m": GPTConfig.gpt2_124m, "tiny": GPTConfig.tiny}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # [B, T, 3C] -> three [B, H, T, D]
        q, k, v = self.qkv(x).unflatten(-1, (3, self.n_head, self.head_dim)).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).flatten(-2)  # [B, T, C]
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
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Input and output embeddings share one matrix (as in GPT-2): fewer parameters, and
        # rare tokens' input vectors learn from every output step.
        self.lm_head.weight = self.wte.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation; residual output projections are scaled down by
        sqrt(2 * n_layer) so the residual stream's variance does not grow with depth."""
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = 0.02 / math.sqrt(2 * self.config.n_layer) if name.endswith(".proj") else 0.02
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids [B, T] (T <= block_size) -> logits [B, T, vocab_size]."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(positions))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def num_params(self, exclude_position_embedding: bool = False) -> int:
        """Parameters, the shared embedding counted once."""
        total = sum(p.numel() for p in self.parameters())
        return total - self.wpe.weight.numel() if exclude_position_embedding else total

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
