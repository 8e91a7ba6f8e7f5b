"""Prompt scoring for the local engine: what one forward pass over a prompt tells about it.

Each prompt token's log-prob given the ones before it (`compute_logprobs`, a sample request's
prompt log-probs), and what a sample request may ask of the same pass (`PromptQuery`):

- `topk`: the k likeliest tokens and their log-probs at each position;
- `targets` (`target_prompt_logprobs`): the log-probs of named ids at named positions;
- `alt_k` (`prompt_alt_tokens_k`): k independent draws, with replacement, at each position;
- `last_n` (`prompt_logprobs_last_n`): only the last N tokens' log-probs and top-k (not the targets
  or the draws, as the SDK documents).

Positions follow the SDK. Per-token results have one entry per prompt token, `NaN` (top-k: a
sentinel row) where nothing was scored, always the first; per-position tensors (targets, draws)
have `len(prompt) - 1` rows, row i for prompt token i + 1.

Log-probs, top-k and targets are of the model's untempered `log_softmax(logits)`, as
`compute_logprobs`. Draws are at the request's temperature T from the whole tempered distribution
(the request's top_k / top_p truncate its samples only), each with its log-prob under the
distribution it was drawn from, as a sampled token's (`sampler`): `log_softmax(logits / T)`, and at
T = 0 every draw is the argmax, with its untempered log-prob.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types
from tinker.types.prompt_alt_tokens import PromptAltTokens
from tinker.types.topk_logprobs import MASK_LOGPROB, TopkLogprobs
from transformers import PreTrainedModel

from local_tinker.batch import micro_batches, pad_right_tokens
from local_tinker.errors import DataFormatError
from local_tinker.logits import OutputHead
from local_tinker.precision import Precision
from local_tinker.trainer import LOGIT_CHUNK_ROWS, MAX_MICROBATCH_TOKENS, token_logprobs

# The most (token id, log-prob) cells one request may ask for, summed over positions (and samples):
# a top-k or a number of draws times the positions, or the cells of a target tensor. It bounds the
# response (12 bytes a cell) and what the engine holds while building it.
MAX_RETURNED_CELLS = 2**24


@dataclass(frozen=True)
class TargetCells:
    """The cells a `target_prompt_logprobs` tensor lists, in its layout's order (row-major, or CSR).

    Cell n asks for the log-prob of `ids_N[n]` (-1: nothing, answered 0.0) at prompt position
    `rows_N[n] + 1`; `rows_N` never decreases.
    """

    shape: tuple[int, int]
    rows_N: np.ndarray
    ids_N: np.ndarray
    crow_indices: list[int] | None = None  # the request's sparse CSR layout, which the answer keeps
    col_indices: list[int] | None = None

    def response(self, logprobs_N: np.ndarray) -> types.TensorData:
        """One log-prob per cell, as a float32 tensor of the request's shape and layout."""
        values = np.asarray(logprobs_N, dtype=np.float32)
        return types.TensorData(data=values, dtype="float32", shape=list(self.shape),
                                sparse_crow_indices=self.crow_indices, sparse_col_indices=self.col_indices)


def target_cells(tensor: types.TensorData, prompt_length: int, vocab_size: int) -> TargetCells:
    """Check a `target_prompt_logprobs` tensor against its prompt and list its cells.

    Raises:
        DataFormatError: naming the field and what was expected (dtype, shape, CSR layout, ids).
    """
    rows = prompt_length - 1
    shape = tensor.shape
    if tensor.dtype != "int64":
        raise DataFormatError(f"target_prompt_logprobs must be an int64 tensor of token ids, got {tensor.dtype}.")
    if shape is None or len(shape) != 2 or shape[0] != rows or shape[1] < 1:
        raise DataFormatError(
            f"target_prompt_logprobs must be 2-D, [len(prompt) - 1, K] = [{rows}, K >= 1] for this prompt of "
            f"{prompt_length} tokens, got shape {shape}."
        )
    width = shape[1]
    if tensor.sparse_crow_indices is None:
        ids = np.asarray(tensor.data).reshape(-1)
        if ids.size != rows * width:
            raise DataFormatError(f"target_prompt_logprobs has {ids.size} values for its shape {shape} "
                                  f"({rows * width} cells).")
        cells = TargetCells((rows, width), np.repeat(np.arange(rows), width), ids.astype(np.int64))
    else:
        cells = _sparse_cells(tensor, rows, width)
    outside = np.unique(cells.ids_N[(cells.ids_N < -1) | (cells.ids_N >= vocab_size)])
    if outside.size:
        raise DataFormatError(
            f"target_prompt_logprobs holds ids outside [0, {vocab_size}) (and -1 for no request): "
            f"{outside[:5].tolist()}."
        )
    if not (cells.ids_N != -1).any():
        raise DataFormatError("target_prompt_logprobs names no token id (every cell is -1); name at least one.")
    if len(cells.ids_N) > MAX_RETURNED_CELLS:
        raise DataFormatError(
            f"target_prompt_logprobs lists {len(cells.ids_N):,} cells, more than the {MAX_RETURNED_CELLS:,} a "
            "request may ask for; send it sparse (TensorData.from_torch_sparse(ids, pad_value=-1)) or in parts."
        )
    return cells


def _sparse_cells(tensor: types.TensorData, rows: int, width: int) -> TargetCells:
    crow_R = np.asarray(tensor.sparse_crow_indices, dtype=np.int64)
    col_N = np.asarray(tensor.sparse_col_indices or [], dtype=np.int64)
    ids_N = np.asarray(tensor.data, dtype=np.int64)
    problem = _csr_problem(crow_R, col_N, len(ids_N), rows, width, tensor.sparse_col_indices is None)
    if problem:
        raise DataFormatError(f"target_prompt_logprobs is not a valid sparse CSR tensor of shape {[rows, width]}: "
                              f"{problem}.")
    return TargetCells((rows, width), np.repeat(np.arange(rows), np.diff(crow_R)), ids_N,
                       crow_R.tolist(), col_N.tolist())


def _csr_problem(crow_R: np.ndarray, col_N: np.ndarray, values: int, rows: int, width: int, no_cols: bool) -> str:
    """What is wrong with a CSR layout ('' when nothing)."""
    if no_cols:
        return "sparse_col_indices is missing"
    if len(crow_R) != rows + 1:
        return f"sparse_crow_indices has {len(crow_R)} entries, not rows + 1 = {rows + 1}"
    if crow_R[0] != 0 or (np.diff(crow_R) < 0).any() or crow_R[-1] != values:
        return f"sparse_crow_indices must rise from 0 to the number of values, {values}"
    if len(col_N) != values:
        return f"sparse_col_indices has {len(col_N)} entries for {values} values"
    if ((col_N < 0) | (col_N >= width)).any():
        return f"sparse_col_indices must lie in [0, K = {width})"
    flat_N = np.repeat(np.arange(rows), np.diff(crow_R)) * width + col_N
    if (np.diff(flat_N) <= 0).any():
        return "each row's sparse_col_indices must be strictly increasing"
    return ""


def check_width(field: str, k: int, positions: int, vocab_size: int | None = None) -> None:
    """Refuse a per-position count `k` (a top-k width, a number of draws) below 0, above the
    vocabulary (`vocab_size`, for a top-k), or asking more than `MAX_RETURNED_CELLS` over `positions`.

    Raises:
        DataFormatError: naming the field, the value and what is expected.
    """
    if k < 0 or (vocab_size is not None and k > vocab_size):
        most = f"at most the vocabulary, {vocab_size}" if vocab_size is not None else "no upper bound of its own"
        raise DataFormatError(f"{field} must be 0 (none) or more ({most}), got {k}.")
    if k * positions > MAX_RETURNED_CELLS:
        raise DataFormatError(
            f"{field}={k} over {positions:,} positions asks for {k * positions:,} log-probs, more than the "
            f"{MAX_RETURNED_CELLS:,} a request may return; lower it (or the prompt, max_tokens or num_samples)."
        )


def check_last_n(last_n: int | None, prompt_length: int, include_prompt_logprobs: bool) -> None:
    """Refuse a `prompt_logprobs_last_n` without prompt log-probs or outside [1, len(prompt) - 1].

    Raises:
        DataFormatError: naming the field, the value and what is expected.
    """
    if last_n is None:
        return
    if not include_prompt_logprobs:
        raise DataFormatError("prompt_logprobs_last_n applies to prompt log-probs: set include_prompt_logprobs=True "
                              "(prompt_logprobs in a SampleRequest).")
    if not 1 <= last_n <= prompt_length - 1:
        raise DataFormatError(f"prompt_logprobs_last_n must be between 1 and len(prompt) - 1 = {prompt_length - 1} "
                              f"for this prompt of {prompt_length} tokens, got {last_n}.")


@dataclass(frozen=True)
class PromptQuery:
    """What to compute over one prompt (positions and distributions: see the module docstring)."""

    tokens: list[int]
    logprobs: bool = True  # each token's log-prob
    topk: int = 0
    last_n: int | None = None  # score only the last N tokens (log-probs and top-k)
    targets: TargetCells | None = None
    alt_k: int = 0
    alt_temperature: float = 1.0
    alt_seed: int = 0  # the draws' generator seed


@dataclass
class PromptScores:
    """The answers to a `PromptQuery`, as the `SampleResponse` fields of the same names (None: not asked)."""

    prompt_logprobs_np: np.ndarray | None = None
    topk_prompt_logprobs_np: TopkLogprobs | None = None
    target_prompt_logprobs: types.TensorData | None = None
    prompt_alt_tokens: PromptAltTokens | None = None


def score(model: PreTrainedModel, queries: Sequence[PromptQuery], precision: Precision) -> list[PromptScores]:
    """Answer each query from one forward pass over its prompt.

    Prompts are run in right-padded micro-batches of similar length.
    """
    decoder, lm_head = model.get_decoder(), OutputHead(model)
    results = [PromptScores()] * len(queries)
    with torch.inference_mode():
        for indices in micro_batches([len(q.tokens) for q in queries], MAX_MICROBATCH_TOKENS):
            tokens, mask = pad_right_tokens([queries[i].tokens for i in indices])
            tokens, mask = tokens.to(precision.device), mask.to(precision.device)
            hidden = decoder(input_ids=tokens, attention_mask=mask).last_hidden_state
            for row, i in enumerate(indices):
                n = len(queries[i].tokens)
                results[i] = _answer(lm_head, hidden[row, : n - 1], tokens[row, 1:n], queries[i])
    return results


def _answer(lm_head: OutputHead, hidden_P_D: torch.Tensor, next_P: torch.Tensor, query: PromptQuery) -> PromptScores:
    """A query's answers from the hidden states of its prompt's first P = len(prompt) - 1 tokens, each
    of which predicts the next token, `next_P`."""
    positions = hidden_P_D.shape[0]
    first = positions - query.last_n if query.last_n is not None else 0
    scores = PromptScores()
    if query.logprobs:
        values = np.full(positions + 1, np.nan, dtype=np.float32)
        values[first + 1 :] = token_logprobs(lm_head, hidden_P_D[first:], next_P[first:]).cpu().numpy()
        scores.prompt_logprobs_np = values
    if query.topk > 0:
        scores.topk_prompt_logprobs_np = _topk(lm_head, hidden_P_D[first:], query.topk, skipped=first + 1)
    if query.targets is not None:
        scores.target_prompt_logprobs = query.targets.response(_target_logprobs(lm_head, hidden_P_D, query.targets))
    if query.alt_k > 0:
        scores.prompt_alt_tokens = _draw_alternatives(lm_head, hidden_P_D, query)
    return scores


def _topk(lm_head: OutputHead, hidden_N_D: torch.Tensor, k: int, skipped: int) -> TopkLogprobs:
    """Top-k log-probs at each of N positions, after `skipped` sentinel rows (tokens not scored)."""
    ids = [torch.zeros((skipped, k), dtype=torch.long, device=hidden_N_D.device)]
    values = [torch.full((skipped, k), MASK_LOGPROB, device=hidden_N_D.device)]
    for start in range(0, hidden_N_D.shape[0], LOGIT_CHUNK_ROWS):
        logprobs = torch.log_softmax(lm_head(hidden_N_D[start : start + LOGIT_CHUNK_ROWS]), dim=-1)
        top = torch.topk(logprobs, k, dim=-1)
        ids.append(top.indices)
        values.append(top.values)
    return TopkLogprobs(
        token_ids=torch.cat(ids).cpu().numpy().astype(np.int32),
        logprobs=torch.cat(values).cpu().numpy().astype(np.float32),
    )


def _target_logprobs(lm_head: OutputHead, hidden_P_D: torch.Tensor, cells: TargetCells) -> np.ndarray:
    """The log-prob of each cell's id at its position, 0.0 for a cell of -1; `(cells,)` float32.

    The head runs only on the chunks of positions some cell names an id at.
    """
    values_N = np.zeros(len(cells.ids_N), dtype=np.float32)
    named_M = np.flatnonzero(cells.ids_N != -1)
    rows_M, ids_M = cells.rows_N[named_M], cells.ids_N[named_M]
    device = hidden_P_D.device
    for chunk in np.unique(rows_M // LOGIT_CHUNK_ROWS).tolist():
        start = chunk * LOGIT_CHUNK_ROWS
        lo, hi = np.searchsorted(rows_M, [start, start + LOGIT_CHUNK_ROWS])
        logprobs_C_V = torch.log_softmax(lm_head(hidden_P_D[start : start + LOGIT_CHUNK_ROWS]), dim=-1)
        picked = logprobs_C_V[torch.as_tensor(rows_M[lo:hi] - start, device=device),
                              torch.as_tensor(ids_M[lo:hi], device=device)]
        values_N[named_M[lo:hi]] = picked.cpu().numpy()
    return values_N


def _draw_alternatives(lm_head: OutputHead, hidden_P_D: torch.Tensor, query: PromptQuery) -> PromptAltTokens:
    """`query.alt_k` draws with replacement at each of P positions, at the query's temperature, and
    their log-probs under the distribution drawn from; two `[P, alt_k]` tensors.

    One generator, seeded by the query, draws every position in order, so a seed gives the same
    draws whatever else shares the batch.
    """
    k, temperature = query.alt_k, query.alt_temperature
    generator = torch.Generator(device=hidden_P_D.device).manual_seed(query.alt_seed)
    ids = [torch.zeros((0, k), dtype=torch.long, device=hidden_P_D.device)]
    values = [torch.zeros((0, k), device=hidden_P_D.device)]
    for start in range(0, hidden_P_D.shape[0], LOGIT_CHUNK_ROWS):
        logits_C_V = lm_head(hidden_P_D[start : start + LOGIT_CHUNK_ROWS])
        if temperature > 0:
            logprobs_C_V = torch.log_softmax(logits_C_V / temperature, dim=-1)
            drawn_C_K = torch.multinomial(logprobs_C_V.exp(), k, replacement=True, generator=generator)
        else:  # greedy, as a greedy sample: the argmax, with its untempered log-prob
            logprobs_C_V = torch.log_softmax(logits_C_V, dim=-1)
            drawn_C_K = logits_C_V.argmax(dim=-1, keepdim=True).expand(-1, k)
        ids.append(drawn_C_K)
        values.append(logprobs_C_V.gather(-1, drawn_C_K))
    return PromptAltTokens(
        tokens=types.TensorData.from_numpy(torch.cat(ids).cpu().numpy().astype(np.int64)),
        logprobs=types.TensorData.from_numpy(torch.cat(values).cpu().numpy().astype(np.float32)),
    )

