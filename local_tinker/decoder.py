"""A lean one-token decode step for Llama-family models (llama, qwen2, qwen3), for the sampler.

Decoding a small model on a CPU is bound by per-operation overhead and by how fast the weights
stream, not by arithmetic: the Hugging Face forward spends most of a step building masks, growing
the KV cache by concatenation and running seven projections (plus fourteen LoRA products) per
layer. This step computes the same function with

- fused projections: q/k/v in one matmul and gate/up in one. The fused weight is the storage:
  the model's own `nn.Linear` weights are views into it (`share_fused_storage`, done once when the
  base model loads, so the trainer, the sampler's Hugging Face forward and this step all read one
  copy of the base weights, which this step never writes);
- a LoRA delta computed beside the weights, fused the same way (A stacked, B block-diagonal), or
  in fp32 merged into a packed copy; on a CPU the weights re-laid out once for oneDNN's small-batch
  matmul. Each group of projections uses the fastest layout that a probe finds to round exactly
  as the scorer does on this machine (`projections.py`);
- a KV cache grown in large steps and written in place (one tensor for all layers), and the
  one-query attention computed directly (faster at these sizes on a CPU than torch's fused
  attention kernel), in the dtype the model's own attention uses (`attention.attention_dtype`:
  fp64 for bf16 models, so its output rounds to bf16 as the scorer's and the trainer's do).

Prefill stays with the Hugging Face forward (its cache copied in once), but for fp32 models that
oneDNN packs: those prefill here (`prefill`), over the same packed copy. The step's logits get
the same processing as the model's own forward (`logits.logit_processing`; none for these
families today, but a config that asks for soft-capping or a scale gets it here too).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from local_tinker.attention import attention_dtype
from local_tinker.logits import logit_processing
from local_tinker.memory import return_freed_memory
from local_tinker.projections import Deltas, FusedLinear, can_pack, fused_weight

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")

ROOM_STEP = 128  # KV-cache columns added at a time (a generation rarely needs its max_tokens)
# In bf16, generations of fewer new tokens than this decode over the weights as they are, without
# the packed copy (as large as the model): an evaluation's or RL's short answers then hold a model's
# worth less memory, for a few percent of their decode time (docs/findings.md, "What an evaluation holds").
# In fp32 the packed copy (with the LoRA merged in) is several times the gain: it is always made.
LOW_PRECISION_PACK_TOKENS = 32
# A KV cache this large is copied from the prefill layer by layer with the freed memory returned in
# between (glibc keeps freed blocks: the copy and the prefill's cache would otherwise add up).
LARGE_CACHE_BYTES = 64 * 2**20


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
            fused_weight([getattr(getattr(layer, parent), name) for name in names])


class _Layer:
    def __init__(self, layer: Any, prefix: str):
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj],
                          [f"{prefix}.self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj")])
        self.o = FusedLinear([attn.o_proj], [f"{prefix}.self_attn.o_proj"])
        self.gate_up = FusedLinear([mlp.gate_proj, mlp.up_proj], [f"{prefix}.mlp.gate_proj", f"{prefix}.mlp.up_proj"])
        self.down = FusedLinear([mlp.down_proj], [f"{prefix}.mlp.down_proj"])
        self.input_norm = (layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
        self.post_norm = (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
        q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self.q_norm = None if q_norm is None else (q_norm.weight, q_norm.variance_epsilon)
        self.k_norm = None if k_norm is None else (k_norm.weight, k_norm.variance_epsilon)
        self.scaling = float(attn.scaling)

    def fused(self) -> list[FusedLinear]:
        return [self.qkv, self.o, self.gate_up, self.down]

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP of the residual stream `x` (normed first), which the layer adds to it."""
        gate, up = self.gate_up(_rms_norm(x, self.post_norm)).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


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
        self.head = FusedLinear([head], [paths[head]])  # one member: its own weight, shared (tied or not)
        self.logit_processing = logit_processing(config)
        self.final_norm = (model.model.norm.weight, model.model.norm.variance_epsilon)
        self.embed = model.model.embed_tokens
        self.rotary = model.model.rotary_emb
        self.attention_dtype = attention_dtype(self.head.weight.dtype)
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.length = 0
        self._stale = True
        self._packed = True  # whether the copies `_pack_if_stale` made last are packed
        self._steps_packed = True  # whether this generation's steps want them packed (`start` says)

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

    def layouts(self) -> dict[str, str]:
        """The layout (`projections.LAYOUTS`) each kind of projection group computes in, packing first."""
        self._pack_if_stale(self.head.weight.device)
        kinds: dict[str, set[str]] = {}
        for layer in self.layers:
            for kind, fused in zip(("q/k/v", "o", "gate/up", "down"), layer.fused()):
                kinds.setdefault(kind, set()).add(fused.layout)
        kinds["head"] = {self.head.layout}
        return {kind: "/".join(sorted(layouts)) for kind, layouts in kinds.items()}

    def _layers_fused(self) -> list[FusedLinear]:
        return [f for layer in self.layers for f in layer.fused()]

    def _all_fused(self) -> list[FusedLinear]:
        return [*self._layers_fused(), self.head]

    def _pack_if_stale(self, device: torch.device, packed: bool = True) -> None:
        if packed != self._packed:
            self._stale, self._packed = True, packed
        if self._stale:
            # What earlier work freed (a training step's activations, kept by the heap for the next
            # step) goes back first, so that the copies and those freed blocks never add up.
            return_freed_memory(device, within_request=True)
            # The head first: its temporaries (the W and A rows joined, as large as the vocabulary's
            # weight) are mapped apart and handed back at once, before the layers' copies are made.
            for fused in [self.head, *self._layers_fused()]:
                fused.pack(packed)
            return_freed_memory(device, within_request=True)  # the packing's temporaries
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

    def attention_alone(self, rows: int, positions: int) -> Callable[[], None]:
        """A call that runs only the attention of one `step` over `rows` rows attending to `positions`
        keys: every layer's, in the attention dtype (fp64 for a bf16 model), over a KV cache kept as
        `start` keeps one of that size, on fixed random inputs. Beside `matmuls_alone`, what exact
        attention adds to a step's floor (the bench reports the two together)."""
        weight = self.head.weight
        shape = (len(self.layers), rows, self.kv_heads, positions, self.head_dim)
        generator = torch.Generator().manual_seed(0)
        dtype = self._cache_dtype(shape, weight.dtype)
        keys, values = (torch.randn(shape, generator=generator).to(weight.device, dtype) for _ in range(2))
        query = torch.randn(rows, self.kv_heads, self.heads // self.kv_heads, self.head_dim,
                            generator=generator).to(weight.device, weight.dtype)
        bias = torch.zeros(rows, 1, 1, positions, device=weight.device, dtype=self.attention_dtype)

        def run() -> None:
            with torch.no_grad():
                for i, layer in enumerate(self.layers):
                    _attend(query, keys[i], values[i], layer.scaling, bias)

        return run

    def prefills(self) -> bool:
        """Whether prompts are prefilled here (`prefill`) rather than by the model's forward: on a CPU,
        fp32 weights that oneDNN packs, and bf16 ones. In fp32 the packed copy, with the LoRA merged in,
        is made for the decode steps anyway, and its matmuls are faster than the forward's per-Linear
        products and LoRA hooks (no bits are to be matched: `projections.py`). In bf16 the prefill reads
        the weights in the steps' layouts, each of which gives the scorer's bits at prefill row counts
        too (the probe tries one), and attends in fp64 as the scorer does (`attention.py`), so the cache
        and the first logits are the forward's bit for bit, for fewer ops."""
        weight = self.head.weight
        if weight.dtype == torch.float32:
            return can_pack(weight)
        return weight.device.type == "cpu"

    def packs_steps(self, new_tokens: int) -> bool:
        """Whether a generation of up to `new_tokens` tokens decodes over the packed copy."""
        return self.head.weight.dtype == torch.float32 or new_tokens >= LOW_PRECISION_PACK_TOKENS

    def prefill(self, tokens_P_L: torch.Tensor, mask_P_L: torch.Tensor, positions_P_L: torch.Tensor,
                opening: "PrefillCache | None" = None, packed: bool = True) -> tuple["PrefillCache", torch.Tensor]:
        """Run left-padded prompts through the layers (what `step` computes, for `L` tokens a row at once),
        over the weights packed or not (`packed`: as the generation's steps will read them); returns
        their cache and the last position's hidden state `[P, hidden]`.

        Args:
            tokens_P_L, mask_P_L, positions_P_L: as `batch.pad_left_tokens` makes them (positions going
                on from the opening's length when there is one).
            opening: the cache of tokens that every prompt opens with (one row, prefilled before): each
                prompt attends to all of it, and the returned cache holds it in front of the prompt's own.
        """
        self._pack_if_stale(tokens_P_L.device, packed)
        prompts, length = tokens_P_L.shape
        x = self.embed(tokens_P_L).reshape(prompts * length, -1)
        cos, sin = self.rotary(x, positions_P_L)  # [P, L, head_dim]
        cos, sin = cos[:, :, None], sin[:, :, None]  # broadcast over heads
        # Causal over the prompt's own tokens, padding never attended to (a padding position, whose own
        # row allows nothing, gets SDPA's zeros: finite, and never read).
        own = torch.ones(length, length, dtype=torch.bool, device=x.device).tril() & mask_P_L.bool()[:, None, :]
        width = 0 if opening is None else opening.layers[0].both()[0].shape[2]
        allowed = torch.cat([own.new_ones(prompts, length, width), own], dim=2)[:, None]  # [P, 1, L, W + L]
        q_size, dtype = self.heads * self.head_dim, self.attention_dtype
        cache = PrefillCache([])
        for i, layer in enumerate(self.layers):
            q, k, v = self._rotated_qkv(layer, layer.qkv(_rms_norm(x, layer.input_norm)).view(prompts, length, -1),
                                        cos, sin)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [P, heads, L, D]
            if opening is not None:  # the opening's keys and values in front, shared by every prompt
                keys, values = opening.layers[i].both()
                k = torch.cat([keys.expand(prompts, -1, -1, -1), k], dim=2)
                v = torch.cat([values.expand(prompts, -1, -1, -1), v], dim=2)
            cache.layers.append(LayerCache(k, v))
            attended = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=allowed,
                                                      scale=layer.scaling, enable_gqa=True).to(x.dtype)
            x = x + layer.o(attended.transpose(1, 2).reshape(prompts * length, q_size))
            x = x + layer.feed_forward(x)
        return cache, x.view(prompts, length, -1)[:, -1]

    def _rotated_qkv(self, layer: _Layer, qkv: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k and v of a layer's fused projection output `[..., q + k + v]`, split into heads
        (`[..., heads, head_dim]`, `[..., kv_heads, head_dim]` twice): q and k normed where the model
        norms them, then rotated (`cos`, `sin` broadcast over the heads)."""
        lead, dim = qkv.shape[:-1], self.head_dim
        q_size, kv_size = self.heads * dim, self.kv_heads * dim
        v = qkv[..., q_size + kv_size :].view(*lead, self.kv_heads, dim)
        if layer.q_norm is not None and layer.k_norm is not None:  # each its own norm, then rotated
            q = _rotate(_rms_norm(qkv[..., :q_size].view(*lead, self.heads, dim), layer.q_norm), cos, sin)
            k = _rotate(_rms_norm(qkv[..., q_size : q_size + kv_size].view(*lead, self.kv_heads, dim), layer.k_norm),
                        cos, sin)
            return q, k, v
        # q and k rotated as one tensor: the same ops on the same values, half the calls
        qk = _rotate(qkv[..., : q_size + kv_size].view(*lead, self.heads + self.kv_heads, dim), cos, sin)
        return qk[..., : self.heads, :], qk[..., self.heads :, :], v

    def logits(self, hidden_R_D: torch.Tensor) -> torch.Tensor:
        """The next-token logits (fp32) of last hidden states, as `step` and the model's own forward make them."""
        logits = self.head(_rms_norm(hidden_R_D, self.final_norm)).float()
        return logits if self.logit_processing is None else self.logit_processing(logits)

    def start(self, prefill_cache: Any, rows: torch.Tensor, mask_R_W: torch.Tensor, new_tokens: int) -> None:
        """Copy a prefill cache (one entry per prompt) into a cache with room for more tokens per row.

        Args:
            prefill_cache: the Hugging Face cache of the prompts' left-padded prefill, or a list of
                them (the prefill of consecutive chunks of the prompts, all padded to one width).
            rows: for each decoded row, the index of its prompt in the prefill batch.
            mask_R_W: each row's prefill attention mask (1 on prompt tokens, 0 on padding).
            new_tokens: the most tokens any row may add (room grows in steps up to it).
        """
        caches = prefill_cache if isinstance(prefill_cache, list) else [prefill_cache]
        first = caches[0].layers[0].keys
        width = first.shape[2]
        shape = (len(self.layers), len(rows), self.kv_heads, width + min(new_tokens, ROOM_STEP), self.head_dim)
        dtype = self._cache_dtype(shape, first.dtype)
        self.keys = first.new_empty(shape, dtype=dtype)
        self.values = first.new_empty(shape, dtype=dtype)
        large = self._cache_is_large()
        for i in range(len(caches[0].layers)):
            self.keys[i, :, :, :width] = _joined([cache.layers[i].keys for cache in caches])[rows]
            self.values[i, :, :, :width] = _joined([cache.layers[i].values for cache in caches])[rows]
            for cache in caches:  # copied: free the prefill's layer now, not after the last one
                cache.layers[i].keys = cache.layers[i].values = None
            if large:  # and give it back, so the copy and the prefill's cache never add up
                return_freed_memory(first.device, within_request=True)
        self.mask = mask_R_W.bool()
        self.length = width
        self._steps_packed = self.packs_steps(new_tokens)

    def _cache_dtype(self, shape: tuple[int, ...], model_dtype: torch.dtype) -> torch.dtype:
        """What a KV cache of `shape` (keys or values) is kept in: the dtype attention reads it in where
        both fit `LARGE_CACHE_BYTES` (no cast a step), else the model's, which holds k and v exactly,
        each layer's part cast as it is read."""
        wide = 2 * math.prod(shape) * torch.empty((), dtype=self.attention_dtype).element_size()
        return self.attention_dtype if wide <= LARGE_CACHE_BYTES else model_dtype

    def _cache_is_large(self) -> bool:
        """Whether the KV cache (keys and values, as kept) is over `LARGE_CACHE_BYTES`."""
        assert self.keys is not None and self.values is not None
        return self.keys.nbytes + self.values.nbytes > LARGE_CACHE_BYTES

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
        """Keep only the rows at `index` (finished rows leave the batch), row `j` becoming `index[j]`.

        Only the rows that change place move, and the cache becomes a view of its first rows: with
        `sampler.compacted_order`'s index (each kept row in place where it can stay, the rows beyond
        the kept count filling the gaps) as many rows move as finished among the first ones, rather
        than every row after the first gap. The moving rows are copied out before they are written:
        a large cache's a layer at a time, so that copy stays small beside it.
        """
        assert self.keys is not None and self.values is not None and self.mask is not None
        rows = len(index)
        moved = torch.nonzero(index != torch.arange(rows, device=index.device)).flatten()
        if len(moved):
            source = index[moved]
            with torch.inference_mode():  # the cache is made under it (the prefill's)
                for cache in (self.keys, self.values):
                    for part in cache if self._cache_is_large() else [cache.transpose(0, 1)]:
                        part[moved] = part[source]
        self.keys, self.values = self.keys[:, :rows], self.values[:, :rows]
        self.mask = self.mask[index]

    def step(self, tokens_R: torch.Tensor, positions_R: torch.Tensor) -> torch.Tensor:
        """Append one token per row at its position; returns the next-token logits `[R, vocab]`."""
        assert self.keys is not None and self.values is not None and self.mask is not None
        self._make_room()
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=1)
        rows, t = tokens_R.shape[0], self.length
        x = self.embed(tokens_R)
        cos, sin = self.rotary(x, positions_R[:, None])  # [R, 1, head_dim], broadcast over heads
        self._pack_if_stale(x.device, self._steps_packed)
        bias = torch.zeros(self.mask.shape, device=x.device, dtype=self.attention_dtype)
        bias = bias.masked_fill_(~self.mask, float("-inf"))[:, None, None]
        q_size = self.heads * self.head_dim
        groups = self.heads // self.kv_heads
        for i, layer in enumerate(self.layers):
            q, k, v = self._rotated_qkv(layer, layer.qkv(_rms_norm(x, layer.input_norm)), cos, sin)
            q = q.reshape(rows, self.kv_heads, groups, self.head_dim)
            self.keys[i, :, :, t : t + 1] = k[:, :, None]
            self.values[i, :, :, t : t + 1] = v[:, :, None]
            attended = _attend(q, self.keys[i, :, :, : t + 1], self.values[i, :, :, : t + 1], layer.scaling, bias)
            x = x + layer.o(attended.reshape(rows, q_size))
            x = x + layer.feed_forward(x)
        self.length = t + 1
        return self.logits(x)


@dataclass
class LayerCache:
    """One layer's keys and values, `[prompts, kv_heads, positions, head_dim]` (freed once copied)."""

    keys: torch.Tensor | None
    values: torch.Tensor | None

    def both(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.keys is not None and self.values is not None, "this layer's cache was copied and freed"
        return self.keys, self.values


@dataclass
class PrefillCache:
    """What `FusedDecoder.prefill` leaves for `start`: each layer's keys and values, as a Hugging Face
    cache exposes them."""

    layers: list[LayerCache]


def _attend(q_R_K_G_D: torch.Tensor, keys_R_K_T_D: torch.Tensor, values_R_K_T_D: torch.Tensor, scaling: float,
            bias_R_1_1_T: torch.Tensor) -> torch.Tensor:
    """Attention of one query per row, in the dtype of `bias` (the model's attention dtype), returned in
    q's: query head `k * G + g` reads key/value head `k`."""
    dtype = bias_R_1_1_T.dtype
    keys, values = keys_R_K_T_D.to(dtype), values_R_K_T_D.to(dtype)
    scores = torch.matmul(q_R_K_G_D.to(dtype), keys.transpose(-1, -2))
    probs = torch.softmax(scores * scaling + bias_R_1_1_T, dim=-1)
    return torch.matmul(probs, values).to(q_R_K_G_D.dtype)


def _joined(parts: list[torch.Tensor]) -> torch.Tensor:
    """The chunks' tensors along the batch dimension (the one tensor itself when there is one)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)
