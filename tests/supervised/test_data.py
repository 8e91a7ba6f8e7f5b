"""conversation_to_datum: the one-position shift, weights on assistant tokens only, max_length."""

import logging

import numpy as np
import pytest

from recipes_lib.exceptions import DataFormatError
from recipes_lib.tokenizers import get_tokenizer
from renderers import TrainOnWhat, get_renderer
from supervised.datums import (
    compute_mean_nll,
    conversation_to_datum,
    datum_from_tokens_weights,
    parse_conversation,
)

CONVERSATION = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


def _renderer():  # type: ignore[no-untyped-def]
    return get_renderer("chatml", get_tokenizer("recipes/tiny-llama"))


def test_shift_by_one_position() -> None:
    datum = datum_from_tokens_weights([10, 11, 12, 13], np.array([0, 0, 1, 1], np.float32))
    assert datum.model_input.to_ints() == [10, 11, 12]
    assert datum.loss_fn_inputs["target_tokens"].to_numpy().tolist() == [11, 12, 13]
    assert datum.loss_fn_inputs["weights"].to_numpy().tolist() == [0.0, 1.0, 1.0]


def test_conversation_trains_only_the_assistant_reply_and_its_end_token() -> None:
    renderer = _renderer()
    datum = conversation_to_datum(CONVERSATION, renderer, max_length=None)
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    weights = datum.loss_fn_inputs["weights"].to_numpy()
    trained_text = renderer.decode(targets[weights > 0].tolist())
    assert trained_text == "Hello<|im_end|>"
    # the full text is the model input plus the last target
    full = renderer.decode(datum.model_input.to_ints() + targets[-1:].tolist())
    assert full == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"


def test_all_tokens_trains_every_target() -> None:
    datum = conversation_to_datum(CONVERSATION, _renderer(), None, TrainOnWhat.ALL_TOKENS)
    assert datum.loss_fn_inputs["weights"].to_numpy().min() == 1.0


def test_long_example_is_cut_to_max_length_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        datum = datum_from_tokens_weights([1, 2, 3, 4, 5, 6], np.array([0, 1, 1, 1, 1, 1], np.float32), max_length=4)
    assert datum.model_input.to_ints() == [1, 2, 3]
    assert datum.loss_fn_inputs["target_tokens"].to_numpy().tolist() == [2, 3, 4]
    assert "cut to max_length=4" in caplog.text


def test_nothing_left_to_train_after_cutting_is_an_error() -> None:
    with pytest.raises(DataFormatError, match="none of its trained tokens lies within max_length=3"):
        datum_from_tokens_weights([1, 2, 3, 4, 5], np.array([0, 0, 0, 0, 1], np.float32), max_length=3)


def test_no_trained_token_is_an_error() -> None:
    with pytest.raises(DataFormatError, match="no trained token"):
        datum_from_tokens_weights([1, 2, 3], np.zeros(3, np.float32))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"msgs": []}, "expected an object with a 'messages' list"),
        ([1, 2], "expected an object with a 'messages' list"),
        ({"messages": []}, "non-empty list"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "message 0: unknown role 'robot'"),
        ({"messages": [{"role": "user", "content": 3}]}, "'content' must be a string"),
        ({"messages": ["hello"]}, "expected an object with 'role' and 'content'"),
    ],
)
def test_parse_conversation_names_the_record(row: object, message: str) -> None:
    with pytest.raises(DataFormatError, match="data.jsonl line 7") as info:
        parse_conversation(row, "data.jsonl line 7")
    assert message in str(info.value)


def test_mean_nll_is_weighted_by_hand() -> None:
    # -(1*-1 + 1*-3 + 0*-100) / 2 = 2 ; second datum -(2*-0.5)/2 = 0.5 ; together (4 + 1) / 4
    logprobs = [np.array([-1.0, -3.0, -100.0]), np.array([-0.5])]
    weights = [np.array([1.0, 1.0, 0.0]), np.array([2.0])]
    assert compute_mean_nll(logprobs, weights) == pytest.approx(5.0 / 4.0)


def test_example_mean_makes_the_loss_each_examples_mean_token_nll(service_client) -> None:  # type: ignore[no-untyped-def]
    """With loss_reduction=example_mean the engine's summed loss is, over examples, the weighted mean of
    each example's token NLLs (computed here from the plain forward's log-probs); `sum` leaves the
    datums as they are."""
    from supervised.datums import reduced_batch

    batch = [datum_from_tokens_weights([1, 5, 9, 14, 3], [0, 1, 1, 0.5, 1]),
             datum_from_tokens_weights([1, 7, 7], [0, 1, 1])]
    assert reduced_batch(batch, "sum") == batch
    reduced = reduced_batch(batch, "example_mean")
    np.testing.assert_allclose([float(np.asarray(d.loss_fn_inputs["weights"].to_numpy()).sum()) for d in reduced], 1.0)
    trainer = service_client.create_lora_training_client("recipes/tiny-llama", rank=4, seed=0)
    plain = trainer.forward(batch, "cross_entropy").result()
    expected = 0.0
    for datum, out in zip(batch, plain.loss_fn_outputs, strict=True):
        weights = np.asarray(datum.loss_fn_inputs["weights"].to_numpy(), dtype=np.float64)
        expected += -(weights * out["logprobs"].to_numpy()).sum() / weights.sum()
    assert trainer.forward(reduced, "cross_entropy").result().metrics["loss:sum"] == pytest.approx(expected, rel=1e-5)
