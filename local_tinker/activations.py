"""Fewer bytes of saved activations per token, with bitwise the same gradients.

A training micro-batch keeps every tensor its backward pass needs until that backward runs, and
the activation budget (`trainer.ACTIVATION_BUDGET_BYTES`) caps its tokens by those bytes; every
micro-batch streams the weights again, so bytes saved per token become tokens per micro-batch,
or memory. In the Llama family two saved tensors can be made again from tensors that are kept
anyway, by repeating the op that made them:

- RMSNorm keeps the fp32 upcast of its input (for the square and for the scaling): when the input
  is bf16 (or fp16), the input is kept instead and cast again in the backward pass;
- SwiGLU keeps `silu(gate)` beside `gate`: it is computed again from `gate`.

(The attention of bf16 models on a CPU, `attention.py`, keeps only its bf16 q, k and v by itself.)

The same op on the same input gives the same bits, so the gradients are those of the model's own
forward (tested). It applies on
every device (a GPU's memory is finite too) and only where gradients are recorded; without them
these forwards compute what the model's own do, op for op.
"""

import contextlib
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Remake = Callable[[torch.Tensor], torch.Tensor]


class _Again:
    """A saved tensor kept as the tensor it was made from and the op that made it."""

    __slots__ = ("source", "remake")

    def __init__(self, source: torch.Tensor, remake: Remake):
        self.source, self.remake = source, remake


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride())


_state = threading.local()  # `remaking`: False inside `without_remaking` (this thread)


@contextlib.contextmanager
def without_remaking() -> Iterator[None]:
    """Within the block `made_again` keeps nothing: for a layer under `torch.utils.checkpoint`, whose
    own hooks then see (and drop) every saved tensor, and make it again in the backward pass."""
    before = getattr(_state, "remaking", True)
    _state.remaking = False
    try:
        yield
    finally:
        _state.remaking = before


@contextlib.contextmanager
def made_again(pairs: Sequence[tuple[torch.Tensor, torch.Tensor, Remake]]) -> Iterator[None]:
    """Within the block, an op saving one of the `(tensor, source, remake)` tensors keeps `source`.

    `remake(source)` must give `tensor` bit for bit; the backward pass calls it when it needs
    `tensor`. Every other saved tensor is kept as is, as a Python reference: so no op in the block
    may save its own output (`rsqrt`, `exp`, `sigmoid`, ...). That reference would point from the op's
    node to a tensor whose `grad_fn` is that node, a cycle through the autograd graph that Python's
    garbage collector cannot see: a forward pass never followed by its backward would then keep
    every activation before it alive for good.
    """

    if not getattr(_state, "remaking", True):
        yield
        return
    targets = list(pairs)

    def pack(saved: torch.Tensor) -> Any:
        for tensor, source, remake in targets:
            if _same(saved, tensor):
                return _Again(source, remake)
        return saved

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
            yield
    finally:
        targets.clear()  # autograd keeps `pack` with each saved tensor: it must not keep the targets alive


def _unpack(packed: Any) -> torch.Tensor:
    return packed.remake(packed.source) if isinstance(packed, _Again) else packed


def as_float(x: torch.Tensor) -> torch.Tensor:
    """`x.float()`, as a `remake` for the fp32 copy of a bf16 tensor."""
    return x.float()


# Without gradients nothing is saved, so `made_again` costs only entering its context there.
def _rms_norm_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    """The Llama family's RMSNorm (normalised in fp32, scaled in the input's dtype), op for op."""
    x32 = hidden_states.float()
    with made_again([(x32, hidden_states, as_float)]):
        mean_square = x32.pow(2).mean(-1, keepdim=True)
    inverse = torch.rsqrt(mean_square + self.variance_epsilon)  # saves its output: outside the hooks
    with made_again([(x32, hidden_states, as_float)]):
        normed = x32 * inverse
    return self.weight * normed.to(hidden_states.dtype)


def _swiglu_mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """`down(silu(gate(x)) * up(x))`, as the Llama family's MLP computes it."""
    gate = self.gate_proj(x)
    up = self.up_proj(x)
    activated = F.silu(gate)
    with made_again([(activated, gate, F.silu)]):
        product = activated * up
    return self.down_proj(product)


def keep_fewer_activations(model: nn.Module) -> None:
    """Make `model`'s RMSNorms and SwiGLU MLPs save less for the backward pass (same numbers).

    For the families the fused decoder supports (`decoder.supports`: llama, qwen2, qwen3 with
    silu); any other model is left as it is.
    """
    from local_tinker.decoder import supports

    if not supports(model):
        return
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon"):
            module.forward = types.MethodType(_rms_norm_forward, module)  # type: ignore[method-assign]
        elif all(hasattr(module, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            module.forward = types.MethodType(_swiglu_mlp_forward, module)  # type: ignore[method-assign]
