"""A lean one-token decode step for Llama-family models (llama, qwen2, qwen3), for the sampler.

Decoding a small model on a CPU is bound by per-operation overhead and by how fast the weights
stream, not by arithmetic: the Hugging Face forward spends most of a step building masks, growing
the KV cache by concatenation and running seven projections (plus fourteen LoRA products) per
layer. This step computes the same function with

- fused projections: q/k/v in one matmul and gate/up in one. The fused weight is the storage:
  the model's own `nn.Linear` weights are views into it (`share_fused_storage`, done once when the
  base model loads, so the trainer, the sampler's Hugging Face forward and this step all read one
  copy of the base weights, which this step never writes);
- on a CPU, weights re-laid out once for oneDNN's small-batch matmul (1.4-2x faster per matmul);
  this packed copy is the decoder's only copy of the weights;
- a LoRA delta kept beside the weights (the bf16 sampler) fused the same way: A stacked, B
  block-diagonal, its products rounded as the sampler's own forward rounds them; packed, A's rows
  go under W's so one matmul gives both products (LoRA sampling, 8 prompts x 64 tokens, SmolLM2
  bf16: 1.03x, pairwise median of 6 alternated runs in one process); or, in fp32,
  merged into the packed copy (base-model decode speed; the shared weights stay untouched);
- a KV cache grown in large steps and written in place (fp32, one tensor for all layers), and the
  one-query attention computed directly in fp32, which at these sizes is ~3x faster on a CPU than
  torch's fused attention kernel.

Prefill stays with the Hugging Face forward; its cache is copied in once. The step's logits get
the same processing as the model's own forward (`logits.logit_processing`; none for these
families today, but a config that asks for soft-capping or a scale gets it here too).
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from recipes_lib.backends.local.logits import logit_processing
from recipes_lib.backends.local.memory import return_freed_memory

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")

Deltas = dict[str, tuple[torch.Tensor, torch.Tensor, float]]

PACK_BATCH_HINT = 8  # rows the packed matmul layout is tuned for (any count works)
ROOM_STEP = 128  # KV-cache columns added at a time (a generation rarely needs its max_tokens)


def supports(model: nn.Module) -> bool:
    """Whether `model` is a decoder this step computes exactly (else the sampler uses its forward)."""
    config: Any = getattr(model, "config", None)
    if config is None or config.model_type not in SUPPORTED_MODEL_TYPES or config.hidden_act != "silu":
        return False
    if getattr(config, "mlp_bias", False) or getattr(config, "use_sliding_window", False):
        return False
    layers: Any = model.model.layers  # type: ignore[union-attr]
    for layer in layers:
        attn = layer.self_attn
        biases = [attn.q_proj.bias is None, attn.k_proj.bias is None, attn.v_proj.bias is None]
        if len(set(biases)) != 1 or attn.o_proj.bias is not None:
            return False
    return True


FUSED_GROUPS = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))


def share_fused_storage(model: nn.Module) -> None:
    """Store each layer's q/k/v weights (and biases) in one tensor, and gate/up in one.

    The `nn.Linear` weights become row-slices of it (contiguous, so every matmul reads them as
    before); `FusedDecoder` then fuses them without copying. Call it once on a base model, before
    any adapter wraps its Linears, so the trainer and the sampler share these tensors.
    """
    if not supports(model):
        return
    for layer in model.model.layers:  # type: ignore[union-attr]
        for parent, names in FUSED_GROUPS:
            _fused_weight([getattr(getattr(layer, parent), name) for name in names])


def _fused_weight(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
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


class _Fused:
    """Linears sharing one input, computed as one matmul over their (shared) fused weight."""

    def __init__(self, linears: list[nn.Linear], paths: list[str]):
        self.paths = paths
        self.sizes = [linear.out_features for linear in linears]
        self.weight, self.bias = _fused_weight(linears)
        self.lora_a: torch.Tensor | None = None
        self.lora_b: torch.Tensor | None = None
        self.lora_scale = 1.0
        self.merge = False  # fold the delta into the packed copy rather than computing it beside
        self.packed: torch.Tensor | None = None
        self.packed_a: torch.Tensor | None = None
        self.packed_b: torch.Tensor | None = None

    def pack(self) -> None:
        """Re-lay the weights out for oneDNN's small-batch matmul (1.4-2x faster here), if available.

        With `merge`, the packed copy holds `W + scale * B @ A` (computed in fp32) and the delta is
        not computed beside it. The shared `weight` is never written.
        """
        self.release()
        if not _can_pack(self.weight):
            return
        if self.merge and self.lora_a is not None and self.lora_b is not None:
            with torch.no_grad():  # one temporary: W + scale * B @ A, then its packed copy
                merged = torch.addmm(self.weight.float(), self.lora_b.float(), self.lora_a.float(), alpha=self.lora_scale)
                self.packed = _reorder(merged.to(self.weight.dtype))
            return
        if self.lora_a is not None and self.lora_b is not None:
            self.packed_b = _reorder(self.lora_b)
            if self.bias is None:  # A's rows below W's: one matmul gives `x @ W^T` and `x @ A^T`
                self.packed = _reorder(torch.cat([self.weight, self.lora_a]))
                return
            self.packed_a = _reorder(self.lora_a)  # the bias is added inside W's matmul, as the model adds it
        self.packed = _reorder(self.weight)

    def release(self) -> None:
        """Drop the packed copies (`pack` makes them again)."""
        self.packed = self.packed_a = self.packed_b = None

    def merged(self) -> bool:
        return self.merge and self.packed is not None

    def set_lora(self, deltas: Deltas, dtype: torch.dtype) -> None:
        """Stack the A of every adapted member; put each B on the block diagonal.

        The delta is then computed as the sampler's hooks (and peft) compute it, product by
        product in `dtype`: `(x @ A^T) @ B^T * scale`, so its rounding is theirs too.
        """
        members = [(i, deltas[path]) for i, path in enumerate(self.paths) if path in deltas]
        if not members:
            self.lora_a = self.lora_b = None
            return
        scales = {scale for _, (_, _, scale) in members}
        self.lora_scale = scales.pop() if len(scales) == 1 else 1.0  # else each B carries its own
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        ranks = [a.shape[0] for _, (a, _, _) in members]
        device = self.weight.device
        b_block = torch.zeros(sum(self.sizes), sum(ranks), device=device, dtype=torch.float32)
        col = 0
        for (i, (_, b, scale)), rank in zip(members, ranks):
            folded = b.to(device, torch.float32) * (scale / self.lora_scale)
            b_block[starts[i] : starts[i] + self.sizes[i], col : col + rank] = folded
            col += rank
        self.lora_a = torch.cat([a.to(device, dtype) for _, (a, _, _) in members])
        self.lora_b = b_block.to(dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.lora_a is None or self.lora_b is None or self.merged():
            return _linear(x, self.weight, self.packed, self.bias)
        if self.packed is not None and self.packed_a is None:  # W and A packed as one (see `pack`)
            both = _linear(x, self.weight, self.packed)
            out, u = both[:, : self.weight.shape[0]], both[:, self.weight.shape[0] :]
        else:
            out, u = _linear(x, self.weight, self.packed, self.bias), _linear(x, self.lora_a, self.packed_a)
        delta = _linear(u, self.lora_b, self.packed_b)
        # At scale 1 (rank 32, the default, under the fixed alpha) the product is the delta, bit for bit:
        # skipping the multiply saves an op per projection, [rows x vocab] at the head.
        return out + (delta if self.lora_scale == 1.0 else delta * self.lora_scale)


def _linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None,
            bias: torch.Tensor | None = None) -> torch.Tensor:
    if packed is not None:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return F.linear(x, weight, bias)


def _can_pack(weight: torch.Tensor) -> bool:
    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    if weight.dtype == torch.bfloat16:  # oneDNN's bf16 matmul needs AVX512 (BW/VL/DQ) or AVX-NE-CONVERT
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return weight.dtype == torch.float32


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)


class _Layer:
    def __init__(self, layer: Any, prefix: str):
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = _Fused([attn.q_proj, attn.k_proj, attn.v_proj],
                          [f"{prefix}.self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj")])
        self.o = _Fused([attn.o_proj], [f"{prefix}.self_attn.o_proj"])
        self.gate_up = _Fused([mlp.gate_proj, mlp.up_proj], [f"{prefix}.mlp.gate_proj", f"{prefix}.mlp.up_proj"])
        self.down = _Fused([mlp.down_proj], [f"{prefix}.mlp.down_proj"])
        self.input_norm = (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
        self.post_norm = (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self.q_norm = None if q_norm is None else (q_norm.weight, q_norm.variance_epsilon)
        self.k_norm = None if k_norm is None else (k_norm.weight, k_norm.variance_epsilon)
        self.scaling = float(attn.scaling)

    def fused(self) -> list[_Fused]:
        return [self.qkv, self.o, self.gate_up, self.down]


def _rms_norm(x: torch.Tensor, weight_eps: tuple[torch.Tensor, float]) -> torch.Tensor:
    """RMSNorm as the Hugging Face Llama family computes it: normalised in fp32, scaled in x's dtype."""
    weight, eps = weight_eps
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class FusedDecoder:
    """Batched one-token decode steps over a preallocated KV cache.

    Build it once per sampler model (it rewires the model's linear weights into fused storage
    unless `share_fused_storage` already did), call `set_lora` on every snapshot switch, then per
    generation `start` from a prefill cache and `step` once per token.
    """

    def __init__(self, model: Any):
        self.model = model
        config = model.config
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        paths = {module: path for path, module in model.named_modules()}
        self.layers = [_Layer(layer, paths[layer]) for layer in model.model.layers]
        head = model.get_output_embeddings()
        self.head = _Fused([head], [paths[head]])  # one member: its own weight, shared (tied or not)
        self.logit_processing = logit_processing(config)
        self.final_norm = (model.model.norm.weight, model.model.norm.variance_epsilon)
        self.embed = model.model.embed_tokens
        self.rotary = model.model.rotary_emb
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.length = 0
        self._stale = True

    def set_lora(self, deltas: Deltas, merge: bool = False) -> None:
        """Use `deltas` (empty: none) from the next step on: beside the weights, or with `merge`
        folded into the packed copy where the weights are packed (beside where they are not)."""
        dtype = self.head.weight.dtype
        for fused in self._all_fused():
            fused.set_lora(deltas, dtype)
            fused.merge = merge
        self._stale = True

    def weights_changed(self) -> None:
        """Note that the weights were written: they are re-packed before the next step."""
        self._stale = True

    def release(self) -> None:
        """Free the packed copies of the weights until the next step needs them (re-packing costs
        about what one decode step costs)."""
        for fused in self._all_fused():
            fused.release()
        self._stale = True

    def _all_fused(self) -> list[_Fused]:
        return [f for layer in self.layers for f in layer.fused()] + [self.head]

    def _pack_if_stale(self, device: torch.device) -> None:
        if self._stale:
            for fused in self._all_fused():
                fused.pack()
            return_freed_memory(device)  # the packing's temporaries
            self._stale = False

    def matmuls_alone(self, rows: int) -> Callable[[], None]:
        """A call that runs only the matmuls of one `step` over `rows` rows: every layer's fused
        projections (with the loaded LoRA's products) and the head, on fixed random inputs, with the
        weights packed as `step` packs them. What a step would cost if it were nothing but its
        matmuls: a ceiling for decode speed on this machine (the bench reports it)."""
        fused = self._all_fused()
        self._pack_if_stale(self.head.weight.device)
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(rows, f.weight.shape[1], generator=generator).to(f.weight.device, f.weight.dtype)
                  for f in fused]

        def run() -> None:
            with torch.no_grad():
                for projection, x in zip(fused, inputs, strict=True):
                    projection(x)

        return run

    def start(self, prefill_cache: Any, rows: torch.Tensor, mask_R_W: torch.Tensor, new_tokens: int) -> None:
        """Copy a prefill cache (one entry per prompt) into a cache with room for more tokens per row.

        Args:
            prefill_cache: the Hugging Face cache of the prompts' left-padded prefill.
            rows: for each decoded row, the index of its prompt in the prefill batch.
            mask_R_W: each row's prefill attention mask (1 on prompt tokens, 0 on padding).
            new_tokens: the most tokens any row may add (room grows in steps up to it).
        """
        first = prefill_cache.layers[0].keys
        width = first.shape[2]
        shape = (len(self.layers), len(rows), self.kv_heads, width + min(new_tokens, ROOM_STEP), self.head_dim)
        # Kept in fp32 whatever the model dtype: attention is computed in fp32, and casting the
        # whole cache every layer and step would cost more than the attention itself.
        self.keys = first.new_empty(shape, dtype=torch.float32)
        self.values = first.new_empty(shape, dtype=torch.float32)
        for i, layer in enumerate(prefill_cache.layers):
            self.keys[i, :, :, :width] = layer.keys[rows]
            self.values[i, :, :, :width] = layer.values[rows]
        self.mask = mask_R_W.bool()
        self.length = width

    def _make_room(self) -> None:
        assert self.keys is not None and self.values is not None
        if self.length == self.keys.shape[3]:
            more = self.keys.new_empty(self.keys.shape[:3] + (max(ROOM_STEP, self.length // 2),) + self.keys.shape[4:])
            self.keys = torch.cat([self.keys, more], dim=3)
            self.values = torch.cat([self.values, torch.empty_like(more)], dim=3)

    def finish(self) -> None:
        """Free the generation's KV cache."""
        self.keys = self.values = self.mask = None
        self.length = 0

    def keep(self, index: torch.Tensor) -> None:
        """Keep only the rows at `index` (finished rows leave the batch)."""
        assert self.keys is not None and self.values is not None and self.mask is not None
        self.keys = self.keys[:, index]
        self.values = self.values[:, index]
        self.mask = self.mask[index]

    def step(self, tokens_R: torch.Tensor, positions_R: torch.Tensor) -> torch.Tensor:
        """Append one token per row at its position; returns the next-token logits `[R, vocab]`."""
        assert self.keys is not None and self.values is not None and self.mask is not None
        self._make_room()
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=1)
        rows, t = tokens_R.shape[0], self.length
        x = self.embed(tokens_R)
        cos, sin = self.rotary(x, positions_R[:, None])  # [R, 1, head_dim]
        cos, sin = cos[:, None], sin[:, None]  # [R, 1, 1, head_dim], broadcast over heads
        self._pack_if_stale(x.device)
        bias = torch.zeros(self.mask.shape, device=x.device).masked_fill_(~self.mask, float("-inf"))[:, None, None]
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        groups = self.heads // self.kv_heads
        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(_rms_norm(x, layer.input_norm))
            q = qkv[:, :q_size].view(rows, self.kv_heads, groups, self.head_dim)
            k = qkv[:, q_size : q_size + kv_size].view(rows, self.kv_heads, 1, self.head_dim)
            v = qkv[:, q_size + kv_size :].view(rows, self.kv_heads, 1, self.head_dim)
            if layer.q_norm is not None and layer.k_norm is not None:
                q, k = _rms_norm(q, layer.q_norm), _rms_norm(k, layer.k_norm)
            self.keys[i, :, :, t : t + 1] = _rotate(k, cos, sin)
            self.values[i, :, :, t : t + 1] = v
            # Attention of one query per row, in fp32 as the fused CPU kernels accumulate it; query
            # head h reads key/value head h // groups.
            scores = torch.matmul(_rotate(q, cos, sin).float(), self.keys[i, :, :, : t + 1].transpose(-1, -2))
            probs = torch.softmax(scores * layer.scaling + bias, dim=-1)
            attended = torch.matmul(probs, self.values[i, :, :, : t + 1]).to(x.dtype)
            x = x + layer.o(attended.reshape(rows, q_size))
            gate, up = layer.gate_up(_rms_norm(x, layer.post_norm)).chunk(2, dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        self.length = t + 1
        logits = self.head(_rms_norm(x, self.final_norm))
        return logits if self.logit_processing is None else self.logit_processing(logits.float())
