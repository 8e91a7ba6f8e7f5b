"""A LoRA moved away from zero in a few steps: cross-entropy on one token run, for tests that need a
trained checkpoint (chat, export, a distillation teacher)."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import tinker


def next_token_datum(tokens: Sequence[int]) -> tinker.types.Datum:
    """Predict each token of `tokens` from those before it, every position weighted 1."""
    return tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(list(tokens[:-1])),
        loss_fn_inputs={"target_tokens": tinker.types.TensorData.from_numpy(np.asarray(tokens[1:], dtype=np.int64)),
                        "weights": tinker.types.TensorData.from_numpy(np.ones(len(tokens) - 1, dtype=np.float32))})


def train_on_tokens(client: Any, tokens: Sequence[int], steps: int, learning_rate: float) -> None:
    """`steps` cross-entropy steps of `client` on `tokens`."""
    datum = next_token_datum(tokens)
    for _ in range(steps):
        client.forward_backward([datum], "cross_entropy").result()
        client.optim_step(tinker.types.AdamParams(learning_rate=learning_rate)).result()
