"""Comparisons -> DPO datum pairs: weights, pairing, odd batches, truncation, shuffling."""

import re

import numpy as np
import pytest
from tinker import types

from preference.data import (
    ChosenCompletionsBuilder,
    DPODatasetBuilder,
    PreferencePairDataset,
    comparison_to_pair,
    datums_to_pairs,
    pairs_to_datums,
)
from preference.types import Comparison, LabeledComparison
from recipes.arithmetic.comparisons import ArithmeticComparisonBuilder
from recipes_lib.exceptions import DataFormatError
from recipes_lib.tokenizers import get_tokenizer
from renderers import Renderer, get_renderer
from supervised.types import ChatDatasetBuilderCommonConfig

MODEL = "recipes/tiny-llama"


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return get_renderer("smollm2", get_tokenizer(MODEL))


def trained_text(datum: types.Datum, renderer: Renderer) -> str:
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    weights = datum.loss_fn_inputs["weights"].to_numpy()
    return renderer.decode(targets[weights > 0].tolist())


def labeled(question: str, a: str, b: str, label: str) -> LabeledComparison:
    return LabeledComparison(Comparison(
        [{"role": "user", "content": question}], [{"role": "assistant", "content": a}],
        [{"role": "assistant", "content": b}]), label)  # type: ignore[arg-type]


def test_pair_trains_on_completions_only(renderer: Renderer) -> None:
    pair = comparison_to_pair(labeled("What is 2+2?", "5", "four", "B"), renderer, None)
    assert pair is not None
    assert trained_text(pair.chosen, renderer) == "four<|im_end|>"
    assert trained_text(pair.rejected, renderer) == "5<|im_end|>"
    prompt = renderer.build_generation_prompt([{"role": "user", "content": "What is 2+2?"}]).to_ints()
    chosen_inputs = pair.chosen.model_input.to_ints()
    assert chosen_inputs[: len(prompt)] == prompt  # the prompt is all there, with weight 0
    assert not pair.chosen.loss_fn_inputs["weights"].to_numpy()[: len(prompt) - 1].any()


def test_tie_and_truncated_comparisons_give_no_pair(renderer: Renderer) -> None:
    assert comparison_to_pair(labeled("q", "a", "b", "Tie"), renderer, None) is None
    prompt_len = len(renderer.build_generation_prompt([{"role": "user", "content": "q"}]).to_ints())
    assert comparison_to_pair(labeled("q", "a", "b", "A"), renderer, prompt_len) is None
    assert comparison_to_pair(labeled("q", "a", "b", "A"), renderer, prompt_len + 1) is not None


def test_odd_datum_list_is_refused(renderer: Renderer) -> None:
    pair = comparison_to_pair(labeled("q", "a", "b", "A"), renderer, None)
    assert pair is not None
    datums = pairs_to_datums([pair, pair])
    assert datums_to_pairs(datums) == [pair, pair]
    with pytest.raises(DataFormatError, match="got 3 datums"):
        datums_to_pairs(datums[:3])


def test_odd_batches_keep_each_chosen_with_its_rejected(renderer: Renderer) -> None:
    train, _ = ArithmeticComparisonBuilder(num_train=7, num_test=0, max_operand=9)()
    dataset = PreferencePairDataset(train, renderer, batch_size=3, max_length=None)
    dataset.set_epoch(seed=1)
    assert len(dataset) == 3
    batches = [dataset.get_batch(i) for i in range(3)]
    assert [len(b) for b in batches] == [3, 3, 1]
    for batch in batches:
        datums = pairs_to_datums(batch)
        for chosen, rejected in zip(datums[0::2], datums[1::2]):
            question_c, answer_c = trained_text(chosen, renderer).removesuffix("<|im_end|>").split(" = ")
            question_r, answer_r = trained_text(rejected, renderer).removesuffix("<|im_end|>").split(" = ")
            a, b = map(int, question_c.split(" + "))
            assert question_c == question_r  # the same problem ...
            assert int(answer_c) == a + b != int(answer_r)  # ... right answer chosen, wrong rejected


def test_set_epoch_reshuffles_reproducibly(renderer: Renderer) -> None:
    train, _ = ArithmeticComparisonBuilder(num_train=12, num_test=0, max_operand=9)()
    dataset = PreferencePairDataset(train, renderer, batch_size=12, max_length=None)

    def order(seed: int) -> list[str]:
        dataset.set_epoch(seed)
        return [trained_text(p.chosen, renderer) for p in dataset.get_batch(0)]

    assert order(3) == order(3)
    assert order(3) != order(4)
    assert sorted(order(3)) == sorted(order(4))


def test_dataset_builder_renders_test_split() -> None:
    builder = DPODatasetBuilder(comparison_builder=ArithmeticComparisonBuilder(num_train=5, num_test=3),
                                model_name_for_tokenizer=MODEL, batch_size=2)
    train, test = builder()
    assert len(train) == 3 and test is not None and len(test.all_pairs()) == 3
    weights = np.concatenate([d.loss_fn_inputs["weights"].to_numpy() for d in pairs_to_datums(test.all_pairs())])
    assert set(np.unique(weights)) == {0.0, 1.0}


def test_arithmetic_problems_are_disjoint_and_labels_balanced() -> None:
    train, test = ArithmeticComparisonBuilder(num_train=300, num_test=100, max_operand=30)()
    assert test is not None

    def problem(c: LabeledComparison) -> frozenset[str]:
        return frozenset(c.comparison.prompt_conversation[0]["content"].removeprefix("What is ")
                         .removesuffix("?").split(" + "))

    assert not {problem(c) for c in train} & {problem(c) for c in test}
    share_a = sum(c.label == "A" for c in train) / len(train)
    assert 0.4 < share_a < 0.6


def test_concise_preference_prefers_the_bare_answer() -> None:
    train, _ = ArithmeticComparisonBuilder(preference="concise", num_train=20, num_test=0, max_operand=9)()
    for comparison in train:
        chosen, rejected = comparison.chosen[0]["content"], comparison.rejected[0]["content"]
        assert chosen in rejected and len(rejected) > len(chosen)  # the same answer, padded
        a, b = map(int, chosen.split(" = ")[0].split(" + "))
        assert chosen == f"{a} + {b} = {a + b}"


def test_chosen_completions_builder(renderer: Renderer) -> None:
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=MODEL, batch_size=2)
    comparisons = ArithmeticComparisonBuilder(preference="concise", num_train=4, num_test=2, max_operand=9)
    chosen_only, test = ChosenCompletionsBuilder(common_config=common, comparison_builder=comparisons)()
    both, _ = ChosenCompletionsBuilder(common_config=common, comparison_builder=comparisons, include_rejected=True)()
    assert len(chosen_only.datums) == 4 and len(both.datums) == 8 and test is not None and len(test.datums) == 2
    def is_bare(datum: types.Datum) -> bool:
        return re.fullmatch(r"\d+ \+ \d+ = \d+<\|im_end\|>", trained_text(datum, renderer)) is not None

    assert all(is_bare(d) for d in chosen_only.datums)
    assert sum(is_bare(d) for d in both.datums) == 4  # and four padded ones
