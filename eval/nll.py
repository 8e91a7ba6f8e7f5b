"""`NLLEvaluator`: the weighted mean negative log-likelihood of a held-out set (`test/nll`).

It sends the held-out datums through `forward` (no gradient, weights unchanged) on the training
client, in the client's request order, so it sees exactly the weights of the step it runs before.
"""

from collections.abc import Sequence

import numpy as np
from tinker import types

from recipes_lib.backends.protocols import TrainingClient
from recipes_lib.evaluators import TrainingClientEvaluator
from recipes_lib.exceptions import DataFormatError

MAX_DATUMS_PER_REQUEST = 256


class NLLEvaluator(TrainingClientEvaluator):
    """Reports `<name>/nll` = -sum(weights * logprobs) / sum(weights) over `data`."""

    def __init__(self, data: Sequence[types.Datum], name: str = "test"):
        if not data:
            raise DataFormatError(f"NLLEvaluator {name!r} got no datums; give it a non-empty test split.")
        self.data = list(data)
        self.name = name

    async def __call__(self, training_client: TrainingClient) -> dict[str, float]:
        chunks = [self.data[i : i + MAX_DATUMS_PER_REQUEST] for i in range(0, len(self.data), MAX_DATUMS_PER_REQUEST)]
        futures = [training_client.forward(chunk, "cross_entropy") for chunk in chunks]
        weighted_nll, weight = 0.0, 0.0
        for chunk, future in zip(chunks, futures):
            output = await future
            for datum, out in zip(chunk, output.loss_fn_outputs):
                weights_T = datum.loss_fn_inputs["weights"].to_numpy()
                weighted_nll -= float(np.dot(out["logprobs"].to_numpy(), weights_T))
                weight += float(weights_T.sum())
        if weight <= 0:
            raise DataFormatError(f"NLLEvaluator {self.name!r}: no datum has a weight > 0.")
        return {f"{self.name}/nll": weighted_nll / weight}
