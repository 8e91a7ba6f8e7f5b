"""Keeping fewer activations for the backward pass changes no number: bitwise the same logits and gradients."""

import copy
import gc
import weakref

import pytest
import torch

from local_tinker.activations import keep_fewer_activations, made_again
from local_tinker.attention import use_exact_attention
from local_tinker.models import load_base_model

pytestmark = pytest.mark.numerics


def _logits_and_grads(model: torch.nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    tokens = torch.tensor([[5, 9, 14, 2, 7, 7, 30, 4], [11, 12, 13, 14, 15, 16, 0, 0]])
    mask = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        logits = model(input_ids=tokens, attention_mask=mask).logits.float()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    (loss * mask[:, 1:].flatten()).sum().backward()
    return logits.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("name", "dtype"), [("recipes/tiny-llama", torch.bfloat16),
                                             ("recipes/tiny-qwen3", torch.bfloat16),
                                             ("recipes/tiny-llama", torch.float32)])
def test_the_same_logits_and_gradients_bit_for_bit(name: str, dtype: torch.dtype) -> None:
    """Every parameter trains (norm weights too), on a padded batch. bf16 as the CPU engine runs it (bf16
    weights, its attention); the reference keeps what the model's own forward keeps."""
    model = load_base_model(name).to(dtype).requires_grad_(True)
    if dtype == torch.bfloat16:
        use_exact_attention(model)
    ours = copy.deepcopy(model)
    keep_fewer_activations(ours)
    expected_logits, expected_grads = _logits_and_grads(model, dtype)
    logits, grads = _logits_and_grads(ours, dtype)
    assert torch.equal(logits, expected_logits)
    assert grads.keys() == expected_grads.keys() and any("norm" in key for key in grads)
    for key, grad in grads.items():
        assert torch.equal(grad, expected_grads[key]), key


def test_a_remade_tensor_is_kept_as_its_source_and_the_tensor_itself_is_freed() -> None:
    source = torch.randn(4, 3, dtype=torch.bfloat16, requires_grad=True)
    upcast = source.float()
    calls = []

    def remake(x: torch.Tensor) -> torch.Tensor:
        calls.append(x)
        return x.float()

    with made_again([(upcast, source, remake)]):
        squared = upcast.pow(2)  # pow keeps its input for the backward pass
    alive = weakref.ref(upcast)
    del upcast
    gc.collect()
    assert alive() is None  # kept: the bf16 source, not its fp32 copy
    squared.sum().backward()
    assert len(calls) == 1 and calls[0] is source
    assert torch.equal(source.grad, (2 * source.float()).to(torch.bfloat16))  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_forward_never_followed_by_its_backward_frees_every_activation(dtype: torch.dtype) -> None:
    """No reference cycle through the autograd graph: once the logits go, so does every tensor the
    forward pass made, though no backward pass ran (a saved op output inside `made_again` kept them)."""
    model = load_base_model("recipes/tiny-llama").to(dtype).requires_grad_(True)
    keep_fewer_activations(model)
    made: list[weakref.ref[torch.Tensor]] = []
    for module in model.modules():
        module.register_forward_hook(lambda _m, _i, out: made.extend(
            weakref.ref(t) for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor)))
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        logits = model(input_ids=torch.tensor([[5, 9, 14, 2, 7]])).logits
    assert logits.grad_fn is not None and len(made) > 20
    del logits
    gc.collect()
    alive = [ref() for ref in made if ref() is not None]
    assert not alive, f"{len(alive)} of {len(made)} module outputs outlive the forward, e.g. {tuple(alive[0].shape)}"
