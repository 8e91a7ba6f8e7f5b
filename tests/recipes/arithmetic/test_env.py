"""The arithmetic RL dataset: held-out splits and reproducible batches."""

import asyncio

import pytest

from recipes.arithmetic.env import ArithmeticDatasetBuilder, split_problems
from recipes_lib.exceptions import ConfigurationError

TINY = "recipes/tiny-llama"


def test_held_out_problems_are_distinct_and_never_trained_on() -> None:
    train, test = split_problems(1, 20, test_size=100, seed=0)
    assert len(set(test)) == 100 and len(train) == 300
    assert not set(train) & set(test)
    assert split_problems(1, 20, 100, seed=0) == (train, test)


def test_arithmetic_batches_are_reproducible_and_drawn_from_training_problems() -> None:
    builder = ArithmeticDatasetBuilder(model_name_for_tokenizer=TINY, batch_size=8, group_size=4, n_batches=5)
    train, test = asyncio.run(builder())
    assert test is not None and len(test) == 1 and len(test.get_batch(0)) == 100
    first = [_question(b) for b in train.get_batch(3)]
    assert first == [_question(b) for b in train.get_batch(3)]
    assert len(train) == 5 and len(first) == 8
    held_out = {_question(b) for b in test.get_batch(0)}
    assert not held_out & {_question(b) for i in range(5) for b in train.get_batch(i)}
    assert asyncio.run(train.get_batch(0)[0].make_envs()).__len__() == 4


def _question(builder) -> str:  # type: ignore[no-untyped-def]
    return builder.env_thunk().get_question()


def test_arithmetic_rejects_a_test_set_larger_than_the_problems() -> None:
    with pytest.raises(ConfigurationError, match="test_size"):
        split_problems(1, 3, test_size=9, seed=0)
