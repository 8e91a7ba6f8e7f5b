"""The number-to-words task: the spelling rules, the disjoint balanced split, the builder's datums."""

import collections

import pytest

from recipes.number_words.dataset import NumberWordsBuilder
from recipes.number_words.evaluator import NumberWordsExactMatchBuilder
from recipes.number_words.task import conversation, number_to_words, split_numbers
from supervised.types import ChatDatasetBuilderCommonConfig


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (1, "one"), (9, "nine"), (10, "ten"), (13, "thirteen"), (19, "nineteen"), (20, "twenty"),
        (21, "twenty-one"), (40, "forty"), (99, "ninety-nine"), (100, "one hundred"),
        (101, "one hundred one"), (110, "one hundred ten"), (342, "three hundred forty-two"),
        (1000, "one thousand"), (1001, "one thousand one"), (1110, "one thousand one hundred ten"),
        (4072, "four thousand seventy-two"), (7019, "seven thousand nineteen"),
        (9999, "nine thousand nine hundred ninety-nine"),
    ],
)
def test_american_words_without_and(n: int, words: str) -> None:
    assert number_to_words(n) == words


@pytest.mark.parametrize("n", [0, 10000, -5])
def test_out_of_range(n: int) -> None:
    with pytest.raises(ValueError):
        number_to_words(n)


def test_prompt_and_answer() -> None:
    assert conversation(4072) == [
        {"role": "user", "content": "Write 4072 in words."},
        {"role": "assistant", "content": "four thousand seventy-two"},
    ]


def test_split_is_disjoint_and_balanced() -> None:
    split = split_numbers(num_train=4000, num_heldout=48, seed=0)
    assert not set(split.train_N) & set(split.heldout_H)
    assert len(set(split.heldout_H)) == 48
    heldout_digits = collections.Counter(len(str(n)) for n in split.heldout_H)
    assert heldout_digits == {2: 16, 3: 16, 4: 16}
    magnitudes = collections.Counter(1 if n < 20 else len(str(n)) for n in split.train_N)  # 1: 1-19
    # Drawn 10/20/35/35 %, a draw on one of the 16 + 16 + 16 held-out numbers drawn again: 0.1,
    # 0.2 x 64/80, 0.35 x 884/900 and 0.35 x 8984/9000 of 4000, normalised: 420, 671, 1443, 1466.
    low = collections.Counter({1: 360, 2: 600, 3: 1340, 4: 1370})
    assert low <= magnitudes <= low + collections.Counter({1: 120, 2: 140, 3: 200, 4: 200})
    assert set(range(1, 20)) <= set(split.train_N)  # the words of their own: all trained
    assert min(split.heldout_H) >= 20


def test_heldout_numbers_depend_only_on_count_and_seed() -> None:
    assert split_numbers(10, 30, seed=3).heldout_H == split_numbers(500, 30, seed=3).heldout_H
    assert split_numbers(10, 30, seed=3).heldout_H != split_numbers(10, 30, seed=4).heldout_H


def test_builder_trains_on_the_answer_and_tests_on_the_heldout_numbers() -> None:
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer="recipes/tiny-llama", batch_size=4)
    builder = NumberWordsBuilder(common_config=common, num_train=8, num_heldout=6)
    train, test = builder()
    assert len(train) == 2 and test is not None and len(test.all_datums()) == 6
    datum = test.all_datums()[0]
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    weights = datum.loss_fn_inputs["weights"].to_numpy()
    expected = number_to_words(split_numbers(0, 6).heldout_H[0])
    assert builder.renderer.decode(targets[weights > 0].tolist()) == expected + "<|im_end|>"


def test_evaluator_reads_the_same_heldout_numbers() -> None:
    evaluator = NumberWordsExactMatchBuilder(model_name="recipes/tiny-llama", num_heldout=6, seed=0)()
    numbers = split_numbers(0, 6, seed=0).heldout_H
    assert [ex.reference for ex in evaluator.examples] == [number_to_words(n) for n in numbers]
    assert evaluator.examples[0].messages[-1] == {"role": "user", "content": f"Write {numbers[0]} in words."}
