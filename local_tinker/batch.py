"""Turning `Datum`s into tensors the engine can run, with errors that name the datum and key.

Validation happens when a request is submitted, so a bad datum fails at the caller's line, not
later inside the worker.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types

from local_tinker.errors import DataFormatError


@dataclass(frozen=True)
class PreparedDatum:
    """One datum as tensors: `tokens_T` (the model input) and its loss inputs, each `(T,)`."""

    tokens_T: torch.Tensor
    inputs: dict[str, torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.tokens_T.shape[0])


def model_input_tokens(model_input: types.ModelInput, where: str) -> list[int]:
    """The token ids of a text-only `ModelInput` (images are not supported locally)."""
    try:
        return list(model_input.to_ints())
    except ValueError as exc:
        raise DataFormatError(f"{where}: the local engine accepts text tokens only: {exc}") from exc


def prepare_datums(
    data: Sequence[types.Datum], required_keys: Sequence[str], vocab_size: int, max_context: int | None = None,
) -> list[PreparedDatum]:
    """Validate `data` for a loss that reads `required_keys` and convert it to tensors.

    Raises:
        DataFormatError: naming the datum index and key for a missing key, a length that differs
            from the model input's, a non-finite value, a token id outside the vocabulary, or more
            tokens than the model's context (`max_context`) holds.
    """
    if len(data) == 0:
        raise DataFormatError("forward/forward_backward got an empty list of datums; pass at least one.")
    return [_prepare(i, datum, required_keys, vocab_size, max_context) for i, datum in enumerate(data)]


def _prepare(index: int, datum: types.Datum, required_keys: Sequence[str], vocab_size: int,
             max_context: int | None) -> PreparedDatum:
    where = f"datum {index}"
    if not isinstance(datum, types.Datum):
        raise DataFormatError(f"{where}: expected tinker.types.Datum, got {type(datum).__name__}.")
    tokens = model_input_tokens(datum.model_input, where)
    if len(tokens) == 0:
        raise DataFormatError(f"{where}: model_input is empty.")
    if max_context is not None and len(tokens) > max_context:
        raise DataFormatError(f"{where}: model_input has {len(tokens)} tokens, more than the model's context of "
                              f"{max_context}; positions past it were never trained, so truncate the datum.")
    missing = [key for key in required_keys if key not in datum.loss_fn_inputs]
    if missing:
        raise DataFormatError(
            f"{where}: loss_fn_inputs is missing {missing}; this loss needs {list(required_keys)} "
            f"(got {sorted(datum.loss_fn_inputs)})."
        )
    inputs = {key: _tensor(where, key, datum.loss_fn_inputs[key], len(tokens)) for key in datum.loss_fn_inputs}
    _check_token_range(where, "model_input", torch.tensor(tokens), vocab_size)
    if "target_tokens" in inputs:
        _check_token_range(where, "target_tokens", inputs["target_tokens"], vocab_size)
    return PreparedDatum(tokens_T=torch.tensor(tokens, dtype=torch.long), inputs=inputs)


def _tensor(where: str, key: str, value: types.TensorData, length: int) -> torch.Tensor:
    array = np.asarray(value.to_numpy())
    if array.ndim != 1 or array.shape[0] != length:
        raise DataFormatError(
            f"{where}: loss_fn_inputs[{key!r}] has shape {list(array.shape)}, expected [{length}] "
            "(one value per model_input token; targets are the inputs shifted by one)."
        )
    if key == "target_tokens":
        return torch.from_numpy(array.astype(np.int64))
    tensor = torch.from_numpy(array.astype(np.float32))
    if not torch.isfinite(tensor).all():
        raise DataFormatError(f"{where}: loss_fn_inputs[{key!r}] contains NaN or infinite values.")
    return tensor


def _check_token_range(where: str, key: str, tokens: torch.Tensor, vocab_size: int) -> None:
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise DataFormatError(
            f"{where}: {key} has token ids outside [0, {vocab_size}) "
            f"(min {int(tokens.min())}, max {int(tokens.max())}); was it built with another tokenizer?"
        )


def pad_right_tokens(sequences: Sequence[Sequence[int] | torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded `tokens_B_T` and `attention_mask_B_T` for a micro-batch of token sequences."""
    width = max(len(s) for s in sequences)
    tokens = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        tokens[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
        mask[row, : len(sequence)] = 1
    return tokens, mask


def pad_left_tokens(sequences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded `tokens_B_T`, `attention_mask_B_T` and `position_ids_B_T` (0 at each first token)."""
    width = max(len(s) for s in sequences)
    tokens = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        tokens[row, width - len(sequence) :] = torch.as_tensor(sequence, dtype=torch.long)
        mask[row, width - len(sequence) :] = 1
    return tokens, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def micro_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group datum indices into micro-batches of at most `max_tokens` padded tokens.

    Indices are sorted by length first so rows of similar length share a batch (little padding).
    A single datum longer than `max_tokens` forms its own batch.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = max([lengths[i] for i in current] + [lengths[index]])
        if current and width * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


# Datums that begin alike (an RL group's samples of one prompt, chats under one system prompt) run
# in one decoder row: the prefix they share once, then each datum's remaining tokens, each attending
# to the prefix and to its own earlier tokens (`shared_row_inputs`). A row's tokens are capped: its
# attention is dense over the row, so a long row would cost more in attention than it saves.
SHARED_ROW_TOKENS = 128
MIN_SHARED_TOKENS = 8  # fewer tokens in common (a chat template's first few) are left unshared


@dataclass(frozen=True)
class SharedRow:
    """Datums (`members`, indices) computed in one row of `length` tokens: `prefix` tokens in common
    (all of a lone datum's), then each member's own tokens after them, in member order."""

    members: tuple[int, ...]
    prefix: int
    length: int

    @classmethod
    def alone(cls, index: int, length: int) -> "SharedRow":
        return cls((index,), length, length)


def shared_rows(sequences: Sequence[Sequence[int]], row_tokens: int = SHARED_ROW_TOKENS) -> list[SharedRow]:
    """The datums grouped into rows by the prefixes they share (each datum in exactly one row).

    Datums are taken in the order of their tokens, so those with a common prefix are neighbours; a
    datum joins the row before it when they share at least `MIN_SHARED_TOKENS` tokens and the row
    stays within `row_tokens` (a longer datum keeps a row of its own). Identical datums share a row.
    """
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    rows: list[SharedRow] = []
    for index in order:
        tokens = sequences[index]
        if rows:
            last = rows[-1]
            common = common_prefix_length(sequences[last.members[0]], tokens, last.prefix)
            length = common + sum(len(sequences[m]) - common for m in (*last.members, index))
            if common >= MIN_SHARED_TOKENS and length <= row_tokens:
                rows[-1] = SharedRow((*last.members, index), common, length)
                continue
        rows.append(SharedRow.alone(index, len(tokens)))
    return rows


def common_prefix_length(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading tokens `a` and `b` have in common, counting at most `limit`."""
    count = 0
    for x, y in zip(a[:limit], b):
        if x != y:
            break
        count += 1
    return count


@dataclass(frozen=True)
class SharedRowInputs:
    """A decoder's inputs for shared rows, and where each datum's positions lie in them.

    `tokens_R_L`, `position_ids_R_L` and an additive fp32 mask `mask_R_1_L_L` (0 where a query may
    attend, fp32's lowest value elsewhere: the attention casts it to its own dtype); `row_N_T` and
    `column_N_T` index the decoder's output `[R, L, D]` to give each of the N datums its `[T, D]`
    hidden states in order (positions past a datum's length point at its row's first token and are
    masked by the caller).
    """

    tokens_R_L: torch.Tensor
    position_ids_R_L: torch.Tensor
    mask_R_1_L_L: torch.Tensor
    row_N_T: torch.Tensor
    column_N_T: torch.Tensor


def shared_row_inputs(rows: Sequence[SharedRow], sequences: Sequence[Sequence[int]], pad_id: int) -> SharedRowInputs:
    """Inputs that compute every datum of `rows` as if alone: each query attends, causally, to its
    row's prefix and to its own datum's tokens only, at the positions it has in its own datum."""
    width = max(row.length for row in rows)
    longest = max(len(sequences[m]) for row in rows for m in row.members)
    count = len(sequences)
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    segment = torch.full((len(rows), width), -1, dtype=torch.long)  # 0: the prefix, k: member k, -1: padding
    row_N_T = torch.zeros((count, longest), dtype=torch.long)
    column_N_T = torch.zeros((count, longest), dtype=torch.long)
    for r, row in enumerate(rows):
        first = torch.as_tensor(list(sequences[row.members[0]][: row.prefix]), dtype=torch.long)
        tokens[r, : row.prefix], positions[r, : row.prefix], segment[r, : row.prefix] = first, torch.arange(row.prefix), 0
        start = row.prefix
        for k, member in enumerate(row.members, start=1):
            own = torch.as_tensor(list(sequences[member][row.prefix :]), dtype=torch.long)
            stop = start + len(own)
            tokens[r, start:stop], segment[r, start:stop] = own, k
            positions[r, start:stop] = torch.arange(row.prefix, row.prefix + len(own))
            row_N_T[member] = r
            column_N_T[member, : row.prefix] = torch.arange(row.prefix)
            column_N_T[member, row.prefix : row.prefix + len(own)] = torch.arange(start, stop)
            start = stop
    query, key = segment[:, :, None], segment[:, None, :]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    allowed = causal & (key >= 0) & ((key == 0) | (key == query))
    mask = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    return SharedRowInputs(tokens, positions, mask[:, None], row_N_T, column_N_T)
