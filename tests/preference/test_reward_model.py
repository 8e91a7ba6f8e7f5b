"""The preference (reward) model: its prompt, its training data, and its score on a tiny model."""

import asyncio
import math

import numpy as np
import pytest
import torch

from local_tinker.models import load_base_model
from preference.reward_model import (
    PreferenceChatDatasetBuilder,
    PreferenceModelFromChatRenderer,
    comparison_to_messages,
    labeled_to_conversation,
    preference_score,
    training_comparisons,
)
from preference.types import Comparison, LabeledComparison
from recipes.arithmetic.comparisons import ArithmeticComparisonBuilder
from recipes_lib.exceptions import DataFormatError
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer
from supervised.types import ChatDatasetBuilderCommonConfig

MODEL = "recipes/tiny-llama"
COMPARISON = Comparison([{"role": "user", "content": "What is 2 + 2?"}], [{"role": "assistant", "content": "4"}],
                        [{"role": "assistant", "content": "5"}])  # type: ignore[list-item]


def test_question_shows_prompt_and_both_responses() -> None:
    [message] = comparison_to_messages(COMPARISON)
    assert message["role"] == "user"
    text = message["content"]
    assert text.index("User: What is 2 + 2?") < text.index("[Response A]\nAssistant: 4") \
        < text.index("[Response B]\nAssistant: 5") < text.index("Answer with one letter.")
    assert labeled_to_conversation(LabeledComparison(COMPARISON, "B"))[-1] == {"role": "assistant", "content": "B"}
    with pytest.raises(DataFormatError, match="tied"):
        labeled_to_conversation(LabeledComparison(COMPARISON, "Tie"))


def test_the_question_keeps_tool_calls_reasoning_and_tool_names() -> None:
    from renderers import ToolCall

    with_tools = Comparison(
        [{"role": "user", "content": "Weather in Paris?"}],
        [{"role": "assistant", "content": "", "thinking": "Ask the tool.",
          "tool_calls": [ToolCall.of("weather", '{"city": "Paris"}')]},
         {"role": "tool", "name": "weather", "content": "18 C"}, {"role": "assistant", "content": "18 C."}],
        [{"role": "assistant", "content": "Sunny."}])  # type: ignore[list-item]
    text = comparison_to_messages(with_tools)[0]["content"]
    assert ('[Response A]\nAssistant: (thinking: Ask the tool.)\n-> weather({"city": "Paris"})\n\n'
            "Tool (weather): 18 C\n\nAssistant: 18 C.\n\n[Response B]\nAssistant: Sunny.") in text


def test_training_comparisons_drop_ties_and_add_swaps() -> None:
    a, tie = LabeledComparison(COMPARISON, "A"), LabeledComparison(COMPARISON, "Tie")
    assert training_comparisons([a, tie], swap=False) == [a]
    assert training_comparisons([a, tie], swap=True) == [a, a.swap()]


def test_preference_score_is_normalised_probability_difference() -> None:
    p_a, p_b = 0.2, 0.6
    assert preference_score(math.log(p_a), math.log(p_b)) == pytest.approx((p_b - p_a) / (p_a + p_b))
    assert preference_score(-1.0, -1.0) == 0.0


def test_dataset_builder_trains_on_the_answer_letter_only() -> None:
    builder = PreferenceChatDatasetBuilder(
        common_config=ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=MODEL, batch_size=2),
        comparison_builder=ArithmeticComparisonBuilder(num_train=3, num_test=2, max_operand=9))
    train, test = builder()
    assert len(train.datums) == 6 and test is not None and len(test.datums) == 2  # swapped copies in train only
    renderer = builder.renderer
    answers = []
    for datum in train.datums:
        targets, weights = datum.loss_fn_inputs["target_tokens"].to_numpy(), datum.loss_fn_inputs["weights"].to_numpy()
        answers.append(renderer.decode(targets[weights > 0].tolist()))
    assert sorted(answers) == ["A<|im_end|>"] * 3 + ["B<|im_end|>"] * 3


def test_preference_model_reads_answer_probabilities(service_client) -> None:  # type: ignore[no-untyped-def]
    renderer = get_renderer("smollm2", get_tokenizer(MODEL))
    model = PreferenceModelFromChatRenderer(service_client.create_sampling_client(base_model=MODEL), renderer)
    score = asyncio.run(model(COMPARISON))
    # Independently: the base model's next-token distribution after the question, in float64.
    prompt = renderer.build_generation_prompt(comparison_to_messages(COMPARISON)).to_ints()
    with torch.no_grad():
        logits = load_base_model(MODEL)(input_ids=torch.tensor([prompt])).logits[0, -1].double()
    logprobs = torch.log_softmax(logits, -1).numpy()
    token_a, token_b = (renderer.encode(letter)[0] for letter in "AB")
    p_a, p_b = np.exp(logprobs[token_a]), np.exp(logprobs[token_b])
    assert score == pytest.approx((p_b - p_a) / (p_a + p_b), abs=1e-4)
