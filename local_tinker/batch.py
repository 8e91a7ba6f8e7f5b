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
