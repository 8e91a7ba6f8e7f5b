"""Attention of bf16 models, computed in fp64 so that every path rounds it alike, on a CPU or a GPU.

The trainer and the scorer attend over whole sequences; the sampler's decode step attends with one
query at a time. In fp32 those kernels order their sums differently (by query count, by sequence
length, by instruction set: AVX2, AVX-512 and AMX builds of one kernel differ), so their outputs
differ in the last bits, and now and then that decides which way the output rounds to bf16. One
such flip can move the log-probs that follow far past 1e-4, so sampler and trainer would disagree
on some machines and by chance. In fp64 the same kernel differences lie ~29 bits below bf16's rounding
step: every path gives the same bf16 output, on every CPU (the ISA suite, `make test-isa`, checks).
On a GPU the model's own bf16 kernels (flash, memory-efficient) differ from the decode step's the
same way, so there too bf16 models attend in fp64 (tests/backends/test_cuda.py checks).

Only the forward pass is fp64. The backward pass recomputes the fp32 attention from the saved bf16
q, k and v and differentiates that (gradients need agree with nothing bit for bit), so the only
activations kept are the bf16 inputs. Registered with transformers as `EXACT_SDPA`, together with
the SDPA mask builder (without a registered mask builder transformers would build no mask).
"""

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

EXACT_SDPA = "recipes_exact_sdpa"
ATTENTION_DTYPE = torch.float64  # what bf16 models attend in, on every path (the fused decoder too)


def attention_dtype(model_dtype: torch.dtype) -> torch.dtype:
    """The dtype a model of `model_dtype` attends in: fp32 stays fp32, bf16 and fp16 go to fp64."""
    return torch.float32 if model_dtype == torch.float32 else ATTENTION_DTYPE


def _attend(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            mask: torch.Tensor | None, dtype: torch.dtype, kwargs: dict[str, Any]) -> torch.Tensor:
    """transformers' SDPA attention of q, k, v cast to `dtype`, outside autocast; `[B, T, H, D]` in `dtype`."""
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)
    with torch.autocast(device_type=query.device.type, enabled=False):
        out, _ = sdpa_attention_forward(module, query.to(dtype), key.to(dtype), value.to(dtype), mask, **kwargs)
    return out


class _Fp64Forward(torch.autograd.Function):
    """fp64 attention forward, fp32 attention backward (recomputed from the saved inputs)."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                module: torch.nn.Module, mask: torch.Tensor | None, kwargs: dict[str, Any]) -> torch.Tensor:
        ctx.save_for_backward(query, key, value)
        ctx.module, ctx.mask, ctx.kwargs = module, mask, kwargs
        return _attend(module, query, key, value, mask, ATTENTION_DTYPE, kwargs).to(query.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        query, key, value = (t.detach().float().requires_grad_(needed) for t, needed in zip(saved, ctx.needs_input_grad[:3]))
        inputs = [query, key, value]
        with torch.enable_grad():
            out = _attend(ctx.module, query, key, value, ctx.mask, torch.float32, ctx.kwargs)
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, grad.float()))
        result = [next(grads).to(s.dtype) if t.requires_grad else None for t, s in zip(inputs, saved)]
        return (*result, None, None, None)


def _exact_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    if kwargs.get("dropout", 0.0):
        raise ValueError("attention dropout is not supported by the local engine's bf16 attention")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return _Fp64Forward.apply(query, key, value, module, attention_mask, kwargs), None
    return _attend(module, query, key, value, attention_mask, ATTENTION_DTYPE, kwargs).to(query.dtype), None


AttentionInterface.register(EXACT_SDPA, _exact_sdpa)
AttentionMaskInterface.register(EXACT_SDPA, sdpa_mask)


def use_exact_attention(model: Any) -> None:
    """Make the bf16 `model` attend in fp64 (its other computations keep their dtype)."""
    model.set_attn_implementation(EXACT_SDPA)
