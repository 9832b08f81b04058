"""The model: shapes, causality, parameter and FLOP counts."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workloads.train.model import GPT, GPTConfig
from workloads.train.shapes import PRESETS


@pytest.fixture(scope="module")
def tiny() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig.tiny()).eval()


def test_forward_maps_ids_to_logits(tiny):
    idx = torch.randint(0, 256, (3, 17))
    assert tiny(idx).shape == (3, 17, 256)
    assert tiny(idx).dtype == torch.float32


def test_attention_is_causal(tiny):
    """Changing a later token must not change the logits of any earlier position."""
    idx = torch.randint(0, 256, (1, 20))
    changed = idx.clone()
    changed[0, 12] = (changed[0, 12] + 1) % 256
    a, b = tiny(idx), tiny(changed)
    torch.testing.assert_close(a[:, :12], b[:, :12])
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_output_projection_shares_the_token_embedding(tiny):
    assert tiny.lm_head.weight is tiny.wte.weight


def expected_params(c: GPTConfig) -> int:
    """Counted layer by layer from GPT-2's architecture, independently of the module."""
    d = c.n_embd
    per_block = (2 * 2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    return c.vocab_size * d + c.block_size * d + c.n_layer * per_block + 2 * d


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_num_params(preset):
    config = PRESETS[preset]()
    with torch.device("meta"):  # no memory, no initialisation cost for the 124M model
        model = GPT(config)
    assert model.num_params() == expected_params(config)
    assert model.num_params(exclude_position_embedding=True) == expected_params(config) - config.block_size * config.n_embd


def test_124m_preset_is_gpt2_small():
    with torch.device("meta"):
        model = GPT(GPTConfig.gpt2_124m())
    assert 124e6 <= model.num_params() <= 125e6


def test_flops_per_token_follows_palm_formula():
    config = GPTConfig.gpt2_124m()
    with torch.device("meta"):
        model = GPT(config)
    n = expected_params(config) - config.block_size * config.n_embd
    assert model.flops_per_token() == 6 * n + 12 * 12 * 768 * 1024
    assert model.flops_per_token(seq_len=256) == 6 * n + 12 * 12 * 768 * 256


def test_config_round_trips_through_a_dict():
    config = GPTConfig.tiny(dropout=0.1)
    assert GPTConfig.from_dict({**config.to_dict(), "unrelated": 1}) == config


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="n_embd 65 is not divisible by n_head 2"):
        GPTConfig.tiny(n_embd=65)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    model = GPT(GPTConfig.tiny(dropout=0.5))
    idx = torch.randint(0, 256, (2, 8))
    model.eval()
    torch.testing.assert_close(model(idx), model(idx))
    model.train()
    assert not torch.allclose(model(idx), model(idx))


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def backward_ops_and_grads(mode: str) -> tuple[Counter, dict[str, torch.Tensor]]:
    """The operators the backward pass runs (recomputation included), and the gradients."""
    model = GPT(GPTConfig.tiny(n_layer=3, dropout=0.1))
    model.init_weights(seed=5)
    model.activation_checkpoint = mode
    idx = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(7)  # the same dropout masks in every mode (recomputation replays them)
    loss = model(idx).float().logsumexp(-1).mean()
    with OpCounter() as counter:
        loss.backward()
    return counter.counts, {n: p.grad for n, p in model.named_parameters()}


def test_activation_checkpointing_keeps_gradients_and_recomputes_what_it_should():
    none, selective, full = (backward_ops_and_grads(m) for m in ("none", "selective", "full"))
    for name, grad in none[1].items():
        torch.testing.assert_close(selective[1][name], grad, msg=name)
        torch.testing.assert_close(full[1][name], grad, msg=name)
    matmuls = [sum(ops[0][op] for op in ("mm", "addmm")) for ops in (none, selective, full)]
    # Full recomputes each block's forward matmuls; selective keeps them and recomputes only
    # the cheap operators (GELU, norms).
    assert matmuls[0] == matmuls[1] < matmuls[2]
    assert none[0]["gelu"] == 0 < selective[0]["gelu"] == full[0]["gelu"] == 3


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_activation_checkpointing_compiles_to_the_eager_gradients(mode):
    """torch.compile traces the checkpointed blocks in one graph (the GPU presets compile
    with selective checkpointing) and gives eager's gradients. The backend is aot_eager:
    what can fail is Dynamo's tracing of checkpoint and its context_fn, not Inductor's code."""
    eager, compiled = (GPT(GPTConfig.tiny(n_layer=2)) for _ in range(2))
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    for model, run in ((eager, eager), (compiled, torch.compile(compiled, backend="aot_eager", fullgraph=True))):
        model.init_weights(seed=1)
        model.activation_checkpoint = mode
        run(idx).float().logsumexp(-1).mean().backward()
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=name)


def test_a_pipeline_stage_starts_from_the_whole_models_weights():
    whole, last = GPT(GPTConfig.tiny(n_layer=4)), GPT(GPTConfig.tiny(n_layer=4))
    last.keep_stage(2, 4)
    whole.init_weights(seed=3)
    last.init_weights(seed=3)
    assert sorted(last.blocks) == ["2", "3"] and last.wte is None and last.wpe is None
    assert last.lm_head.weight is not None and whole.lm_head.weight is whole.wte.weight
    expected = whole.state_dict()
    for name, value in last.state_dict().items():  # the output projection drawn as the embedding it stands for
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0, msg=name)
    assert whole.blocks["0"].attn.proj.weight.std() < whole.blocks["0"].attn.qkv.weight.std()  # residual scaling
