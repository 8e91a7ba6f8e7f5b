"""Token generation with log-probs and stop conditions for the local engine (prompts: `scoring`).

Sampling runs on a second module tree over the base model's own tensors (`SamplerModel`: no copy
of the weights) with the sampled snapshot's LoRA loaded. The delta is added beside each weight, as
the trainer computes it, in the model's forward (prefill, scoring) and in the fused decode step;
only the fused step's packed copy of the weights (CPU) takes it merged in fp32 (base-model decode
speed). Merging a small delta into bf16 weights would round much of it away and the sampler's
log-probs would drift from the trainer's, so bf16 keeps it beside there too. Requests are batched:
every distinct prompt is prefilled once, its KV cache is shared by all its samples, an opening
that all prompts share is prefilled once for all of them, and finished rows leave the batch.
Llama-family models decode through the fused step of `decoder.py` (faster than the model's own
forward on a CPU; `make bench` measures it), and in fp32 on a CPU prefill through it too; others
prefill and decode through their forward.

Returned log-probs are those of the distribution sampled from: `log_softmax(logits / T)` for
temperature T > 0 (before top-k / top-p truncation), and the untempered `log_softmax(logits)` for
greedy decoding (T = 0), which therefore equal `compute_logprobs` at T in {0, 1}; a request's
`topk_sample_logprobs` are the top-k of that same distribution. Every path (the model's forward,
the fused step, the scorer) produces the logits of the model's own forward, soft-capping and logit
scales included (`logits.OutputHead`).
"""

import copy
import math
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from tinker import types
from tinker.types.topk_logprobs import TopkLogprobs
from torch import nn
from transformers import PreTrainedModel

from local_tinker.attention import attention_dtype
from local_tinker.batch import common_prefix_length, pad_left_tokens
from local_tinker.decoder import FusedDecoder
from local_tinker.decoder import supports as decoder_supports
from local_tinker.errors import DataFormatError
from local_tinker.logits import OutputHead
from local_tinker.memory import return_freed_memory
from local_tinker.precision import Precision
from local_tinker.scoring import PromptQuery, TargetCells, check_last_n, check_width

Deltas = dict[str, tuple[torch.Tensor, torch.Tensor, float]]


# The key every snapshot without a delta loads under: sampling clients of the base model alternate
# without re-packing the fused step's weights (an evaluation's new client, two clients' requests).
_BASE_WEIGHTS = object()


class SamplerModel:
    """The base model's weights, shared, under modules of its own, with one LoRA snapshot loaded at a time."""

    def __init__(self, base_model: nn.Module, precision: Precision):
        """Build modules over `base_model`'s own parameters and buffers (no tensor is copied).

        Call it before an adapter wraps `base_model`'s Linears (the sampler keeps plain Linears,
        with forward hooks for a snapshot's delta). The sampler never writes these tensors, so the
        trainer's base weights and the sampler's are one copy.

        Args:
            base_model: the frozen base model, already in the sampler's device and dtype.
            precision: device and sampler dtype.
        """
        self.precision = precision
        shared = {id(t): t for t in [*base_model.parameters(), *base_model.buffers()]}
        self.model: Any = copy.deepcopy(base_model, memo=shared)
        self._linears = {n: m for n, m in self.model.named_modules() if isinstance(m, nn.Linear)}
        self.decoder = FusedDecoder(self.model) if decoder_supports(self.model) else None
        self._hooks: list[Any] = []
        self.loaded_key: object = None

    def load(self, key: object, deltas: Deltas) -> None:
        """Compute `base + scale * B @ A` for `deltas` from now on (the base weights when empty).

        The delta is added beside each weight, as the trainer computes it
        (`x @ W + scale * (x @ A) @ B`); in fp32 the fused step merges it into its packed copy of
        the weights instead (merging into bf16 weights would round much of it away).
        """
        key = key if deltas else _BASE_WEIGHTS  # every client of the base model: nothing to switch
        if key is self.loaded_key:
            return
        unknown = set(deltas) - set(self._linears)
        assert not unknown, f"snapshot adapts modules this model lacks: {sorted(unknown)[:3]}"
        self._unload_lora()  # the old copies go before the new ones are made
        device, dtype = self.precision.device, self.precision.sampler_dtype
        loaded = {path: (a.to(device, dtype), b.to(device, dtype), scale) for path, (a, b, scale) in deltas.items()}
        self._hooks = [self._linears[path].register_forward_hook(_LoraDelta(*delta)) for path, delta in loaded.items()]
        if self.decoder is not None:  # the same tensors as the hooks'
            self.decoder.set_lora(loaded, merge=dtype == torch.float32)
        self.loaded_key = key

    def release(self) -> None:
        """Free what only sampling needs before other work (training) runs: the fused step's
        packed copy of the weights, as large as the base model, and the loaded snapshot's LoRA
        copies (with the snapshot they keep alive). The next snapshot would replace both anyway;
        re-packing the base weights costs about one decode step, and loading a LoRA far less than
        an RL iteration."""
        self._unload_lora()
        if self.decoder is not None:
            self.decoder.release()

    def _unload_lora(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self.decoder is not None:
            self.decoder.set_lora({})
        self.loaded_key = None


class _LoraDelta:
    """A forward hook adding `scale * (x @ A^T) @ B^T` to a Linear's output, as peft's LoRA layer does."""

    def __init__(self, a_r_in: torch.Tensor, b_out_r: torch.Tensor, scale: float):
        self.a_r_in, self.b_out_r, self.scale = a_r_in, b_out_r, scale

    def __call__(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
        return output + F.linear(F.linear(inputs[0], self.a_r_in), self.b_out_r) * self.scale


@dataclass
class SampleJob:
    """One `sample()` call: a prompt, how many samples, and how (the extras as the SDK's request names them)."""

    prompt: list[int]
    num_samples: int
    params: types.SamplingParams
    include_prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0
    first_sample: int = 0  # the index of this job's first sample in its request (a request split in parts)
    topk_sample_logprobs: int = 0
    target_prompt_logprobs: TargetCells | None = None
    prompt_alt_tokens_k: int = 0
    prompt_logprobs_last_n: int | None = None

    def check(self, vocab_size: int, max_context: int) -> None:
        """Refuse extras the job cannot have (see `scoring.check_width`, `scoring.check_last_n`).

        Raises:
            DataFormatError: naming the field, the value and what is expected.
        """
        new_tokens = self.params.max_tokens or max_context - len(self.prompt)
        check_width("topk_prompt_logprobs", self.topk_prompt_logprobs, len(self.prompt), vocab_size)
        check_width("topk_sample_logprobs", self.topk_sample_logprobs, self.num_samples * new_tokens, vocab_size)
        check_width("prompt_alt_tokens_k", self.prompt_alt_tokens_k, len(self.prompt) - 1)
        check_last_n(self.prompt_logprobs_last_n, len(self.prompt), self.include_prompt_logprobs)

    def prompt_query(self) -> PromptQuery | None:
        """What the job asks of its prompt besides the samples; None when nothing."""
        logprobs = self.include_prompt_logprobs or self.topk_prompt_logprobs > 0
        if not (logprobs or self.target_prompt_logprobs is not None or self.prompt_alt_tokens_k > 0):
            return None
        return PromptQuery(self.prompt, logprobs, self.topk_prompt_logprobs, self.prompt_logprobs_last_n,
                           self.target_prompt_logprobs, self.prompt_alt_tokens_k, float(self.params.temperature),
                           generator_seed(self.params.seed, ALT_TOKENS_STREAM))


# A request's seed opens this many random streams: one per sample (`num_samples` is far fewer), and
# the last for its prompt's alternative tokens (`prompt_alt_tokens_k`).
SEED_STREAMS = 1_000_003
ALT_TOKENS_STREAM = SEED_STREAMS - 1


def generator_seed(seed: int | None, stream: int) -> int:
    """The generator seed of one random stream of a request; a fresh one when the request has no seed."""
    return secrets.randbits(62) if seed is None else int(seed) * SEED_STREAMS + stream


@dataclass
class _Row:
    """One sequence being decoded."""

    job: int
    sample: int
    prompt: int
    temperature: float
    top_k: int
    top_p: float
    max_tokens: int
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    generator: torch.Generator
    report_topk: int = 0  # the k of `topk_sample_logprobs`
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    topk_ids: list[np.ndarray] = field(default_factory=list)  # per token, `(report_topk,)`
    topk_logprobs: list[np.ndarray] = field(default_factory=list)
    stop_reason: str | None = None

    def topk(self) -> TopkLogprobs | None:
        """The top-k recorded at each generated position, `(len(tokens), report_topk)`; None if not asked."""
        if self.report_topk == 0:
            return None
        k = self.report_topk
        ids = np.stack(self.topk_ids) if self.topk_ids else np.zeros((0, k))
        values = np.stack(self.topk_logprobs) if self.topk_logprobs else np.zeros((0, k))
        return TopkLogprobs(token_ids=ids.astype(np.int32), logprobs=values.astype(np.float32))


# Per decoded row and step, fp32 vocabulary-sized tensors alive at once: the logits, their
# tempered log-softmax, the probabilities and their cumulative sum.
VOCAB_TENSORS_PER_ROW = 4


def row_bytes(model: Any, dtype: torch.dtype, tokens: int) -> int:
    """The most memory one sampled row of `tokens` tokens (prompt and new ones) can hold: its share
    of the KV cache (in the dtype attention reads it in) and its step's vocabulary-sized tensors."""
    config = model.config
    layers, kv_heads = int(config.num_hidden_layers), int(getattr(config, "num_key_value_heads", None)
                                                           or config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    cache_item = torch.empty((), dtype=attention_dtype(dtype)).element_size()
    return layers * 2 * kv_heads * head_dim * cache_item * tokens + VOCAB_TENSORS_PER_ROW * 4 * int(config.vocab_size)


def stop_condition(stop: str | Sequence[str] | Sequence[int] | None) -> tuple[frozenset[int], tuple[str, ...]]:
    """Split `SamplingParams.stop` into stop token ids and stop strings."""
    if stop is None:
        return frozenset(), ()
    if isinstance(stop, str):
        return frozenset(), (stop,)
    items = list(stop)
    ids = frozenset(int(s) for s in items if isinstance(s, (int, np.integer)))
    strings = tuple(s for s in items if isinstance(s, str))
    return ids, strings


def check_sampling_params(params: types.SamplingParams, vocab_size: int) -> None:
    """Refuse settings that would sample junk rather than fail (NaN temperature, `top_p=0`, `stop=""`).

    `top_k` of -1 (the SDK's "no limit") or 0 (vLLM's) means no top-k truncation; an empty
    `stop` list, like `None`, means no stop condition.

    Raises:
        DataFormatError: naming the field, the value and what is expected.
    """
    if params.max_tokens is not None and params.max_tokens < 1:
        raise DataFormatError(f"SamplingParams.max_tokens must be >= 1, got {params.max_tokens}.")
    if not (math.isfinite(params.temperature) and params.temperature >= 0):
        raise DataFormatError(
            f"SamplingParams.temperature must be a finite number >= 0 (0 samples greedily), got {params.temperature}."
        )
    if not 0 < params.top_p <= 1:  # also false for NaN
        raise DataFormatError(f"SamplingParams.top_p must be in (0, 1] (1 keeps every token), got {params.top_p}.")
    if params.top_k < -1:
        raise DataFormatError(f"SamplingParams.top_k must be >= 1, or -1 (or 0) for no limit; got {params.top_k}.")
    stop_ids, stop_strings = stop_condition(params.stop)
    if "" in stop_strings:
        raise DataFormatError(
            f"SamplingParams.stop contains an empty string (stop={params.stop!r}), which would end every sample "
            "after one token; pass non-empty strings, token ids, or None."
        )
    outside = sorted(i for i in stop_ids if not 0 <= i < vocab_size)
    if outside:
        raise DataFormatError(
            f"SamplingParams.stop has token ids outside [0, {vocab_size}): {outside[:5]}; they could never match."
        )


def generate(
    sampler: SamplerModel, jobs: Sequence[SampleJob], tokenizer: object, max_context: int,
    cancel: threading.Event | None = None,
) -> list[list[_Row]]:
    """Decode every sample of every job in one batch; returns the finished rows of each job.

    Setting `cancel` stops decoding after the current token (the rows are then incomplete).
    """
    model, precision = sampler.model, sampler.precision
    prompts = sorted({tuple(job.prompt) for job in jobs})
    prompt_index = {p: i for i, p in enumerate(prompts)}
    rows = [_make_row(j, job.first_sample + s, prompt_index[tuple(job.prompt)], job, max_context, precision)
            for j, job in enumerate(jobs) for s in range(job.num_samples)]
    with torch.inference_mode():
        new_tokens = max(row.max_tokens for row in rows)
        cache, logits_P_V, mask_P_L = _prefill(model, prompts, precision, sampler.decoder, new_tokens)
        expand = torch.tensor([row.prompt for row in rows], device=precision.device)
        if sampler.decoder is not None:
            sampler.decoder.start(cache, expand, mask_P_L[expand], new_tokens)
            del cache
            step = _fused_step(sampler.decoder)
        else:
            cache.reorder_cache(expand)
            step = _forward_step(model, cache, mask_P_L[expand])
        try:
            _decode(step, rows, logits_P_V[expand], mask_P_L[expand].sum(-1), tokenizer, precision, cancel)
        finally:
            if sampler.decoder is not None:
                sampler.decoder.finish()
    finished: list[list[_Row]] = [[] for _ in jobs]
    for row in rows:
        finished[row.job].append(row)
    return finished


def _make_row(j: int, s: int, p: int, job: SampleJob, max_context: int, precision: Precision) -> _Row:
    params = job.params
    room = max_context - len(job.prompt)
    if room <= 0:
        raise ValueError(f"prompt of {len(job.prompt)} tokens fills the model's context window of {max_context}.")
    max_tokens = room if params.max_tokens is None else min(int(params.max_tokens), room)
    generator = torch.Generator(device=precision.device).manual_seed(generator_seed(params.seed, s))
    stop_ids, stop_strings = stop_condition(params.stop)
    return _Row(j, s, p, float(params.temperature), int(params.top_k), float(params.top_p),
                max_tokens, stop_ids, stop_strings, generator, report_topk=job.topk_sample_logprobs)


def _prefill(
    model: PreTrainedModel, prompts: Sequence[tuple[int, ...]], precision: Precision, fused: FusedDecoder | None,
    new_tokens: int,
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Left-padded forward over the distinct prompts; returns the cache, last logits, mask.

    With the `fused` decoder (its models): the layers and then the head on the last positions only, a
    chunk of prompts at a time (`prefill_chunk_rows`), returning the chunks' caches in order; the
    opening all prompts share (`shared_prefix_length`) is prefilled once and each chunk attends to
    it. The layers are the fused decoder's own `prefill` on a CPU (`FusedDecoder.prefills`), over the
    weights as the generation's steps will read them (`new_tokens`: packed or not), else the model's
    decoder. Otherwise the model's whole forward, with whatever it does to its logits, in one go.
    """
    if fused is None:  # the model's forward, with whatever it does to its logits
        tokens, mask, positions = (t.to(precision.device) for t in pad_left_tokens(prompts))
        out = model(input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        return out.cache, out.logits[:, -1].float(), mask
    shared = shared_prefix_length(prompts)
    opening = torch.tensor([prompts[0][:shared]], device=precision.device)  # every prompt's first tokens
    tokens, own_mask, positions = (t.to(precision.device) for t in pad_left_tokens([p[shared:] for p in prompts]))
    positions = positions + shared  # going on from the opening
    # [opening | left padding | own tokens]: the mask has a hole where prompts share an opening
    mask = torch.cat([own_mask.new_ones((len(prompts), shared)), own_mask], dim=1)
    if fused.prefills():
        before, packed = None, fused.packs_steps(new_tokens)
        if shared:
            before, _ = fused.prefill(opening, torch.ones_like(opening), positions.new_tensor([list(range(shared))]),
                                      packed=packed)

        def chunk_cache(part: slice) -> tuple[Any, torch.Tensor]:  # a chunk's cache and last hidden states
            return fused.prefill(tokens[part], own_mask[part], positions[part], before, packed)

        head: Callable[[torch.Tensor], torch.Tensor] = fused.logits
    else:
        decoder = model.get_decoder()
        prefix_cache = decoder(input_ids=opening, use_cache=True).cache if shared else None

        def chunk_cache(part: slice) -> tuple[Any, torch.Tensor]:
            cache = None
            if prefix_cache is not None:  # the opening's cache, one copy per prompt of the chunk
                cache = copy.deepcopy(prefix_cache)
                cache.batch_repeat_interleave(len(prompts[part]))
            out = decoder(input_ids=tokens[part], attention_mask=mask[part], position_ids=positions[part], cache=cache,
                          use_cache=True)
            return out.cache, out.last_hidden_state[:, -1].clone()

        head = OutputHead(model)
    chunk = prefill_chunk_rows(model.config, mask.shape[1])
    caches, lasts = [], []
    for start in range(0, len(prompts), chunk):
        cache, last = chunk_cache(slice(start, start + chunk))
        caches.append(cache)
        lasts.append(last)
        if len(prompts) > chunk:  # the chunk's activations back to the system before the next one's
            return_freed_memory(precision.device, within_request=True)
    # The head on a 2-D tensor: on the 3-D `[:, -1:]` view (`logits_to_keep=1`) torch's matmul
    # copies the head weight once per prompt.
    return caches, head(torch.cat(lasts)), mask


# Prompts opening with at least this many tokens in common (a system prompt, few-shot examples)
# prefill that opening once (`shared_prefix_length`).
SHARED_PREFIX_MIN_TOKENS = 8


def shared_prefix_length(prompts: Sequence[tuple[int, ...]]) -> int:
    """Tokens that all of the (sorted, distinct) `prompts` open with, leaving each prompt at least one
    token of its own (its last position's logits start its decoding); 0 when fewer than
    `SHARED_PREFIX_MIN_TOKENS` or fewer than two prompts."""
    if len(prompts) < 2:
        return 0
    # In sorted order, what the first and the last prompt share, every prompt between them shares.
    first, last = prompts[0], prompts[-1]
    limit = min(len(p) for p in prompts) - 1
    shared = common_prefix_length(first, last, limit)
    return shared if shared >= SHARED_PREFIX_MIN_TOKENS else 0


# The most transient prefill memory (`prefill_row_bytes` per prompt) held at once: prompts beyond it
# are prefilled a chunk at a time, and their caches decode together.
PREFILL_CHUNK_BYTES = 256 * 2**20


def prefill_row_bytes(config: Any, width: int) -> int:
    """Transient memory of one prompt of `width` tokens in its prefill's widest moment: a padded batch
    runs attention with a mask, which materializes the scores of every head (a few `width` x `width`
    copies: scores, mask, softmax), beside the MLP's and the residual stream's activations; fp32."""
    heads, hidden = int(config.num_attention_heads), int(config.hidden_size)
    intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    return 4 * (4 * heads * width * width + width * (3 * intermediate + 8 * hidden))


def prefill_chunk_rows(config: Any, width: int) -> int:
    """Prompts of `width` tokens prefilled together: as many as fit `PREFILL_CHUNK_BYTES`, at least one."""
    return max(1, PREFILL_CHUNK_BYTES // prefill_row_bytes(config, width))


class _Step(Protocol):
    def __call__(self, tokens_R: torch.Tensor, positions_R: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """Drop the rows not in `keep` (None: keep all), append a token per row; return next logits."""
        ...


def _fused_step(decoder: FusedDecoder) -> _Step:
    def step(tokens_R: torch.Tensor, positions_R: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        if keep is not None:
            decoder.keep(keep)
        return decoder.step(tokens_R, positions_R)

    return step


def _forward_step(model: PreTrainedModel, cache: Any, mask_R_L: torch.Tensor) -> _Step:
    """A decode step through the model's own forward (architectures the fused decoder lacks)."""
    state = {"mask": mask_R_L}

    def step(tokens_R: torch.Tensor, positions_R: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        mask = state["mask"] if keep is None else state["mask"][keep]
        if keep is not None:
            cache.reorder_cache(keep)
        state["mask"] = mask = torch.cat([mask, mask.new_ones((len(tokens_R), 1))], dim=1)
        out = model(input_ids=tokens_R[:, None], attention_mask=mask, position_ids=positions_R[:, None],
                    cache=cache, use_cache=True)
        return out.logits[:, -1].float()

    return step


def _decode(
    step: _Step,
    rows: list[_Row],
    logits_R_V: torch.Tensor,
    positions_R: torch.Tensor,
    tokenizer: object,
    precision: Precision,
    cancel: threading.Event | None = None,
) -> None:
    active = list(rows)
    while active and not (cancel is not None and cancel.is_set()):
        next_tokens = _choose(active, logits_R_V, tokenizer)
        keep = [i for i, row in enumerate(active) if row.stop_reason is None]
        if not keep:
            return
        index = None
        if len(keep) < len(active):
            order = compacted_order(keep)
            index = torch.tensor(order, device=precision.device)
            positions_R, next_tokens = positions_R[index], next_tokens[index]
            active = [active[i] for i in order]
        logits_R_V = step(next_tokens, positions_R, index)
        positions_R = positions_R + 1


def compacted_order(keep: list[int]) -> list[int]:
    """The kept rows (ascending indices) in the order the batch goes on in: a kept row among the first
    `len(keep)` stays in place, and the kept rows beyond them fill the places of the rows that
    finished there. Each row draws from its own generator, so the order changes no sample; the
    decoder's cache then moves only the rows that fill a place (`FusedDecoder.keep`)."""
    count, kept = len(keep), set(keep)
    beyond = [i for i in keep if i >= count]
    return [i if i in kept else beyond.pop() for i in range(count)]


def _choose(active: list[_Row], logits_R_V: torch.Tensor, tokenizer: object) -> torch.Tensor:
    """Pick each row's next token, record it with its log-prob, and mark rows that stop.

    Sampling is by inverse CDF: one uniform draw per sampled row from the row's own generator (so a
    seed reproduces a row whatever else shares the batch), then one vectorised search over the
    cumulative probabilities (summed in float64) of the sampled rows (`_inverse_cdf`). Greedy rows (temperature 0)
    take their argmax and draw nothing.
    """
    temps = [r.temperature if r.temperature > 0 else 1.0 for r in active]
    tempered_R_V = logits_R_V if set(temps) == {1.0} else logits_R_V / logits_R_V.new_tensor(temps)[:, None]
    logprobs_R_V = torch.log_softmax(tempered_R_V, dim=-1)
    del tempered_R_V  # one vocabulary-sized tensor fewer while the draws run
    _record_topk(active, logprobs_R_V)
    sampled = [i for i, row in enumerate(active) if row.temperature > 0]
    if len(sampled) == len(active):
        chosen_R = _draw(active, logprobs_R_V)
    else:
        chosen_R = logits_R_V.argmax(dim=-1)
        if sampled:
            index_S = torch.tensor(sampled, device=logits_R_V.device)
            chosen_R[index_S] = _draw([active[i] for i in sampled], logprobs_R_V[index_S])
    chosen_logprobs = logprobs_R_V.gather(-1, chosen_R[:, None]).squeeze(-1).tolist()
    for row, token, logprob in zip(active, chosen_R.tolist(), chosen_logprobs):
        row.tokens.append(token)
        row.logprobs.append(logprob)
        if token in row.stop_ids or _hits_stop_string(row, tokenizer):
            row.stop_reason = "stop"
        elif len(row.tokens) >= row.max_tokens:
            row.stop_reason = "length"
    return chosen_R


def _draw(rows: list[_Row], logprobs_S_V: torch.Tensor) -> torch.Tensor:
    """Each row's token drawn from its (tempered) distribution, after its top-k / top-p truncation."""
    probs_S_V = logprobs_S_V.exp()
    for s, row in enumerate(rows):
        if 0 < row.top_k < probs_S_V.shape[1] or row.top_p < 1.0:
            probs_S_V[s] = _truncate(probs_S_V[s], row.top_k, row.top_p)
    uniforms_S = torch.stack([torch.rand((), generator=row.generator, device=logprobs_S_V.device) for row in rows])
    return _inverse_cdf(probs_S_V, uniforms_S)


DRAW_BLOCK = 256  # tokens per block of `_inverse_cdf`'s two-level search


def _inverse_cdf(probs_S_V: torch.Tensor, uniforms_S: torch.Tensor) -> torch.Tensor:
    """For each row, the token `i` where `u * total` falls in `[cdf(i - 1), cdf(i))`: token `i` with
    probability `p_i / total`, and never a token of probability 0 (`u` is in `[0, 1)`).

    The cumulative sums are taken in two levels, in float64: the vocabulary's blocks of `DRAW_BLOCK`
    tokens summed (a vectorised reduction), the block sums accumulated, then the chosen block's own
    tokens. A running sum over the whole vocabulary is one long chain of dependent adds: on a CPU it
    took most of a draw's time (docs/findings.md). Each row's sums depend on that row alone, so a seed
    draws the same tokens whatever else shares the batch. Float64: an fp32 running sum over a large
    vocabulary rounds chaotically, so logits that differ in their last bits (the same row batched
    with other rows) moved a boundary under ~1 draw in 1,300 (near-uniform SmolLM2-vocabulary rows);
    summed in float64 none moved in 4,000.
    """
    rows, vocab = probs_S_V.shape
    blocks = -(-vocab // DRAW_BLOCK)
    probs = probs_S_V if vocab % DRAW_BLOCK == 0 else F.pad(probs_S_V, (0, blocks * DRAW_BLOCK - vocab))
    probs = probs.reshape(rows, blocks, DRAW_BLOCK)  # a view of the usual contiguous rows
    # Summed in float64 without a copy; a leading 0 makes entry `n` the sum before block `n`.
    before_S_N1 = F.pad(probs.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1), (1, 0))
    target_S = uniforms_S.double() * before_S_N1[:, -1]
    block_S = (torch.searchsorted(before_S_N1, target_S[:, None], right=True).squeeze(-1) - 1).clamp(max=blocks - 1)
    before_S = before_S_N1.gather(1, block_S[:, None]).squeeze(-1)
    within_S_B = probs[torch.arange(rows, device=probs.device), block_S].double().cumsum(dim=-1)
    # The two levels round apart: an offset at or past the block's own total takes its last token of
    # non-zero probability (where its running sum first reaches that total).
    last_S = within_S_B[:, -1:].contiguous()
    offset_S = torch.minimum((target_S - before_S)[:, None], last_S)
    inside_S = torch.where(offset_S < last_S, torch.searchsorted(within_S_B, offset_S, right=True),
                           torch.searchsorted(within_S_B, last_S)).squeeze(-1)
    return block_S * DRAW_BLOCK + inside_S


def _record_topk(active: list[_Row], logprobs_R_V: torch.Tensor) -> None:
    """Record, for each row that asked, the top-k of the distribution its token's log-prob is from."""
    widest = max(row.report_topk for row in active)
    if widest == 0:
        return
    top = torch.topk(logprobs_R_V, widest, dim=-1)
    ids_R_K, values_R_K = top.indices.cpu().numpy(), top.values.cpu().numpy()
    for i, row in enumerate(active):
        if row.report_topk:
            row.topk_ids.append(ids_R_K[i, : row.report_topk])
            row.topk_logprobs.append(values_R_K[i, : row.report_topk])


def _truncate(probs_V: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Zero the probabilities outside the top-k tokens and the top-p nucleus."""
    if 0 < top_k < probs_V.shape[0]:
        threshold = torch.topk(probs_V, top_k).values[-1]
        probs_V = torch.where(probs_V >= threshold, probs_V, torch.zeros_like(probs_V))
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs_V, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=0) / sorted_probs.sum()
        outside = (cumulative - sorted_probs / sorted_probs.sum()) >= top_p
        sorted_probs[outside] = 0.0
        probs_V = torch.zeros_like(probs_V).scatter(0, order, sorted_probs)
    return probs_V


def _hits_stop_string(row: _Row, tokenizer: object) -> bool:
    """Whether the text decoded so far now contains one of the row's stop strings."""
    if not row.stop_strings:
        return False
    longest = max(len(s) for s in row.stop_strings)
    tail = tokenizer.decode(row.tokens[-(longest + 8):])  # type: ignore[attr-defined]
    return any(s in tail for s in row.stop_strings)

