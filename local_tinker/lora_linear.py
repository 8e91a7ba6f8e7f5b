"""A LoRA Linear's training forward in fp32 with its scale and its add inside the B matmul.

peft computes an adapted Linear as `base(x) + B(A(x)) * scale`: the multiply and the add each
pass over the whole `[tokens x out]` output, and the backward pass multiplies that output's
gradient by the scale once more. Here the scale multiplies `x @ A^T` (`[tokens x rank]`, a few
dozen columns) and the add is the matmul's own accumulation: `addmm(x @ W^T + b, s * (x @ A^T), B^T)`.
The same function, rounded in another order: so it runs only where fp32 rounding is all that
differs (no autocast) and only with gradients on (`forward_backward`). Scoring and sampling keep
peft's forward, which the fused decode step's reference layout repeats op for op
(`projections.py`), so sampler and scorer still agree bit for bit.

On a CPU, with the base weight frozen, that function and its backward pass run as one autograd node
(`_OneDnnLoraLinear`) instead of peft's half dozen, and its products against a weight go through
oneDNN's matmul (`torch.ops.mkldnn._linear_pointwise`, over the weights as they are) where torch's own
fp32 matmul calls MKL: the same products, rounded in another order again (docs/findings.md: "fp32
training's matmuls on oneDNN"). bf16 already takes oneDNN's matmul through torch.

Elsewhere (bf16 under autocast, and scoring and sampling in any precision), an adapter whose scale
is exactly 1 (rank = alpha: the engine's default rank 32) skips peft's multiply by it, which
changes no bit: `x * 1.0` is `x`.
"""

import types
from typing import Any

import torch
import torch.nn.functional as F
from peft.tuners.lora.layer import Linear as LoraLinear
from torch import nn


def fuse_training_forward(model: nn.Module) -> None:
    """Give each of `model`'s peft LoRA Linears the fused training forward, and each plain Linear
    outside them (an output head left without an adapter) the frozen one (instance attributes, set
    once per module; modules peft adds with a later adapter get theirs on the next call)."""
    wrapped = {id(module.base_layer) for module in model.modules() if isinstance(module, LoraLinear)}
    for module in model.modules():
        if "forward" in vars(module):
            continue
        if isinstance(module, LoraLinear):
            module.forward = types.MethodType(_forward, module)  # type: ignore[method-assign]
        elif type(module) is nn.Linear and id(module) not in wrapped:
            module.forward = types.MethodType(_frozen_forward, module)  # type: ignore[method-assign]


def _forward(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    if (adapter := _plain_fp32_adapter(self, x, args, kwargs)) is not None:
        return _scale_inside_addmm(self, x, adapter)
    if (adapter := _unscaled_adapter(self, args, kwargs)) is not None:
        return _without_scale(self, x, adapter)
    return LoraLinear.forward(self, x, *args, **kwargs)


# Whether this torch build computes matmuls with oneDNN on a CPU (the bench's matmul timer reads it too).
ONEDNN_MATMUL = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _scale_inside_addmm(self: Any, x: torch.Tensor, adapter: str) -> torch.Tensor:
    """`addmm(x @ W^T + b, s * (x @ A^T), B^T)`: peft's function, rounded in another order (fp32 only)."""
    base: nn.Linear = self.base_layer
    rows_N_I = x.reshape(-1, x.shape[-1])
    lora_a, lora_b, scale = self.lora_A[adapter].weight, self.lora_B[adapter].weight, self.scaling[adapter]
    if _onednn_applies(rows_N_I, base):
        out_N_O = _OneDnnLoraLinear.apply(rows_N_I, base.weight, base.bias, lora_a, lora_b, scale)
    else:
        base_N_O = F.linear(rows_N_I, base.weight, base.bias)
        low_N_R = F.linear(rows_N_I, lora_a) * scale
        # In place: `addmm` would first copy the base product into a new output, a whole pass over it.
        # Nothing saved that product for the backward pass (the base matmul keeps its inputs).
        out_N_O = base_N_O.addmm_(low_N_R, lora_b.t())
    return out_N_O.view(*x.shape[:-1], out_N_O.shape[-1])


def _frozen_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """A Linear without an adapter: in fp32 training on a CPU with its weight (and bias) frozen, its
    products by oneDNN's matmul (`_OneDnnLinear`); elsewhere `nn.Linear`'s own forward."""
    if _fp32_training(x, self.weight) and _onednn_applies(x, self):
        out_N_O = _OneDnnLinear.apply(x.reshape(-1, x.shape[-1]), self.weight, self.bias)
        return out_N_O.view(*x.shape[:-1], out_N_O.shape[-1])
    return F.linear(x, self.weight, self.bias)


def _onednn_applies(x: torch.Tensor, linear: nn.Linear) -> bool:
    """Whether `linear`'s products with `x` go through oneDNN: on a CPU with oneDNN, neither its weight
    nor its bias taking a gradient."""
    frozen = not linear.weight.requires_grad and (linear.bias is None or not linear.bias.requires_grad)
    return x.device.type == "cpu" and ONEDNN_MATMUL and frozen


def _fp32_training(x: torch.Tensor, *weights: torch.Tensor) -> bool:
    """Gradients on, no autocast, `x` and `weights` fp32: where fp32 rounding is all that may differ."""
    return (torch.is_grad_enabled() and not torch.is_autocast_enabled(x.device.type)
            and all(t.dtype == torch.float32 for t in (x, *weights)))


def _onednn_linear(x_N_I: torch.Tensor, weight_O_I: torch.Tensor, bias_O: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ W^T + b` by oneDNN's matmul, over `W` as it is (a transposed view is read as such)."""
    return torch.ops.mkldnn._linear_pointwise(x_N_I.contiguous(), weight_O_I, bias_O, "none", [], "")


class _OneDnnLoraLinear(torch.autograd.Function):
    """`addmm(x @ W^T + b, s * (x @ A^T), B^T)` and its backward pass written out, for a frozen `W`, `b`.

    oneDNN computes the products of the input or the output's gradient against a weight: `x @ W^T`
    and `x @ A^T`, and backward `g @ B` and `g @ W`; torch's own the rest: the B product added in
    place, the adapter's gradients `g^T @ low` and `(s g B)^T @ x` (thin products, slower in oneDNN),
    and `(s g B) @ A` added into the input's gradient in place.
    """

    @staticmethod
    def forward(ctx: Any, x_N_I: torch.Tensor, weight_O_I: torch.Tensor, bias_O: torch.Tensor | None,
                lora_a_R_I: torch.Tensor, lora_b_O_R: torch.Tensor, scale: float) -> torch.Tensor:
        x_N_I = x_N_I.contiguous()  # once, for both products and the backward pass
        low_N_R = _onednn_linear(x_N_I, lora_a_R_I)
        if scale != 1.0:
            low_N_R.mul_(scale)
        out_N_O = _onednn_linear(x_N_I, weight_O_I, bias_O).addmm_(low_N_R, lora_b_O_R.t())
        ctx.save_for_backward(x_N_I, weight_O_I, lora_a_R_I, lora_b_O_R, low_N_R)
        ctx.scale = scale
        return out_N_O

    @staticmethod
    def backward(ctx: Any, grad_N_O: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x_N_I, weight_O_I, lora_a_R_I, lora_b_O_R, low_N_R = ctx.saved_tensors
        wants_x, wants_a, wants_b = (ctx.needs_input_grad[i] for i in (0, 3, 4))
        grad_N_O = grad_N_O.contiguous()
        grad_b = grad_N_O.t().mm(low_N_R) if wants_b else None
        grad_a = grad_x = None
        if wants_a or wants_x:
            grad_low_N_R = _onednn_linear(grad_N_O, lora_b_O_R.t())  # the gradient of `x @ A^T`, once scaled
            if ctx.scale != 1.0:
                grad_low_N_R.mul_(ctx.scale)
            grad_a = grad_low_N_R.t().mm(x_N_I) if wants_a else None
            if wants_x:
                grad_x = _onednn_linear(grad_N_O, weight_O_I.t()).addmm_(grad_low_N_R, lora_a_R_I)
        return grad_x, None, None, grad_a, grad_b, None


class _OneDnnLinear(torch.autograd.Function):
    """`x @ W^T + b` for a frozen `W`, `b`, and backward the input's gradient `g @ W`, by oneDNN's matmul."""

    @staticmethod
    def forward(ctx: Any, x_N_I: torch.Tensor, weight_O_I: torch.Tensor, bias_O: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(weight_O_I)
        return _onednn_linear(x_N_I, weight_O_I, bias_O)

    @staticmethod
    def backward(ctx: Any, grad_N_O: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (weight_O_I,) = ctx.saved_tensors
        grad_x = _onednn_linear(grad_N_O, weight_O_I.t()) if ctx.needs_input_grad[0] else None
        return grad_x, None, None


def _without_scale(self: Any, x: torch.Tensor, adapter: str) -> torch.Tensor:
    """peft's forward with its multiply by a scale of 1 left out: the same bits, one pass fewer each way."""
    result = self.base_layer(x)
    lora_a, lora_b = self.lora_A[adapter], self.lora_B[adapter]
    return (result + lora_b(lora_a(self._cast_input_dtype(x, lora_a.weight.dtype)))).to(result.dtype)


def _vanilla_adapter(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The one active adapter when it is a plain LoRA (no dropout, bias, variant or merge), else None."""
    if args or kwargs or self.disable_adapters or self.merged or len(self.active_adapters) != 1:
        return None
    adapter = self.active_adapters[0]
    if adapter not in self.lora_A or adapter in self.lora_variant or not isinstance(self.base_layer, nn.Linear):
        return None
    if not isinstance(self.lora_dropout[adapter], nn.Identity) or self.lora_B[adapter].bias is not None:
        return None
    return adapter


def _unscaled_adapter(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The plain adapter when its scale is exactly 1 (rank = alpha, the engine's default rank 32)."""
    adapter = _vanilla_adapter(self, args, kwargs)
    return adapter if adapter is not None and self.scaling[adapter] == 1.0 else None


def _plain_fp32_adapter(self: Any, x: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The plain adapter when the fused fp32 training forward applies here, else None."""
    adapter = _vanilla_adapter(self, args, kwargs)
    if adapter is None:
        return None
    weights = (self.base_layer.weight, self.lora_A[adapter].weight, self.lora_B[adapter].weight)
    return adapter if _fp32_training(x, *weights) else None
