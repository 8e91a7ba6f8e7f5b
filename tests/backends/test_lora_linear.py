"""The fused fp32 LoRA training forward computes peft's function and gradients, and only where it should."""

from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora.layer import Linear as LoraLinear
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from local_tinker import lora_linear
from local_tinker.lora_linear import fuse_training_forward


class _TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(12, 20, bias=True)
        self.down = nn.Linear(20, 12, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.tanh(self.up(x)))


def _adapted(dtype: torch.dtype = torch.float32, alpha: int = 8) -> Any:
    torch.manual_seed(0)
    model = get_peft_model(_TwoLinears().to(dtype), LoraConfig(r=4, lora_alpha=alpha, target_modules=["up", "down"]))
    for name, param in model.named_parameters():
        if "lora_B" in name:  # peft starts B at zero: give the delta something to say
            nn.init.normal_(param, std=0.5)
    return model


def _output_and_grads(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    out = model(x)
    (out.float() ** 2).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_close_to_fp32_rounding(out: torch.Tensor, grads: dict[str, torch.Tensor], reference_out: torch.Tensor,
                                   reference_grads: dict[str, torch.Tensor]) -> None:
    """The output and every gradient equal the reference's to fp32 rounding (the same function, rounded
    in another order)."""
    torch.testing.assert_close(out, reference_out, rtol=1e-5, atol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, reference_grads[name], rtol=1e-5, atol=1e-5, msg=name)


def _spy(monkeypatch: pytest.MonkeyPatch, check: str) -> list[str]:
    """The adapters for which `lora_linear.<check>` said yes (the path it guards was taken)."""
    taken: list[str] = []
    real = getattr(lora_linear, check)

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        adapter = real(*args, **kwargs)
        if adapter is not None:
            taken.append(adapter)
        return adapter

    monkeypatch.setattr(lora_linear, check, spy)
    return taken


def _count_fused(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return _spy(monkeypatch, "_plain_fp32_adapter")


def test_the_fused_forward_gives_pefts_outputs_and_gradients_in_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(2, 5, 12)
    reference_out, reference_grads = _output_and_grads(_adapted(), x)
    model = _adapted()
    fuse_training_forward(model)
    taken = _count_fused(monkeypatch)
    out, grads = _output_and_grads(model, x)
    assert taken == ["default", "default"]  # both Linears, once each
    assert grads.keys() == reference_grads.keys() and any("lora_A" in n for n in grads)
    _assert_close_to_fp32_rounding(out, grads, reference_out, reference_grads)


def test_without_gradients_it_is_pefts_forward_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring and sampling: the same bits as peft's own forward, which the fused decode step repeats."""
    x = torch.randn(3, 12)
    model = _adapted()
    with torch.no_grad():
        reference = model(x)
        fuse_training_forward(model)
        taken = _count_fused(monkeypatch)
        assert torch.equal(model(x), reference)
    assert taken == []


@pytest.mark.parametrize("where", ["bf16 weights", "autocast", "disabled adapter"])
def test_elsewhere_it_leaves_peft_to_compute(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _adapted(torch.bfloat16 if where == "bf16 weights" else torch.float32)
    fuse_training_forward(model)
    taken = _count_fused(monkeypatch)
    x = torch.randn(3, 12, dtype=torch.bfloat16 if where == "bf16 weights" else torch.float32)
    if where == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    elif where == "disabled adapter":
        with model.disable_adapter():
            model(x)
    else:
        model(x)
    assert taken == []


def test_a_later_adapters_modules_get_it_too() -> None:
    model = _adapted()
    fuse_training_forward(model)
    model.add_adapter("second", LoraConfig(r=2, lora_alpha=2, target_modules=["up"]))
    fuse_training_forward(model)
    assert all("forward" in vars(m) for m in model.modules() if isinstance(m, LoraLinear))


def _count_unscaled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return _spy(monkeypatch, "_unscaled_adapter")


@pytest.mark.parametrize("where", ["bf16 autocast", "bf16 weights", "fp32 without gradients"])
def test_a_scale_of_one_is_left_out_with_pefts_bits_and_gradients(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank = alpha (scale 1): peft's forward without its multiply by one, bit for bit, gradients too."""
    dtype = torch.bfloat16 if where == "bf16 weights" else torch.float32
    x = torch.randn(2, 5, 12, dtype=dtype)
    runs: list[tuple[torch.Tensor, dict[str, torch.Tensor], list[str]]] = []
    for fused in (False, True):
        model = _adapted(dtype, alpha=4)
        taken = _count_unscaled(monkeypatch)
        if fused:
            fuse_training_forward(model)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=where == "bf16 autocast"):
            if where == "fp32 without gradients":
                with torch.no_grad():
                    runs.append((model(x), {}, taken))
            else:
                runs.append((*_output_and_grads(model, x), taken))
    (reference, reference_grads, _), (out, grads, taken) = runs
    assert taken == ["default", "default"]
    assert torch.equal(out, reference)
    assert grads.keys() == reference_grads.keys()
    assert all(torch.equal(grad, reference_grads[name]) for name, grad in grads.items())


class _OneDnnCalls(TorchDispatchMode):
    """Counts oneDNN matmuls (`mkldnn::_linear_pointwise`) and torch's own (`mm`, `addmm`, `addmm_`)."""

    def __init__(self) -> None:
        super().__init__()
        self.onednn = self.aten = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.mkldnn._linear_pointwise.default:
            self.onednn += 1
        elif func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.addmm_.default):
            self.aten += 1
        return func(*args, **(kwargs or {}))


needs_onednn = pytest.mark.skipif(not lora_linear.ONEDNN_MATMUL, reason="this torch build has no oneDNN")


@needs_onednn
def test_on_a_cpu_the_products_against_a_weight_are_oneDNNs() -> None:
    """Forward `x @ W^T` and `x @ A^T` per Linear; backward `g @ B`, and `g @ W` where the input takes
    a gradient: `up` reads the model's input (no gradient), `down` reads `up`'s output. The rest is
    torch's own: the B product added in place forward; backward the two adapter gradients per Linear,
    and `down`'s `(s g B) @ A` added into its input's gradient in place."""
    model = _adapted()
    fuse_training_forward(model)
    with _OneDnnCalls() as calls:
        (model(torch.randn(2, 5, 12)) ** 2).sum().backward()
    assert calls.onednn == 2 + 2 + 1 + 2  # forward up, down; backward up (g @ B), down (g @ B, g @ W)
    assert calls.aten == 2 + 2 + 2 + 1  # forward the two addmm_; backward 2 + 2 adapter gradients, 1 addmm_


@needs_onednn
@pytest.mark.parametrize("scale", [2.0, 1.0])
def test_from_a_strided_input_it_gives_pefts_values_and_gradients(scale: float) -> None:
    """Rows gathered from a transposed tensor, an input that takes a gradient, a scale of 2 and of 1;
    against peft's own forward and autograd's backward, to fp32 rounding."""
    x_source = torch.randn(5, 2, 12)
    runs = []
    for fused in (False, True):
        model = _adapted(alpha=int(4 * scale))
        if fused:
            fuse_training_forward(model)
        x = x_source.clone().requires_grad_(True)
        with _OneDnnCalls() as calls:
            out, grads = _output_and_grads(model, x.transpose(0, 1))
        assert (calls.onednn > 0) == fused
        assert x.grad is not None
        runs.append((out, grads, x.grad))
    (reference, reference_grads, reference_x_grad), (out, grads, x_grad) = runs
    torch.testing.assert_close(x_grad, reference_x_grad, rtol=1e-5, atol=1e-5)
    assert grads.keys() == reference_grads.keys() and len(grads) == 4
    _assert_close_to_fp32_rounding(out, grads, reference, reference_grads)


def test_a_base_weight_that_trains_is_left_to_F_linear_and_gets_its_gradient() -> None:
    model = _adapted()
    fuse_training_forward(model)
    up = model.base_model.model.up
    up.base_layer.weight.requires_grad_(True)
    with _OneDnnCalls() as calls:
        (model(torch.randn(3, 12)) ** 2).sum().backward()
    assert up.base_layer.weight.grad is not None
    assert calls.onednn == (2 + 2 if lora_linear.ONEDNN_MATMUL else 0)  # `down` only (forward 2, backward 2)


def _up_adapted() -> Any:
    """Only `up` adapted: `down` stays a plain Linear, frozen (as an output head without an adapter)."""
    torch.manual_seed(0)
    model = get_peft_model(_TwoLinears(), LoraConfig(r=4, lora_alpha=8, target_modules=["up"]))
    nn.init.normal_(model.base_model.model.up.lora_B["default"].weight, std=0.5)
    return model


def test_a_plain_linear_beside_the_adapters_gets_the_frozen_forward_and_a_wrapped_one_does_not() -> None:
    model = _up_adapted()
    fuse_training_forward(model)
    inner = model.base_model.model
    assert "forward" in vars(inner.down) and not inner.down.weight.requires_grad
    assert "forward" not in vars(inner.up.base_layer)  # peft's own forward calls it, as it is


@needs_onednn
def test_a_frozen_linear_trains_through_oneDNN_with_autograds_values_and_gradients() -> None:
    """`down` forward `x @ W^T + b`... and backward `g @ W` by oneDNN, the same function to fp32 rounding
    (the output, the adapter's gradients and the input's) against `nn.Linear` under autograd."""
    x_source = torch.randn(2, 5, 12)
    runs = []
    for fused in (False, True):
        model = _up_adapted()
        if fused:
            fuse_training_forward(model)
        x = x_source.clone().requires_grad_(True)
        with _OneDnnCalls() as calls:
            out, grads = _output_and_grads(model, x)
        assert x.grad is not None
        runs.append((out, grads, x.grad, calls))
    (reference, reference_grads, reference_x_grad, plain), (out, grads, x_grad, calls) = runs
    assert plain.onednn == 0
    # up: x @ W^T and x @ A^T, backward g @ B and g @ W; down: x @ W^T, backward g @ W
    assert calls.onednn == 2 + 2 + 1 + 1
    assert calls.aten == 1 + 3  # up's addmm_ forward; backward its two adapter gradients and one addmm_
    torch.testing.assert_close(x_grad, reference_x_grad, rtol=1e-5, atol=1e-5)
    assert grads.keys() == reference_grads.keys() and len(grads) == 2
    _assert_close_to_fp32_rounding(out, grads, reference, reference_grads)


@pytest.mark.parametrize("where", ["without gradients", "autocast", "a weight that trains"])
def test_elsewhere_a_plain_linear_is_nn_linears_bit_for_bit(where: str) -> None:
    x = torch.randn(3, 20)
    outs = []
    for fused in (False, True):
        model = _up_adapted()
        down = model.base_model.model.down
        down.weight.requires_grad_(where == "a weight that trains")
        if fused:
            fuse_training_forward(model)
        with _OneDnnCalls() as calls, torch.autocast("cpu", dtype=torch.bfloat16, enabled=where == "autocast"):
            if where == "without gradients":
                with torch.no_grad():
                    outs.append(down(x))
            else:
                outs.append(down(x))
                if where == "a weight that trains":
                    outs[-1].sum().backward()
                    assert down.weight.grad is not None
        assert calls.onednn == 0 or where == "autocast"  # bf16 autocast reaches oneDNN through torch
    assert torch.equal(outs[0], outs[1])
