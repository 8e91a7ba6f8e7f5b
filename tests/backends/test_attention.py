"""The attention of bf16 models on a CPU: fp64 SDPA rounded to bf16, the same bits by every path."""

import copy

import pytest
import torch
import torch.nn.functional as F

from local_tinker.attention import EXACT_SDPA, _exact_sdpa, use_exact_attention
from local_tinker.engine import get_engine
from local_tinker.models import load_base_model

pytestmark = pytest.mark.numerics


def _logits(model: torch.nn.Module, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask).logits


def _qkv(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 q (4 heads) and k, v (2 heads: each shared by 2 query heads, as in tiny-llama)."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, 4, length, 16, generator=generator).to(torch.bfloat16)
    k, v = (torch.randn(batch, 2, length, 16, generator=generator).to(torch.bfloat16) for _ in range(2))
    return q, k, v


def test_exact_attention_computes_sdpa_and_applies_the_padding_mask() -> None:
    model = load_base_model("recipes/tiny-qwen3").eval()
    ours = copy.deepcopy(model)
    use_exact_attention(ours)
    assert ours.config._attn_implementation == EXACT_SDPA  # noqa: SLF001
    tokens = torch.tensor([[0, 0, 0, 11, 12, 13, 14], [21, 22, 23, 24, 25, 26, 27]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    expected = _logits(model, tokens, mask)
    torch.testing.assert_close(_logits(ours, tokens, mask), expected, atol=1e-6, rtol=1e-6)
    # The mask matters here: without it the left-padded row attends to its padding.
    unmasked = _logits(ours, tokens, torch.ones_like(mask))
    assert (unmasked[0, 3:] - expected[0, 3:]).abs().max() > 1e-3


def test_bf16_attention_is_fp64_attention_rounded_to_bf16() -> None:
    """Under bf16 autocast, the output is fp64 causal attention of the upcast q, k, v, rounded to bf16."""
    attention = load_base_model("recipes/tiny-llama").model.layers[0].self_attn
    q, k, v = _qkv(2, 6, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = _exact_sdpa(attention, q, k, v, None, scaling=0.25)
    expected = F.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1), is_causal=True, scale=0.25)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, expected.transpose(1, 2).to(torch.bfloat16))


@pytest.mark.parametrize("length", [7, 40, 130])
def test_one_query_at_a_time_gives_the_bits_of_the_whole_sequence(length: int) -> None:
    """What the sampler computes (each position's query against the keys before it) equals, bit for
    bit, what the scorer and the trainer compute (the whole causal sequence at once)."""
    attention = load_base_model("recipes/tiny-llama").model.layers[0].self_attn
    q, k, v = _qkv(1, length, seed=length)
    with torch.no_grad():
        whole, _ = _exact_sdpa(attention, q, k, v, None, scaling=0.25)
        for p in range(length):
            one, _ = _exact_sdpa(attention, q[:, :, p : p + 1], k[:, :, : p + 1], v[:, :, : p + 1], None, scaling=0.25)
            assert torch.equal(one[:, 0], whole[:, p]), p


def test_the_backward_pass_is_the_fp32_attentions() -> None:
    """Gradients flow to bf16 q, k and v, as those of transformers' fp32 SDPA attention, rounded to bf16."""
    attention = load_base_model("recipes/tiny-llama").model.layers[0].self_attn
    q, k, v = (t.requires_grad_(True) for t in _qkv(2, 9, seed=1))
    mask = torch.ones(2, 1, 9, 9, dtype=torch.bool).tril()
    mask[1, :, :, :3] = False  # a left-padded row
    mask[1, :, :3, 0] = True  # (padded queries attend to something, as transformers' masks make them)
    # The gradient reaching the bf16 output is bf16: the reference gets the same one (fp32 weights would
    # give it a gradient the bf16 path never sees, and cancellation in the sums can magnify that).
    weights = torch.randn(2, 9, 4, 16, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).float()
    out, _ = _exact_sdpa(attention, q, k, v, mask, scaling=0.25)
    (out.float() * weights).sum().backward()
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    expected = F.scaled_dot_product_attention(q32, k32.repeat_interleave(2, 1), v32.repeat_interleave(2, 1),
                                              attn_mask=mask, scale=0.25).transpose(1, 2)
    (expected * weights).sum().backward()
    for ours, reference in [(q, q32), (k, k32), (v, v32)]:
        assert ours.grad is not None and ours.grad.dtype == torch.bfloat16
        torch.testing.assert_close(ours.grad.float(), reference.grad.to(torch.bfloat16).float(), atol=1e-3, rtol=2**-7)  # type: ignore[union-attr]


def test_bf16_cpu_engine_models_use_it() -> None:
    engine = get_engine("bfloat16", "cpu")
    assert engine.base("recipes/tiny-llama").model.config._attn_implementation == EXACT_SDPA  # noqa: SLF001
    assert get_engine("float32", "cpu").base("recipes/tiny-llama").model.config._attn_implementation == "sdpa"  # noqa: SLF001
