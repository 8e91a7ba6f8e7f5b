"""Conversations to training datums (pure functions: no files, clients or globals).

A `Datum` follows the SDK's alignment: position i of the input predicts token i + 1. From a rendered
example of T tokens with weights w_T:

    model_input    = tokens[0 : T-1]
    target_tokens  = tokens[1 : T]
    weights        = w[1 : T]          # the weight of the token being predicted

Examples longer than `max_length` are cut at the right with a warning; an example with no trained
token left (after cutting, or because nothing was selected) is a `DataFormatError`.
"""

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from tinker import types

from recipes_lib.exceptions import DataFormatError
from renderers import Message, Renderer, TrainOnWhat, parse_messages
from renderers.messages import ROLES

logger = logging.getLogger(__name__)

KNOWN_ROLES = ROLES


def datum_from_tokens_weights(
    tokens_T: Sequence[int], weights_T: np.ndarray | Sequence[float], max_length: int | None = None
) -> types.Datum:
    """Shift a rendered example by one position into a `Datum`, cutting it to `max_length` tokens.

    Args:
        tokens_T: the example's tokens, shape (T,).
        weights_T: one weight per token, shape (T,).
        max_length: keep at most this many tokens (the Datum then has max_length - 1 positions).

    Raises:
        DataFormatError: fewer than 2 tokens, or no weight > 0 among the kept targets.
    """
    tokens = np.asarray(tokens_T, dtype=np.int64)
    weights = np.asarray(weights_T, dtype=np.float32)
    if tokens.shape != weights.shape:
        raise DataFormatError(f"{tokens.shape[0]} tokens but {weights.shape[0]} weights; they must match.")
    if max_length is not None and len(tokens) > max_length:
        logger.warning("example of %d tokens cut to max_length=%d", len(tokens), max_length)
        tokens, weights = tokens[:max_length], weights[:max_length]
    if len(tokens) < 2:
        raise DataFormatError(f"an example needs at least 2 tokens to predict one; got {len(tokens)}.")
    if not (weights[1:] > 0).any():
        raise DataFormatError(_nothing_to_train_message(len(tokens_T), max_length))
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1].tolist()),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(tokens[1:]),
            "weights": types.TensorData.from_numpy(weights[1:]),
        },
    )


def _nothing_to_train_message(num_tokens: int, max_length: int | None) -> str:
    if max_length is not None and num_tokens > max_length:
        return (
            f"the example has {num_tokens} tokens and none of its trained tokens lies within "
            f"max_length={max_length}; raise max_length or shorten the conversation."
        )
    return "the example has no trained token (every weight is 0); check train_on_what and the roles."


def conversation_to_datum(
    conversation: Sequence[Message],
    renderer: Renderer,
    max_length: int | None,
    train_on_what: TrainOnWhat = TrainOnWhat.ALL_ASSISTANT_MESSAGES,
) -> types.Datum:
    """Render a conversation and shift it into a cross-entropy `Datum` (weights 0/1 per target).

    Raises:
        DataFormatError: nothing left to train on (see `datum_from_tokens_weights`).
    """
    model_input, weights_T = renderer.build_supervised_example(conversation, train_on_what)
    return datum_from_tokens_weights(model_input.to_ints(), weights_T, max_length)


def parse_conversation(row: Any, where: str, message_field: str = "messages") -> list[Message]:
    """Check one record `{"messages": [{"role": ..., "content": ...}, ...]}` and return its messages.

    Every message passes `renderers.messages.MessageSchema` and keeps every field it has
    (`tool_calls`, `tool_call_id`, `name`, `thinking`, `trainable`; list-of-parts content is joined).

    Args:
        where: where the record came from, for errors (e.g. "data.jsonl line 3").

    Raises:
        DataFormatError: naming `where`, the message and the field for a missing or empty messages
            list, an unknown role or field, or a field of the wrong type.
    """
    if not isinstance(row, Mapping) or message_field not in row:
        got = f"keys {sorted(row)}" if isinstance(row, Mapping) else f"a JSON {_json_kind(row)}"
        raise DataFormatError(f"{where}: expected an object with a {message_field!r} list; got {got}.")
    messages = row[message_field]
    if not isinstance(messages, list) or not messages:
        raise DataFormatError(f"{where}: {message_field!r} must be a non-empty list of messages.")
    return parse_messages(messages, where)


def compute_mean_nll(logprobs_D: Sequence[np.ndarray], weights_D: Sequence[np.ndarray]) -> float:
    """Weighted mean negative log-likelihood over a batch: -sum(w * logp) / sum(w).

    Args:
        logprobs_D: per datum, the log-probs of its targets, shape (T_d,).
        weights_D: per datum, the weights of its targets, shape (T_d,).
    """
    total = sum(float(np.dot(lp, w)) for lp, w in zip(logprobs_D, weights_D, strict=True))
    weight = sum(float(np.sum(w)) for w in weights_D)
    if weight <= 0:
        raise DataFormatError("the batch has no trained token (all weights are 0).")
    return -total / weight


def datum_weights(datum: types.Datum) -> np.ndarray:
    """The datum's `weights`, shape (T,)."""
    return datum.loss_fn_inputs["weights"].to_numpy().astype(np.float32)


def _json_kind(value: Any) -> str:
    kinds = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


LossReduction = Literal["sum", "example_mean"]


def reduced_batch(batch: Sequence[types.Datum], reduction: LossReduction) -> list[types.Datum]:
    """The datums to train on under `reduction`: as they are for `sum` (every trained token's NLL
    counts once, so a longer example weighs more), or, for `example_mean`, each datum's weights divided
    by their sum, so the loss is the sum over examples of each example's mean token NLL (tinker-cookbook's
    default since its PR #334). Under Adam an overall scale of the gradient does not change the step,
    so a learning rate means the same under both; what differs is how long and short examples weigh."""
    if reduction == "sum":
        return list(batch)
    reduced = []
    for datum in batch:
        weights = datum_weights(datum)
        inputs = dict(datum.loss_fn_inputs)
        inputs["weights"] = types.TensorData.from_numpy((weights / weights.sum()).astype(np.float32))
        reduced.append(types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs))
    return reduced
