"""The fused decoder's projections: Linears that share an input, computed as one, with a LoRA.

A group (q/k/v, gate/up, or one Linear) keeps its members' weights in one tensor, the storage the
model's own Linears view (`fused_weight`), and computes the group's outputs in one of four layouts,
fastest first:

- `packed+a`: the weights re-laid out once for oneDNN's small-batch matmul, with the LoRA's A rows
  under W's, so one matmul gives `x @ W^T` and `x @ A^T` (no bias only);
- `packed`: packed W (its bias added inside, as the model adds it), packed A and B apart;
- `plain`: `F.linear` over the fused weight, the LoRA with every member's A stacked and each B on
  a block diagonal;
- `members`: each member as the scorer computes it, `F.linear(x, W_i, b_i)` plus its hook's
  `F.linear(F.linear(x, A_i), B_i) * scale_i`: the reference the others must equal.

Whether a shortcut gives the reference's bits depends on the kernels of the machine (instruction
set, oneDNN's choices), not on the values, so each group's layout is chosen by a probe the first
time its shapes are packed: the fastest layout whose output equals the reference's bit for bit on
random inputs of a few row counts. A layout turned off is said once at debug level.

That is for bf16 (and fp16), where each product is accumulated in fp32 and rounded once, so the
same accumulation gives the same bits whatever the row count, and a different one now and then
rounds the other way. oneDNN may accumulate a lone row otherwise, so one row is computed in a call of
two (`_lone_row`). On AMX tiles its order changes between larger row counts too, which no layout here
can follow (`precision.tiles_warning`). In fp32 there are no such bits to match: the last bits of an fp32 matmul
depend on its row count (MKL's kernels), the scorer's own included. There the fastest layout is
used, and the delta may be merged into the packed copy (`W + scale * B @ A`, base-model decode
speed): either differs from the scorer by fp32 rounding only, which no coarser rounding follows.
"""

import logging

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)

Deltas = dict[str, tuple[torch.Tensor, torch.Tensor, float]]

PACK_BATCH_HINT = 8  # rows the packed matmul layout is tuned for (any count works)
LAYOUTS = ("packed+a", "packed", "plain", "members")
PROBE_ROWS = (1, 3, PACK_BATCH_HINT, 160)  # row counts the probe tries: a decode step's, and a prefill's
_probed: dict[tuple[object, ...], str] = {}  # a group's shapes -> the layout its probe chose here


class FusedLinear:
    """Linears sharing one input, computed as one matmul over their (shared) fused weight."""

    def __init__(self, linears: list[nn.Linear], paths: list[str]):
        self.paths = paths
        self.sizes = [linear.out_features for linear in linears]
        self.weight, self.bias = fused_weight(linears)
        self.lora_a: torch.Tensor | None = None
        self.lora_b: torch.Tensor | None = None
        self.lora_scale = 1.0
        self.members: list[tuple[int, torch.Tensor, torch.Tensor, float]] = []  # (index, A, B, scale)
        self.merge = False  # fold the delta into the packed copy rather than computing it beside
        self.layout = "plain"
        self.packed: torch.Tensor | None = None
        self.packed_a: torch.Tensor | None = None
        self.packed_b: torch.Tensor | None = None

    def set_lora(self, deltas: Deltas, dtype: torch.dtype) -> None:
        """Keep each adapted member's A and B (in `dtype`), and the stacked A and block-diagonal B."""
        self.members = [(i, a.to(self.weight.device, dtype), b.to(self.weight.device, dtype), scale)
                        for i, path in enumerate(self.paths) if path in deltas
                        for a, b, scale in [deltas[path]]]
        if not self.members:
            self.lora_a = self.lora_b = None
            return
        scales = {scale for *_, scale in self.members}
        self.lora_scale = scales.pop() if len(scales) == 1 else 1.0  # else each B carries its own
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        ranks = [a.shape[0] for _, a, _, _ in self.members]
        b_block = torch.zeros(sum(self.sizes), sum(ranks), device=self.weight.device, dtype=torch.float32)
        col = 0
        for (i, _, b, scale), rank in zip(self.members, ranks):
            b_block[starts[i] : starts[i] + self.sizes[i], col : col + rank] = b.float() * (scale / self.lora_scale)
            col += rank
        self.lora_a = torch.cat([a for _, a, _, _ in self.members])
        self.lora_b = b_block.to(dtype)

    def pack(self, packed: bool = True) -> None:
        """Choose the layout (probed once per shapes) and make its packed copies; with `packed`
        False, the fastest layout that needs none. The shared `weight` is never written."""
        self.release()
        packs = packed and can_pack(self.weight)
        if self.merge and packs and self.lora_a is not None and self.lora_b is not None:
            with torch.no_grad():  # one temporary: W + scale * B @ A, then its packed copy
                merged = torch.addmm(self.weight.float(), self.lora_b.float(), self.lora_a.float(), alpha=self.lora_scale)
                self.packed = _reorder(merged.to(self.weight.dtype))
            self.layout = "merged"
            return
        layouts = [layout for layout in LAYOUTS if self._applies(layout, packs)]
        if self.weight.dtype == torch.float32:  # no bits to match: see the module docstring
            self._make(layouts[0])
            return
        key = self._shapes(packs)
        if key not in _probed:
            _probed[key] = self._probe(layouts)
        self._make(_probed[key])

    def release(self) -> None:
        """Drop the packed copies (`pack` makes them again)."""
        self.packed = self.packed_a = self.packed_b = None
        self.layout = "plain"

    def _shapes(self, packs: bool) -> tuple[object, ...]:
        lora = tuple((i, tuple(a.shape), scale) for i, a, _, scale in self.members)
        return (self.weight.dtype, self.weight.device.type, tuple(self.weight.shape), tuple(self.sizes),
                self.bias is not None, lora, packs)

    def _applies(self, layout: str, packs: bool) -> bool:
        if layout == "packed+a":
            return packs and self.bias is None and self.lora_a is not None
        return packs if layout == "packed" else True

    def _probe(self, layouts: list[str]) -> str:
        """The first of `layouts` whose output equals `members`' bit for bit ("members" itself last)."""
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(rows, self.weight.shape[1], generator=generator).to(self.weight.device, self.weight.dtype)
                  for rows in PROBE_ROWS]
        with torch.no_grad():
            expected = [self._members(x) for x in inputs]
            for layout in layouts[:-1]:
                self._make(layout)
                if all(torch.equal(self(x), want) for x, want in zip(inputs, expected)):
                    return layout
                logger.debug("fused decode step: the %s layout of %s rounds unlike the scorer on this machine; "
                             "trying the next", layout, self.paths)
        self.release()
        return layouts[-1]

    def _make(self, layout: str) -> None:
        self.release()
        self.layout = layout
        if layout == "packed+a":
            assert self.lora_a is not None and self.lora_b is not None
            self.packed = _reorder(torch.cat([self.weight, self.lora_a]))
            self.packed_b = _reorder(self.lora_b)
        elif layout == "packed":
            self.packed = _reorder(self.weight)
            if self.lora_a is not None and self.lora_b is not None:
                self.packed_a, self.packed_b = _reorder(self.lora_a), _reorder(self.lora_b)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if _lone_row(x):
            return self(torch.cat([x, x]))[:1]
        if self.layout == "members":
            return self._members(x)
        if self.lora_a is None or self.lora_b is None or self.layout == "merged":
            return _linear(x, self.weight, self.packed, self.bias)
        if self.layout == "packed+a":
            both = _linear(x, self.weight, self.packed)
            out, u = both[:, : self.weight.shape[0]], both[:, self.weight.shape[0] :]
        else:
            out, u = _linear(x, self.weight, self.packed, self.bias), _linear(x, self.lora_a, self.packed_a)
        delta = _linear(u, self.lora_b, self.packed_b)
        # At scale 1 (rank 32, the default, under the fixed alpha) the product is the delta, bit for bit:
        # skipping the multiply saves an op per projection, [rows x vocab] at the head.
        return out + (delta if self.lora_scale == 1.0 else delta * self.lora_scale)

    def _members(self, x: torch.Tensor) -> torch.Tensor:
        """Each member as the scorer computes it: its own Linear, then its hook's delta (a lone row as
        `__call__` computes it, in a call of two)."""
        if _lone_row(x):
            return self._members(torch.cat([x, x]))[:1]
        deltas = {i: (a, b, scale) for i, a, b, scale in self.members}
        outs, start = [], 0
        for i, size in enumerate(self.sizes):
            bias = None if self.bias is None else self.bias[start : start + size]
            out = F.linear(x, self.weight[start : start + size], bias)
            if i in deltas:
                a, b, scale = deltas[i]
                out = out + F.linear(F.linear(x, a), b) * scale
            outs.append(out)
            start += size
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


def fused_weight(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One tensor holding the weights of `linears` stacked by rows (and one for their biases).

    Where the weights already are consecutive row-slices of one tensor (or there is one Linear),
    that tensor is returned as is; otherwise the weights are copied into a new tensor and the
    Linears are rewired to views of it.
    """
    weights = [linear.weight.detach() for linear in linears]
    biases = [None if linear.bias is None else linear.bias.detach() for linear in linears]
    weight, bias = _adjacent(weights), None if biases[0] is None else _adjacent(biases)  # type: ignore[arg-type]
    if weight is not None and (biases[0] is None or bias is not None):
        return weight, bias
    with torch.no_grad():
        weight = torch.cat(weights)
        bias = None if biases[0] is None else torch.cat(biases)  # type: ignore[arg-type]
    start = 0
    for linear in linears:
        size = linear.out_features
        linear.weight = nn.Parameter(weight[start : start + size], requires_grad=False)
        if bias is not None:
            linear.bias = nn.Parameter(bias[start : start + size], requires_grad=False)
        start += size
    return weight, bias


def _adjacent(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """The tensor the contiguous `tensors` span when they are consecutive rows of one storage, else None."""
    first = tensors[0]
    if len(tensors) == 1:
        return first
    offset = first.storage_offset()
    for tensor in tensors:
        if not tensor.is_contiguous() or tensor.untyped_storage().data_ptr() != first.untyped_storage().data_ptr():
            return None
        if tensor.storage_offset() != offset or tensor.shape[1:] != first.shape[1:]:
            return None
        offset += tensor.numel()
    rows = sum(tensor.shape[0] for tensor in tensors)
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (rows, *first.shape[1:]),
                                   first.stride())


def _lone_row(x: torch.Tensor) -> bool:
    """Whether `x` is one bf16 (or fp16) row on a CPU: such a row is computed in a call of two rows (itself
    twice). oneDNN's matmul can take another path for one row than for several, with another order of
    the sums: on an Intel Xeon held below its AMX tiles, a row of SmolLM2's down projection alone
    rounded unlike the same row among others (docs/findings.md, "bf16 on AMX tiles"), and the scorer
    computes a sequence's rows together."""
    return x.shape[0] == 1 and x.dtype != torch.float32 and x.device.type == "cpu"


def _linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None,
            bias: torch.Tensor | None = None) -> torch.Tensor:
    if packed is not None:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return F.linear(x, weight, bias)


def can_pack(weight: torch.Tensor) -> bool:
    """Whether oneDNN can keep a packed copy of `weight` here (a CPU with oneDNN; bf16 where it has bf16 matmuls)."""
    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    if weight.dtype == torch.bfloat16:  # oneDNN's bf16 matmul needs AVX512 (BW/VL/DQ) or AVX-NE-CONVERT
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return weight.dtype == torch.float32


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)
