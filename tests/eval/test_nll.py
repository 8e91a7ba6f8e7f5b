"""NLLEvaluator: test/nll = -sum(w * logp) / sum(w) over the whole test set, from `forward`."""

import asyncio

import numpy as np
import pytest
from tinker import types

from eval.nll import NLLEvaluator
from recipes_lib.exceptions import DataFormatError
from supervised.datums import datum_from_tokens_weights


class _Done:
    """An already-resolved future (await or .result())."""

    def __init__(self, value: object):
        self.value = value

    def result(self, timeout: float | None = None) -> object:
        return self.value

    def __await__(self):  # type: ignore[no-untyped-def]
        yield from asyncio.sleep(0).__await__()
        return self.value


class _FixedLogprobsClient:
    """`forward` returns log p = -(target token id) / 10 for every target, and records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def forward(self, data: list[types.Datum], loss_fn: str) -> _Done:
        self.calls.append((len(data), loss_fn))
        outputs = [{"logprobs": types.TensorData.from_numpy(
            -d.loss_fn_inputs["target_tokens"].to_numpy().astype(np.float32) / 10)} for d in data]
        return _Done(types.ForwardBackwardOutput(loss_fn_output_type="logprobs", loss_fn_outputs=outputs, metrics={}))


def test_nll_by_hand() -> None:
    # datum 1: targets [2, 3] weights [0, 1] -> 0.3 ; datum 2: targets [5, 1] weights [1, 1] -> 0.5 + 0.1
    data = [datum_from_tokens_weights([1, 2, 3], [0, 0, 1]), datum_from_tokens_weights([4, 5, 1], [0, 1, 1])]
    client = _FixedLogprobsClient()
    metrics = asyncio.run(NLLEvaluator(data, name="test")(client))  # type: ignore[arg-type]
    assert metrics == {"test/nll": pytest.approx((0.3 + 0.5 + 0.1) / 3)}
    assert client.calls == [(2, "cross_entropy")]


def test_large_sets_go_in_several_requests() -> None:
    data = [datum_from_tokens_weights([1, 2], [0, 1])] * 300
    client = _FixedLogprobsClient()
    metrics = asyncio.run(NLLEvaluator(data, name="val")(client))  # type: ignore[arg-type]
    assert metrics == {"val/nll": pytest.approx(0.2)} and [n for n, _ in client.calls] == [256, 44]


def test_matches_the_local_engine(service_client: object) -> None:
    """Against the engine itself: the evaluator's number is the forward pass's mean NLL."""
    training_client = service_client.create_lora_training_client(base_model="recipes/tiny-llama", rank=4, seed=0)  # type: ignore[attr-defined]
    data = [datum_from_tokens_weights([5, 6, 7, 8], [0, 1, 1, 0]), datum_from_tokens_weights([9, 10, 11], [0, 0, 1])]
    output = training_client.forward(data, "cross_entropy").result()
    logprobs = [out["logprobs"].to_numpy() for out in output.loss_fn_outputs]
    expected = -(logprobs[0][0] + logprobs[0][1] + logprobs[1][1]) / 3
    assert asyncio.run(NLLEvaluator(data)(training_client))["test/nll"] == pytest.approx(expected, rel=1e-5)


def test_empty_test_set_is_an_error() -> None:
    with pytest.raises(DataFormatError, match="no datums"):
        NLLEvaluator([])
