"""The fused decode step's projection groups compute their members' outputs bit for bit, or fall back.

The reference is each member as the scorer computes it (its own Linear, then its hook's LoRA
delta), built here from plain `F.linear` calls on the group's own tensors.
"""

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from local_tinker import precision, projections
from local_tinker.projections import LAYOUTS, FusedLinear

pytestmark = pytest.mark.numerics


def _group(dtype: torch.dtype, bias: bool, seed: int) -> tuple[FusedLinear, list[nn.Linear], dict]:  # type: ignore[type-arg]
    """A q/k/v-shaped group (k unadapted) with a LoRA on q and v."""
    torch.manual_seed(seed)
    linears = [nn.Linear(64, out, bias=bias).to(dtype) for out in (64, 32, 32)]
    paths = ["q", "k", "v"]
    generator = torch.Generator().manual_seed(seed)
    deltas = {path: (torch.randn(4, 64, generator=generator) * 0.1, torch.randn(out, 4, generator=generator) * 0.1, 2.0)
              for path, out in (("q", 64), ("v", 32))}
    group = FusedLinear(linears, paths)
    group.set_lora(deltas, dtype)
    return group, linears, deltas


def _expected(x: torch.Tensor, linears: list[nn.Linear], deltas: dict, dtype: torch.dtype) -> torch.Tensor:  # type: ignore[type-arg]
    outs = []
    for path, linear in zip(["q", "k", "v"], linears):
        out = F.linear(x, linear.weight, linear.bias)
        if path in deltas:
            a, b, scale = deltas[path]
            out = out + F.linear(F.linear(x, a.to(dtype)), b.to(dtype)) * scale
        outs.append(out)
    return torch.cat(outs, dim=-1)


@pytest.fixture(autouse=True)
def _fresh_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projections, "_probed", {})


@pytest.mark.parametrize("bias", [False, True])
def test_the_probed_layout_gives_the_members_bits_at_any_row_count(bias: bool) -> None:
    group, linears, deltas = _group(torch.bfloat16, bias, seed=0)
    group.pack()
    assert group.layout in LAYOUTS
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for rows in (1, 2, 5, 8, 13, 32):  # row counts the probe did not try, too
            x = torch.randn(rows, 64, generator=generator).to(torch.bfloat16)
            assert torch.equal(group(x), _expected(x, linears, deltas, torch.bfloat16)), (group.layout, rows)


@pytest.mark.parametrize("bias", [False, True])
def test_fp32_takes_the_fastest_layout_within_fp32_rounding(bias: bool) -> None:
    group, linears, deltas = _group(torch.float32, bias, seed=0)
    group.pack()
    can_pack = projections.can_pack(group.weight)
    assert group.layout == next(layout for layout in LAYOUTS if group._applies(layout, can_pack))  # noqa: SLF001
    x = torch.randn(5, 64)
    with torch.no_grad():
        torch.testing.assert_close(group(x), _expected(x, linears, deltas, torch.float32), atol=1e-5, rtol=1e-5)


def test_a_layout_that_rounds_otherwise_is_turned_off_and_said_at_debug_level(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Every shortcut here made to differ in its last bit: the probe ends at the members' own products."""
    original = projections._linear

    def off_by_a_bit(x, weight, packed, bias=None):  # type: ignore[no-untyped-def]
        out = original(x, weight, packed, bias)
        return torch.nextafter(out, torch.full_like(out, float("inf")))

    monkeypatch.setattr(projections, "_linear", off_by_a_bit)
    group, linears, deltas = _group(torch.bfloat16, bias=False, seed=2)
    with caplog.at_level(logging.DEBUG, logger=projections.__name__):
        group.pack()
    assert group.layout == "members"
    tried = [r.getMessage() for r in caplog.records if "rounds unlike the scorer" in r.getMessage()]
    assert len(tried) == len([layout for layout in LAYOUTS if group._applies(layout, projections.can_pack(group.weight))]) - 1  # noqa: SLF001
    x = torch.randn(3, 64).to(torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(group(x), _expected(x, linears, deltas, torch.bfloat16))


def test_the_probe_runs_once_per_shapes() -> None:
    first, _, _ = _group(torch.bfloat16, bias=False, seed=3)
    first.pack()
    second, linears, deltas = _group(torch.bfloat16, bias=False, seed=4)  # other values, same shapes
    calls = []
    second._probe = lambda layouts: calls.append(layouts) or "members"  # type: ignore[method-assign]
    second.pack()
    assert calls == [] and second.layout == first.layout


@pytest.mark.parametrize("layout", ["plain", "members"])
def test_a_lone_bf16_row_gets_the_bits_it_gets_among_other_rows(layout: str) -> None:
    """SmolLM2's down projection (1536 -> 576): on an Intel Xeon held below its AMX tiles, oneDNN
    rounded a row computed alone unlike the same row computed with others, as the scorer computes a
    sequence. A lone row goes through a call of two rows, so a one-row decode step rounds as the scorer."""
    torch.manual_seed(0)
    linear = nn.Linear(1536, 576, bias=False).to(torch.bfloat16)
    group = FusedLinear([linear], ["down"])
    group._make(layout)  # noqa: SLF001
    generator = torch.Generator().manual_seed(1)
    rows = torch.randn(16, 1536, generator=generator).to(torch.bfloat16)
    with torch.no_grad():
        together = F.linear(rows, linear.weight)  # the scorer's call: all of a sequence's rows at once
        for i in range(rows.shape[0]):
            assert torch.equal(group(rows[i : i + 1]), together[i : i + 1]), i


SMOLLM2_SHAPES = [(576, 576), (192, 576), (960, 576), (3072, 576), (576, 1536), (64, 576), (1536, 32)]  # out, in


@pytest.mark.skipif(precision.tiles_warning(precision.Precision(torch.device("cpu"), torch.bfloat16, torch.bfloat16))
                    is not None, reason="bf16 runs on AMX tiles here, whose rounding depends on the row count "
                                        "(docs/findings.md, 'bf16 on AMX tiles'); the engine warns of it")
def test_off_amx_tiles_a_rows_bf16_bits_do_not_depend_on_how_many_rows_share_the_call() -> None:
    """What the scorer (a sequence's rows in one call) and the decode step (a step's rows in one call)
    agreeing rests on, at SmolLM2's projection shapes (the LoRA's too): on the tiles it fails."""
    generator = torch.Generator().manual_seed(0)
    for out_features, in_features in SMOLLM2_SHAPES:
        weight = (torch.randn(out_features, in_features, generator=generator) * 0.05).to(torch.bfloat16)
        rows = torch.randn(300, in_features, generator=generator).to(torch.bfloat16)
        together = F.linear(rows, weight)
        for count in (2, 3, 5, 8, 17, 32, 33, 36, 64, 100, 160):
            assert torch.equal(F.linear(rows[:count], weight), together[:count]), (out_features, in_features, count)
