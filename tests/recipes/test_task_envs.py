"""The shipped tasks' datasets: arithmetic splits, GSM8K loading (offline fixture) and grading."""

import asyncio
from pathlib import Path

import pytest

from recipes.arithmetic.env import ArithmeticDatasetBuilder, split_problems
from recipes.guess_number.env import GuessNumberDatasetBuilder
from recipes.math.gsm8k import Gsm8kDatasetBuilder, final_answer, reference_answer
from recipes_lib.exceptions import ConfigurationError, DataFormatError

FIXTURES = Path(__file__).parent / "math" / "fixtures"
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


@pytest.mark.parametrize(
    ("reply", "value"),
    [("so 5 + 8 = 13. \\boxed{13}", 13.0), ("\\boxed{1,250} cars", 1250.0), ("It is 12 then 14", 14.0),
     ("\\boxed{x}", None), ("nothing", None)],
)
def test_gsm8k_final_answer(reply: str, value: float | None) -> None:
    assert final_answer(reply) == value


def test_gsm8k_reference_answer() -> None:
    assert reference_answer("1,250 - 1,000 = 250.\n#### 1,250") == "1250"
    with pytest.raises(DataFormatError, match="####"):
        reference_answer("no marker")


def test_gsm8k_loads_files_in_its_format() -> None:
    builder = Gsm8kDatasetBuilder(model_name_for_tokenizer=TINY, batch_size=2, group_size=3,
                                  train_file=str(FIXTURES / "gsm8k_train.jsonl"),
                                  test_file=str(FIXTURES / "gsm8k_test.jsonl"))
    train, test = asyncio.run(builder())
    assert len(train) == 2 and test is not None and len(test.get_batch(0)) == 2
    env = test.get_batch(0)[0].env_thunk()  # type: ignore[attr-defined]
    assert env.get_question().startswith("Lena has 7 apples") and env.get_reference_answer() == "13"
    assert env.check_answer("7 + 6 = 13, so \\boxed{13}") and env.check_format("\\boxed{13}")
    assert not env.check_answer("\\boxed{12}")
    assert {b.env_thunk().get_reference_answer() for i in range(2) for b in train.get_batch(i)} == {  # type: ignore[attr-defined]
        "31", "72", "210", "250"}


def test_gsm8k_rows_without_the_fields_are_named() -> None:
    builder = Gsm8kDatasetBuilder(model_name_for_tokenizer=TINY, train_file=str(FIXTURES / "gsm8k_bad.jsonl"),
                                  test_file=str(FIXTURES / "gsm8k_test.jsonl"))
    with pytest.raises(DataFormatError, match="gsm8k_bad.jsonl train row 0"):
        asyncio.run(builder())


def test_guess_number_test_set_plays_every_secret_once() -> None:
    builder = GuessNumberDatasetBuilder(model_name_for_tokenizer=TINY, batch_size=2, n_batches=3, high=8)
    train, test = asyncio.run(builder())
    assert len(train) == 3 and test is not None and len(test.get_batch(0)) == 8
    assert test.get_batch(0)[0].logging_tags() == ["guess_number"]
