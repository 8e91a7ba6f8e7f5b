"""Attention in fp32 for bf16 models on a CPU.

torch's fused CPU attention is slower in bf16 than in fp32 at the shapes of a small model: its
backward pass in particular (SmolLM2, 8 x 128 tokens, one layer: forward + backward 19.9 ms in
bf16 against 10.5 ms in fp32 on this project's 2-core machine, about 9 % of a training step over
30 layers). This attention implementation casts q, k and v up, attends in fp32 outside autocast,
and casts the result back (keeping the bf16 q, k and v for the backward pass, not their fp32
copies); it is registered with transformers under `FP32_SDPA` together with
the SDPA mask builder (without a registered mask builder transformers would build no mask).
"""

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from recipes_lib.backends.local.activations import as_float, made_again

FP32_SDPA = "recipes_fp32_sdpa"


def _fp32_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    dtype = query.dtype
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()
    query32, key32, value32 = query.float(), key.float(), value.float()
    # The backward pass gets the fp32 q, k and v by casting the bf16 ones again (`activations`).
    upcast = [(query32, query, as_float), (key32, key, as_float), (value32, value, as_float)]
    with torch.autocast(device_type=query.device.type, enabled=False), made_again(upcast):
        out, weights = sdpa_attention_forward(module, query32, key32, value32, attention_mask, **kwargs)
    return out.to(dtype), weights


AttentionInterface.register(FP32_SDPA, _fp32_sdpa)
AttentionMaskInterface.register(FP32_SDPA, sdpa_mask)


def use_fp32_attention(model: Any) -> None:
    """Make `model` attend in fp32 (its other computations keep their dtype)."""
    model.set_attn_implementation(FP32_SDPA)
