"""Forward and backward passes of a LoRA model over a list of datums (the engine's training math).

Datums are grouped into right-padded micro-batches by length. The decoder runs once per
micro-batch, on each distinct input once (datums that repeat an input share its pass). Datums
that begin alike (an RL group's samples of one prompt, chats under one system prompt) share
decoder rows (`batch.shared_rows`, for the families of `decoder.supports`): their common prefix
runs once, and each datum's own tokens attend to it and to themselves only, at their own
positions, so each datum is computed as if alone (bit for bit in bf16, where attention is exact;
to fp32 rounding in fp32) and the prefix's gradients add up before its backward pass. The 49k-row
unembedding runs only where it is needed: with gradient at the positions the loss trains on,
without gradient elsewhere (their log-probs are still returned; a shared position with the same
target is scored once). With a built-in loss, whose
term at each position depends on that position's log-prob alone, the head's backward runs chunk
by chunk right after the chunk's forward (`_head_forward_backward`): its logits are made once,
not again in the backward pass. The logits
are those of the model's own forward (`logits.OutputHead`: the head plus any soft-capping or
scaling the family applies), so the trainer scores what the sampler samples. Gradients of
successive calls accumulate in the adapter until `optim_step`.

A micro-batch holds as many tokens as the activation budget allows. A datum longer than that (a
multi-turn episode of a few thousand tokens) forms a micro-batch of its own whose decoder layers
are checkpointed (`checkpointed_layers`): only each layer's input is kept, and one layer's
activations are made again at a time in the backward pass, so memory grows with the layer count
times the hidden size per token instead of with every activation.
"""

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from local_tinker.activations import without_remaking
from local_tinker.batch import (
    SHARED_ROW_TOKENS,
    PreparedDatum,
    micro_batches,
    pad_right_tokens,
    shared_row_inputs,
    shared_rows,
)
from local_tinker.budget import machine_memory_bytes
from local_tinker.decoder import supports as decoder_supports
from local_tinker.logits import OutputHead, base_causal_lm
from local_tinker.losses import (
    ENGINE_INPUTS,
    REQUIRED_INPUTS,
    SEQUENCE_LOG_RATIO,
    SEQUENCE_LOSSES,
    add_metrics,
    gradient_mask,
    loss_metrics,
    per_token_loss,
    sequence_log_ratio,
)
from local_tinker.memory import return_freed_memory
from local_tinker.precision import Precision

# Rows of [rows x vocab] logits materialised at once (64 x 49,152 x 4 bytes = 12 MiB in fp32 for
# SmolLM2's vocabulary): half of 128 rows peaks lower at the same speed.
LOGIT_CHUNK_ROWS = 64
MAX_MICROBATCH_TOKENS = 8192  # without gradients (scoring, `forward`): activations are not kept
# With gradients, a micro-batch's activations live until its backward, and glibc's heap about
# doubles them in resident memory; every further micro-batch streams the weights again. A GPU's
# memory is its own, and it wants large batches. On a CPU the budget is a share of the machine's
# memory (or its container's), within bounds: a laptop runs other things too. It is read from the
# machine's total, not from what is free at the moment, so that a run and its resumed rerun split
# their batches the same way (the same sums in the same order). A "cpu" entry here overrides it.
ACTIVATION_BUDGET_BYTES = {"cuda": 8 * 2**30}
CPU_BUDGET_SHARE = 1 / 16
CPU_BUDGET_BOUNDS = (256 * 2**20, 768 * 2**20)

CustomLoss = Callable[[list, list[torch.Tensor]], tuple[torch.Tensor, dict[str, float]]]


@dataclass
class PassResult:
    """Per-datum trainer log-probs `(T,)` (detached, fp32) and the summed loss."""

    logprobs: list[torch.Tensor]
    loss_sum: float
    metrics: dict[str, float]


def token_logprobs(lm_head: OutputHead, hidden_N_D: torch.Tensor, targets_N: torch.Tensor) -> torch.Tensor:
    """`log p(target)` for each row of hidden states, computed in fp32 in chunks of rows, `(N,)`.

    With gradients on, each chunk is checkpointed: its `[rows x vocab]` logits are recomputed in the
    backward pass instead of being stored, so the temporaries stay a few tens of MB and are reused
    (storing them all cost more in page faults than the recomputation costs in FLOPs).
    """
    pieces = []
    for start in range(0, hidden_N_D.shape[0], LOGIT_CHUNK_ROWS):
        rows, targets = hidden_N_D[start : start + LOGIT_CHUNK_ROWS], targets_N[start : start + LOGIT_CHUNK_ROWS]
        if torch.is_grad_enabled() and rows.requires_grad:
            pieces.append(checkpoint(_chunk_logprobs, lm_head, rows, targets, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(lm_head, rows, targets))
    if not pieces:
        return hidden_N_D.new_zeros((0,), dtype=torch.float32)
    return torch.cat(pieces)


def _chunk_logprobs(lm_head: OutputHead, rows_N_D: torch.Tensor, targets_N: torch.Tensor) -> torch.Tensor:
    # cross_entropy's fused log-softmax beats gather - logsumexp here.
    return -F.cross_entropy(lm_head(rows_N_D), targets_N, reduction="none")


def _decoder_and_head(model: nn.Module) -> tuple[nn.Module, OutputHead]:
    causal_lm = base_causal_lm(model)
    return causal_lm.get_decoder(), OutputHead(causal_lm)


# The gradient of a loss with respect to the trainer's log-probs of rows `[start:stop]` of the selected
# positions, given those log-probs: `grad_of(logprobs_N, slice(start, stop))`.
GradOfLogprobs = Callable[[torch.Tensor, slice], torch.Tensor]


def _batch_logprobs(
    model: nn.Module,
    datums: Sequence[PreparedDatum],
    grad_masks: Sequence[torch.Tensor] | None,
    precision: Precision,
    pad_id: int,
    grad_of: GradOfLogprobs | None = None,
    checkpoint_layers: bool = False,
    row_tokens: int = 0,
) -> list[torch.Tensor]:
    """Trainer log-probs of each datum's targets; differentiable where `grad_masks` is True.

    `grad_masks=None` means no gradient anywhere (a plain forward). With `grad_of`, the backward
    pass runs here instead (`_head_forward_backward`) and the log-probs come back detached. With
    `checkpoint_layers`, the decoder's layers keep only their inputs for the backward pass. With
    `row_tokens`, datums that begin alike share decoder rows of up to that many tokens
    (`batch.shared_rows`; `prefix_row_tokens` says whether the model can).
    """
    decoder, lm_head = _decoder_and_head(model)
    device = precision.device
    lengths_B = torch.tensor([d.length for d in datums], device=device)
    valid_B_T = torch.arange(int(lengths_B.max()), device=device)[None] < lengths_B[:, None]
    targets_B_T = torch.zeros(valid_B_T.shape, dtype=torch.long, device=device)
    wants_grad_B_T = torch.zeros_like(valid_B_T)
    for row, datum in enumerate(datums):
        targets_B_T[row, : datum.length] = datum.inputs["target_tokens"].to(device)
        if grad_masks is not None:
            wants_grad_B_T[row, : datum.length] = grad_masks[row].to(device)
    grad_sel = valid_B_T & wants_grad_B_T
    # No graph where no position wants a gradient (a micro-batch whose advantages are all 0): a graph
    # no backward pass runs through is freed only when its last tensor goes.
    checkpointed = checkpointed_layers(decoder) if checkpoint_layers else nullcontext()
    with precision.context(), torch.set_grad_enabled(bool(grad_sel.any())):
        with checkpointed:
            hidden_B_T_D, source_B_T = _hidden_states(decoder, datums, pad_id, device,
                                                      0 if checkpoint_layers else row_tokens)
        if grad_of is None:
            selected_N = token_logprobs(lm_head, hidden_B_T_D[grad_sel], targets_B_T[grad_sel])
        else:
            selected_N = _head_forward_backward(lm_head, hidden_B_T_D[grad_sel], targets_B_T[grad_sel], grad_of,
                                                precision)
        logprobs_B_T = hidden_B_T_D.new_zeros(valid_B_T.shape, dtype=torch.float32)
        logprobs_B_T = logprobs_B_T.masked_scatter(grad_sel, selected_N)
        with torch.no_grad():
            rest = valid_B_T & ~wants_grad_B_T
            # A decoder position that several datums share, with the same target (a shared prefix's
            # tokens but its last; identical datums), is scored once.
            targets_N = targets_B_T[rest]
            keys_N = source_B_T[rest] * (int(targets_N.max()) + 1 if len(targets_N) else 1) + targets_N
            unique_keys, copy_of_N = torch.unique(keys_N, return_inverse=True)
            first_U = torch.full_like(unique_keys, len(keys_N)).scatter_reduce_(
                0, copy_of_N, torch.arange(len(keys_N), device=device), "amin")
            rest_logprobs = token_logprobs(lm_head, hidden_B_T_D[rest].detach()[first_U], targets_N[first_U])[copy_of_N]
    logprobs_B_T = logprobs_B_T.masked_scatter(rest, rest_logprobs)
    return [logprobs_B_T[row, : datum.length] for row, datum in enumerate(datums)]


def _hidden_states(decoder: nn.Module, datums: Sequence[PreparedDatum], pad_id: int, device: torch.device,
                   row_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's last hidden states of each datum's positions, `[B, T, D]` (T: the longest datum),
    and the decoder position each comes from, `[B, T]` (positions that datums share have one).

    Datums with the same input (one sequence with several targets, as top-k distillation sends) share
    one decoder row; with `row_tokens`, so do datums with a common prefix (`batch.shared_rows`). The
    rows are gathered back, so the gradients through a shared position add up.
    """
    sequences = [d.tokens_T.tolist() for d in datums]
    rows = shared_rows(sequences, row_tokens) if row_tokens else []
    if any(len(row.members) > 1 and row.length > row.prefix for row in rows):
        inputs = shared_row_inputs(rows, sequences, pad_id)
        hidden_R_L_D = decoder(input_ids=inputs.tokens_R_L.to(device), attention_mask=inputs.mask_R_1_L_L.to(device),
                               position_ids=inputs.position_ids_R_L.to(device), use_cache=False).last_hidden_state
        # Gathered in fp32: the gradients of a shared position from its datums add up in fp32 (in bf16
        # each sum would round); the values are the same (bf16 -> fp32 is exact, the head casts back).
        row_N_T, column_N_T = inputs.row_N_T.to(device), inputs.column_N_T.to(device)
        return hidden_R_L_D.float()[row_N_T, column_N_T], row_N_T * hidden_R_L_D.shape[1] + column_N_T
    row_of: dict[tuple[int, ...], int] = {}
    unique_rows = [row_of.setdefault(tuple(tokens), len(row_of)) for tokens in sequences]
    tokens_U_T, attention_U_T = (t.to(device) for t in pad_right_tokens(list(row_of), pad_id))
    hidden_U_T_D = decoder(input_ids=tokens_U_T, attention_mask=attention_U_T, use_cache=False).last_hidden_state
    index_B = torch.tensor(unique_rows, device=device)
    width = hidden_U_T_D.shape[1]
    source_B_T = index_B[:, None] * width + torch.arange(width, device=device)
    return hidden_U_T_D if len(row_of) == len(datums) else hidden_U_T_D[index_B], source_B_T


def prefix_row_tokens(model: nn.Module, max_tokens: int) -> int:
    """The tokens a shared decoder row may hold for `model` (0: its datums are not shared): rows
    need a 4-D attention mask and position ids, which the decoder step's families take as given."""
    return min(SHARED_ROW_TOKENS, max_tokens) if decoder_supports(base_causal_lm(model)) else 0


def _micro_batches(datums: Sequence[PreparedDatum], max_tokens: int, row_tokens: int) -> list[list[int]]:
    """`batch.micro_batches` of the datums' shared rows (of the datums themselves without `row_tokens`):
    the datums of a row stay in one micro-batch."""
    if not row_tokens:
        return micro_batches([d.length for d in datums], max_tokens)
    rows = shared_rows([d.tokens_T.tolist() for d in datums], row_tokens)
    return [[m for r in group for m in rows[r].members] for group in micro_batches([row.length for row in rows], max_tokens)]


def _head_forward_backward(lm_head: OutputHead, rows_N_D: torch.Tensor, targets_N: torch.Tensor,
                           grad_of: GradOfLogprobs, precision: Precision) -> torch.Tensor:
    """The log-probs of `rows_N_D` (detached, `(N,)`), with the backward pass of the loss run through
    the head and then the decoder.

    The chunk's logits exist only here: each chunk's forward is followed at once by its backward
    (from `grad_of`, known as soon as the chunk's log-probs are), which leaves the head's adapter its
    gradient and the chunk's rows theirs; the decoder's backward then runs once, on all the rows.
    Against the checkpointed chunks of `token_logprobs`, the head's matmul and log-softmax run once
    instead of twice, the same ops on the same values: the log-probs, the loss and the decoder's
    gradients are bit for bit those of autograd through the checkpointed chunks. Only the head's
    adapter gradient adds up its chunks differently: in fp32 here, where bf16 autocast added them up
    in bf16 (all chunks flow into its one cached bf16 cast of the weight) before casting to fp32.
    It is faster the more of a batch is weighted (docs/findings.md). Called inside the forward's
    autocast context.
    """
    detached_N_D = rows_N_D.detach()
    pieces: list[torch.Tensor] = []
    row_grads: list[torch.Tensor] = []
    for start in range(0, detached_N_D.shape[0], LOGIT_CHUNK_ROWS):
        stop = min(start + LOGIT_CHUNK_ROWS, detached_N_D.shape[0])
        rows = detached_N_D[start:stop].requires_grad_(True)  # a leaf: a slice of a detached tensor
        logits_C_V = lm_head(rows)
        with torch.no_grad():  # autograd's ops through `-cross_entropy` (`_chunk_logprobs`), without its graph
            logprobs_C_V = torch.log_softmax(logits_C_V, dim=-1)
            rows_C = torch.arange(stop - start, device=logprobs_C_V.device)
            values = logprobs_C_V[rows_C, targets_N[start:stop]]
            grad_C_V = _log_softmax_gradient(logprobs_C_V, rows_C, targets_N[start:stop],
                                             grad_of(values, slice(start, stop)))
        with _no_autocast(precision):  # backward passes run outside autocast (as `total.backward()` did)
            logits_C_V.backward(grad_C_V)
        assert rows.grad is not None  # the chunk's log-probs depend on its rows
        pieces.append(values)
        row_grads.append(rows.grad)
    if not pieces:
        return rows_N_D.new_zeros((0,), dtype=torch.float32)
    if rows_N_D.requires_grad:
        with _no_autocast(precision):
            rows_N_D.backward(torch.cat(row_grads))
    return torch.cat(pieces)


def _log_softmax_gradient(logprobs_C_V: torch.Tensor, rows_C: torch.Tensor, targets_C: torch.Tensor,
                          grad_C: torch.Tensor) -> torch.Tensor:
    """The gradient with respect to the logits, given `grad_C` with respect to each row's log-prob of its
    target: as autograd computes it through `-cross_entropy`, the loss's gradient placed at each row's
    target, then the log-softmax's backward (`g - exp(log p) * sum(g)`): the same ops and bits, without
    the graph autograd would build around them for a backward pass that follows at once."""
    outer_C_V = torch.zeros_like(logprobs_C_V)
    outer_C_V[rows_C, targets_C] = grad_C
    return torch._log_softmax_backward_data(outer_C_V, logprobs_C_V, -1, logprobs_C_V.dtype)


def _no_autocast(precision: Precision) -> AbstractContextManager[object]:
    return torch.autocast(device_type=precision.device.type, enabled=False) if precision.autocast else nullcontext()


@dataclass(frozen=True)
class ActivationCost:
    """Bytes of activations a token keeps until the backward pass, plainly and with checkpointed layers.

    Kept per token and layer: about `9 * hidden + 3 * intermediate` values of the compute dtype,
    plus `hidden` fp32 values where bf16 attends in fp32 (a CPU); `activations.keep_fewer_activations`
    applied (checked against the growth of resident memory over a forward pass of SmolLM2). With
    checkpointed layers: each layer's input (`hidden` values), plus one layer's activations while
    its backward runs.
    """

    plain: int
    checkpointed: int

    @classmethod
    def of(cls, model: nn.Module, precision: Precision) -> "ActivationCost":
        config: Any = base_causal_lm(model).config
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        hidden, layers = int(config.hidden_size), int(config.num_hidden_layers)
        intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
        dtype = precision.autocast or torch.float32
        fp32_attention = 4 * hidden if dtype != torch.float32 and precision.device.type == "cpu" else 0
        per_layer = (9 * hidden + 3 * intermediate) * dtype.itemsize + fp32_attention
        return cls(plain=layers * per_layer, checkpointed=layers * hidden * dtype.itemsize + per_layer)


def activation_budget(precision: Precision) -> int:
    """Bytes of activations a micro-batch with gradients may keep on `precision`'s device."""
    if precision.device.type == "cpu" and "cpu" not in ACTIVATION_BUDGET_BYTES:
        return cpu_activation_budget(machine_memory_bytes())
    return ACTIVATION_BUDGET_BYTES.get(precision.device.type, ACTIVATION_BUDGET_BYTES["cuda"])


def cpu_activation_budget(machine_bytes: int | None) -> int:
    """`CPU_BUDGET_SHARE` of the machine's memory within `CPU_BUDGET_BOUNDS` (the lower bound where unknown)."""
    low, high = CPU_BUDGET_BOUNDS
    return low if machine_bytes is None else int(min(high, max(low, machine_bytes * CPU_BUDGET_SHARE)))


def max_backward_tokens(model: nn.Module, precision: Precision) -> int:
    """The most tokens a micro-batch with gradients may hold, from the activation budget (a longer
    datum is a micro-batch of its own, with checkpointed layers)."""
    per_token = ActivationCost.of(model, precision).plain
    return max(1, min(MAX_MICROBATCH_TOKENS, activation_budget(precision) // per_token))


@contextlib.contextmanager
def checkpointed_layers(decoder: nn.Module) -> Iterator[None]:
    """Within the block, each of `decoder.layers` runs under `torch.utils.checkpoint` (non-reentrant):
    its activations are made again in the backward pass, by the same ops on the same inputs, so the
    gradients are the same bit for bit."""
    layers: Any = decoder.layers
    for layer in layers:
        layer.forward = functools.partial(_checkpointed, layer.forward)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # back to the class's forward


def _checkpointed(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return checkpoint(functools.partial(_without_remaking, forward), *args, use_reentrant=False, **kwargs)


def _without_remaking(forward: Callable[..., Any], hidden: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    # In the forward and again when the backward pass makes the layer's activations again: the
    # checkpoint must see the same saved tensors both times.
    with without_remaking():
        out = forward(hidden, *args, **kwargs)
    # The layer's temporaries are free now; glibc would keep them beside the inputs the next layers
    # keep, and the heap would grow by about a layer's activations per layer.
    return_freed_memory(hidden.device, within_request=True)
    return out


def builtin_pass(
    model: nn.Module,
    datums: Sequence[PreparedDatum],
    loss_fn: str,
    config: dict[str, float],
    precision: Precision,
    pad_id: int,
    backward: bool,
) -> PassResult:
    """Run a built-in loss over all datums, micro-batch by micro-batch (backward if asked)."""
    outputs: list[torch.Tensor | None] = [None] * len(datums)
    loss_sum, metrics = 0.0, dict[str, float]()
    max_tokens = max_backward_tokens(model, precision) if backward else MAX_MICROBATCH_TOKENS
    row_tokens = prefix_row_tokens(model, max_tokens)
    for indices in _micro_batches(datums, max_tokens, row_tokens):
        batch = [datums[i] for i in indices]
        if backward and loss_fn in SEQUENCE_LOSSES:  # each token's term needs its sequence's ratio first
            batch = _with_sequence_log_ratios(batch, _batch_logprobs(model, batch, None, precision, pad_id,
                                                                     row_tokens=row_tokens))
        masks = [gradient_mask(loss_fn, d.inputs) for d in batch] if backward else None
        grad_of = _grad_of_loss(loss_fn, config, batch, masks, precision.device) if masks is not None else None
        oversize = backward and max(d.length for d in batch) > max_tokens  # a datum alone in its micro-batch
        logprobs = _batch_logprobs(model, batch, masks, precision, pad_id, grad_of, checkpoint_layers=oversize,
                                   row_tokens=row_tokens)
        with torch.no_grad():  # the backward pass ran in `_batch_logprobs`
            losses = [per_token_loss(loss_fn, lp, _to(d.inputs, lp.device), config).sum()
                      for lp, d in zip(logprobs, batch)]
            total = torch.stack(losses).sum()
            for lp, d in zip(logprobs, batch) if loss_fn == "stable_reinforce" else ():
                add_metrics(metrics, loss_metrics(loss_fn, lp.cpu(), d.inputs, config))
        loss_sum += float(total)
        for i, lp in zip(indices, logprobs):
            outputs[i] = lp.cpu()  # detached fp32 already: no graph outlives its micro-batch
    return PassResult([lp for lp in outputs if lp is not None], loss_sum, {"loss:sum": loss_sum, **metrics})


def _with_sequence_log_ratios(batch: Sequence[PreparedDatum], logprobs: Sequence[torch.Tensor]) -> list[PreparedDatum]:
    """The datums with their sequence's detached log-ratio at every position (`losses.SEQUENCE_LOG_RATIO`),
    from a forward pass of the same weights: the gradient pass then reads it chunk by chunk."""
    return [dataclasses.replace(d, inputs={**d.inputs, SEQUENCE_LOG_RATIO: sequence_log_ratio(lp.cpu(), d.inputs).expand(d.length)})
            for d, lp in zip(batch, logprobs)]


def _grad_of_loss(loss_fn: str, config: dict[str, float], batch: Sequence[PreparedDatum],
                  masks: Sequence[torch.Tensor], device: torch.device) -> GradOfLogprobs:
    """`grad_of` for a built-in loss over `batch`: each term depends on its own position's log-prob
    only (`losses.per_token_loss`), so a chunk's gradient needs only the chunk's log-probs and the
    loss inputs at the chunk's positions, taken in the order `_batch_logprobs` selects them."""
    keys = [*REQUIRED_INPUTS[loss_fn], *ENGINE_INPUTS.get(loss_fn, ())]
    inputs = {key: torch.cat([d.inputs[key][mask] for d, mask in zip(batch, masks)]).to(device)
              for key in keys if key != "target_tokens"}

    def grad_of(logprobs_N: torch.Tensor, rows: slice) -> torch.Tensor:
        with torch.enable_grad():
            leaf = logprobs_N.detach().requires_grad_(True)
            terms = per_token_loss(loss_fn, leaf, {key: value[rows] for key, value in inputs.items()}, config)
            (grad,) = torch.autograd.grad(terms.sum(), leaf)
        return grad

    return grad_of


def custom_pass(
    model: nn.Module,
    datums: Sequence[PreparedDatum],
    user_data: list,
    loss_fn: CustomLoss,
    precision: Precision,
    pad_id: int,
) -> PassResult:
    """One autograd pass through a user loss `loss_fn(data, logprobs_list) -> (loss, metrics)`."""
    logprobs: list[torch.Tensor | None] = [None] * len(datums)
    # Every micro-batch's graph lives until the user's loss runs its backward. A micro-batch holding
    # a datum longer than the budget allows keeps only its layers' inputs.
    max_tokens = max_backward_tokens(model, precision)
    row_tokens = prefix_row_tokens(model, max_tokens)
    for indices in _micro_batches(datums, MAX_MICROBATCH_TOKENS, row_tokens):
        batch = [datums[i] for i in indices]
        masks = [torch.ones(d.length, dtype=torch.bool) for d in batch]
        oversize = max(d.length for d in batch) > max_tokens
        for i, lp in zip(indices, _batch_logprobs(model, batch, masks, precision, pad_id, checkpoint_layers=oversize,
                                                  row_tokens=row_tokens)):
            logprobs[i] = lp.cpu()
    inputs = [lp for lp in logprobs if lp is not None]
    loss, user_metrics = loss_fn(user_data, inputs)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TypeError(f"custom loss must return (scalar tensor, metrics); got {type(loss).__name__}")
    loss.backward()
    loss_sum = float(loss.detach())
    metrics = {**{k: float(v) for k, v in user_metrics.items()}, "loss:sum": loss_sum}
    return PassResult([lp.detach().float() for lp in inputs], loss_sum, metrics)


def _to(inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device) for key, value in inputs.items()}
