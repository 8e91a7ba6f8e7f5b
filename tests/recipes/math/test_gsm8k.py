"""The GSM8K RL dataset: answers, grading, and loading (offline fixture)."""

import asyncio
from pathlib import Path

import pytest

from recipes.math.gsm8k import Gsm8kDatasetBuilder, final_answer, reference_answer
from recipes_lib.exceptions import DataFormatError

FIXTURES = Path(__file__).parent / "fixtures"
TINY = "recipes/tiny-llama"


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
