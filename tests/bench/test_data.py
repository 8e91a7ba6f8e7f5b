"""The bench trains ours and the peers on the same token ids; its number-words chats are the recipe's."""

import numpy as np
import pytest

from local_tinker.bench.data import (
    TokenBatch,
    bench_numbers,
    end_of_turn_token,
    number_words_batch,
    random_batch,
)
from local_tinker.bench.data import number_to_words as bench_number_to_words
from recipes.number_words.task import SYSTEM_PROMPT, conversation, number_to_words
from renderers import get_renderer
from supervised.datums import conversation_to_datum


def test_number_to_words_is_the_tasks() -> None:
    assert all(bench_number_to_words(n) == number_to_words(n) for n in range(1, 10000))


def test_number_words_chats_are_the_supervised_datums(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Token for token and weight for weight what `recipes.number_words.dataset` trains on (loss on the answer)."""
    renderer = get_renderer("smollm2", tiny_tokenizer)
    numbers = bench_numbers()
    for n, datum in zip(numbers, number_words_batch(tiny_tokenizer, numbers).datums(), strict=True):
        expected = conversation_to_datum(conversation(n, SYSTEM_PROMPT), renderer, None)
        assert datum.model_input.to_ints() == expected.model_input.to_ints()
        for key in ("target_tokens", "weights"):
            np.testing.assert_array_equal(datum.loss_fn_inputs[key].to_numpy(), expected.loss_fn_inputs[key].to_numpy())
    assert [end_of_turn_token(tiny_tokenizer)] == renderer.get_stop_sequences()


def test_bench_numbers_take_each_magnitude_in_turn() -> None:
    assert [len(str(n)) for n in bench_numbers(8)] == [1, 2, 3, 4, 1, 2, 3, 4]


def test_labels_give_the_datums_loss() -> None:
    """HF labels are unshifted: position 0 is never a target, -100 where the weight is 0."""
    batch = TokenBatch(tokens_S=[[5, 6, 7, 8]], weights_S=[[0.0, 1.0, 1.0]])
    assert batch.labels() == [[-100, -100, 7, 8]]
    assert batch.predicted_tokens == 3
    datum = batch.datums()[0]
    assert datum.model_input.to_ints() == [5, 6, 7]
    assert datum.loss_fn_inputs["target_tokens"].to_numpy().tolist() == [6, 7, 8]


@pytest.mark.parametrize(("loss_fraction", "weighted"), [(1.0, 128), (0.25, 32)])
def test_random_batch_is_8_by_128(loss_fraction: float, weighted: int) -> None:
    batch = random_batch(loss_fraction=loss_fraction)
    assert batch.predicted_tokens == 8 * 128
    assert all(sum(w) == weighted and w[-1] == 1.0 for w in batch.weights_S)
    assert random_batch().tokens_S == batch.tokens_S  # seeded: every trainer sees these ids
