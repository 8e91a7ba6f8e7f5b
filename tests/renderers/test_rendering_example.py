"""The Tinker docs' "Rendering" page, reproduced: prompt text, token ids, sampled-message parsing, stops.

Expected values are copied from the page's printed output.
"""

from typing import Any

import numpy as np
import pytest

from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, TrainOnWhat, get_renderer

MESSAGES: list[Message] = [
    {"role": "system", "content": "Answer concisely; at most one sentence per response"},
    {"role": "user", "content": "What is the longest-lived rodent species?"},
    {"role": "assistant", "content": "The naked mole rat, which can live over 30 years."},
    {"role": "user", "content": "How do they live so long?"},
    {
        "role": "assistant",
        "content": "They evolved multiple protective mechanisms including special hyaluronic acid that prevents "
        "cancer, extremely stable proteins, and efficient DNA repair systems that work together to prevent aging.",
    },
]

PRINTED_PROMPT_TEXT = (
    "<|im_start|>system\nAnswer concisely; at most one sentence per response<|im_end|>\n"
    "<|im_start|>user\nWhat is the longest-lived rodent species?<|im_end|>\n"
    "<|im_start|>assistant\nThe naked mole rat, which can live over 30 years.<|im_end|>\n"
    "<|im_start|>user\nHow do they live so long?<|im_end|>\n"
    "<|im_start|>assistant\n"
)

PRINTED_PROMPT_IDS = [
    151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 8948, 198, 16141, 3529,
    285, 974, 26, 518, 1429, 825, 11652, 817, 2033, 151645, 198, 151644, 872, 198, 3838, 374, 279,
    22032, 61854, 20589, 306, 9419, 30, 151645, 198, 151644, 77091, 198, 785, 19020, 34651, 11244, 11,
    892, 646, 3887, 916, 220, 18, 15, 1635, 13, 151645, 198, 151644, 872, 198, 10234, 30, 151645, 198,
    151644, 77091, 198,
]  # fmt: skip

PRINTED_SAMPLED_TOKENS = [
    45, 7741, 34651, 31410, 614, 4911, 76665, 11, 2670, 264, 7548, 11050, 22077, 1849, 323, 264, 1602,
    3347, 40761, 4379, 11, 892, 16792, 311, 862, 57119, 13, 151645,
]  # fmt: skip

PRINTED_SAMPLED_MESSAGE = {
    "role": "assistant",
    "content": "Naked mole rats have unique adaptations, including a highly efficient immune system and a very "
    "low metabolic rate, which contribute to their longevity.",
}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return get_tokenizer("Qwen/Qwen3-30B-A3B")


@pytest.fixture(scope="module")
def renderer(tokenizer: Any) -> Renderer:
    return get_renderer("qwen3", tokenizer)


def test_generation_prompt_decodes_to_the_printed_text(renderer: Renderer, tokenizer: Any) -> None:
    prompt = renderer.build_generation_prompt(MESSAGES[:-1])
    assert tokenizer.decode(prompt.to_ints()) == PRINTED_PROMPT_TEXT


def test_printed_ids_are_the_related_conversation(renderer: Renderer) -> None:
    """The printed ids have a first system prompt 'You are a helpful assistant.' and end with 'Why?'."""
    conversation: list[Message] = [
        {"role": "system", "content": "You are a helpful assistant."},
        *MESSAGES[:3],
        {"role": "user", "content": "Why?"},
    ]
    assert renderer.build_generation_prompt(conversation).to_ints() == PRINTED_PROMPT_IDS


def test_printed_sample_parses_to_the_printed_message(renderer: Renderer) -> None:
    message, ok = renderer.parse_response(PRINTED_SAMPLED_TOKENS)
    assert ok
    assert message == PRINTED_SAMPLED_MESSAGE


def test_stop_sequences_are_im_end(renderer: Renderer, tokenizer: Any) -> None:
    assert renderer.get_stop_sequences() == [151645]
    assert tokenizer.convert_ids_to_tokens(151645) == "<|im_end|>"


def test_supervised_example_trains_the_last_answer_as_printed(renderer: Renderer, tokenizer: Any) -> None:
    """The page's colorized example: the prompt is weight 0, the final answer and <|im_end|> weight 1.

    The Qwen3 template writes an empty think block on the final turn, which the model produces too.
    """
    model_input, weights = renderer.build_supervised_example(MESSAGES, TrainOnWhat.LAST_ASSISTANT_MESSAGE)
    tokens = np.array(model_input.to_ints())
    trained = tokenizer.decode(tokens[weights == 1].tolist())
    assert trained == "<think>\n\n</think>\n\n" + MESSAGES[-1]["content"] + "<|im_end|>"
    first_trained = int(np.argmax(weights == 1))
    assert tokenizer.decode(tokens[:first_trained].tolist()) == PRINTED_PROMPT_TEXT
    assert np.all(weights[first_trained:][:-1] == 1) and weights[-1] == 0  # the closing "\n" is prompt
