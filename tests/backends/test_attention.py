"""The fp32 attention used for bf16 models on a CPU computes transformers' own SDPA attention."""

import copy

import torch

from recipes_lib.backends.local.attention import FP32_SDPA, _fp32_sdpa, use_fp32_attention
from recipes_lib.backends.local.engine import get_engine
from recipes_lib.backends.local.models import load_base_model


def _logits(model: torch.nn.Module, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask).logits


def test_fp32_attention_equals_sdpa_and_applies_the_padding_mask() -> None:
    model = load_base_model("recipes/tiny-qwen3").eval()
    ours = copy.deepcopy(model)
    use_fp32_attention(ours)
    assert ours.config._attn_implementation == FP32_SDPA  # noqa: SLF001
    tokens = torch.tensor([[0, 0, 0, 11, 12, 13, 14], [21, 22, 23, 24, 25, 26, 27]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    expected = _logits(model, tokens, mask)
    torch.testing.assert_close(_logits(ours, tokens, mask), expected, atol=1e-6, rtol=1e-6)
    # The mask matters here: without it the left-padded row attends to its padding.
    unmasked = _logits(ours, tokens, torch.ones_like(mask))
    assert (unmasked[0, 3:] - expected[0, 3:]).abs().max() > 1e-3


def test_bf16_attention_is_computed_in_fp32() -> None:
    """Under bf16 autocast, the output is fp32 causal attention of the upcast q, k, v, rounded to bf16."""
    model = load_base_model("recipes/tiny-llama")
    attention = model.model.layers[0].self_attn  # kv heads shared by 2 query heads each
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 6, 16, generator=generator).to(torch.bfloat16)
    k, v = (torch.randn(2, 2, 6, 16, generator=generator).to(torch.bfloat16) for _ in range(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = _fp32_sdpa(attention, q, k, v, None, scaling=0.25)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(2, 1), v.float().repeat_interleave(2, 1), is_causal=True, scale=0.25)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected.transpose(1, 2).to(torch.bfloat16), atol=0, rtol=0)


def test_bf16_cpu_engine_models_attend_in_fp32() -> None:
    engine = get_engine("bfloat16", "cpu")
    assert engine.base("recipes/tiny-llama").model.config._attn_implementation == FP32_SDPA  # noqa: SLF001
    assert get_engine("float32", "cpu").base("recipes/tiny-llama").model.config._attn_implementation == "sdpa"  # noqa: SLF001
