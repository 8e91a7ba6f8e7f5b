"""`build_supervised_example` weights, checked against hand-written (text, weight) pieces.

Each expectation lists the rendered text in pieces with the weight a reader would assign; the
pieces are tokenized one by one (their boundaries fall between tokens in these small cases).
"""

from typing import Any

import numpy as np
import pytest

from recipes_lib.exceptions import ConfigurationError, DataFormatError, RendererError
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, ToolCall, TrainOnWhat, get_renderer

SMOL_SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
)


def expected(tokenizer: Any, pieces: list[tuple[str, int]]) -> tuple[list[int], list[float]]:
    tokens: list[int] = []
    weights: list[float] = []
    for text, weight in pieces:
        ids = tokenizer.encode(text, add_special_tokens=False)
        tokens += ids
        weights += [float(weight)] * len(ids)
    return tokens, weights


def assert_example(
    renderer: Any, messages: list[Message], train_on_what: TrainOnWhat, pieces: list[tuple[str, int]]
) -> None:
    model_input, weights = renderer.build_supervised_example(messages, train_on_what)
    tokens, expected_weights = expected(renderer.tokenizer, pieces)
    assert model_input.to_ints() == tokens
    assert weights.dtype == np.float32 and weights.shape == (len(tokens),)
    assert weights.tolist() == expected_weights


CHAT: list[Message] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Goodbye"},
]


def _smol_pieces(trained: set[str], headers: int = 0) -> list[tuple[str, int]]:
    """CHAT rendered by ChatML; outputs named in `trained` get weight 1, headers get `headers`."""
    pieces: list[tuple[str, int]] = []
    for message in CHAT:
        pieces.append((f"<|im_start|>{message['role']}\n", headers))
        pieces.append((message["content"] + "<|im_end|>", int(message["content"] in trained or headers == 1)))
        pieces.append(("\n", headers))
    return pieces


@pytest.mark.parametrize(
    ("train_on_what", "trained"),
    [
        (TrainOnWhat.LAST_ASSISTANT_MESSAGE, {"Goodbye"}),
        (TrainOnWhat.ALL_ASSISTANT_MESSAGES, {"Hello", "Goodbye"}),
        (TrainOnWhat.ALL_MESSAGES, {"Be brief.", "Hi", "Hello", "Bye", "Goodbye"}),
        (TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES, {"Be brief.", "Hi", "Bye"}),
    ],
)
def test_chatml_weights(smollm2_tokenizer: Any, train_on_what: TrainOnWhat, trained: set[str]) -> None:
    assert_example(get_renderer("smollm2", smollm2_tokenizer), CHAT, train_on_what, _smol_pieces(trained))


def test_all_tokens_trains_headers_too(smollm2_tokenizer: Any) -> None:
    assert_example(
        get_renderer("smollm2", smollm2_tokenizer),
        CHAT,
        TrainOnWhat.ALL_TOKENS,
        _smol_pieces(set(), headers=1),
    )


def test_customized_trains_flagged_messages(smollm2_tokenizer: Any) -> None:
    flagged: list[Message] = [
        {**message, "trainable": message["content"] in ("Hi", "Hello")} for message in CHAT
    ]  # type: ignore[typeddict-item]
    assert_example(
        get_renderer("smollm2", smollm2_tokenizer),
        flagged,
        TrainOnWhat.CUSTOMIZED,
        _smol_pieces({"Hi", "Hello"}),
    )


def test_smollm2_default_system_prompt_is_never_trained(smollm2_tokenizer: Any) -> None:
    messages: list[Message] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    pieces = [(SMOL_SYSTEM, 0), ("<|im_start|>user\n", 0), ("Hi<|im_end|>", 1), ("\n", 0),
              ("<|im_start|>assistant\n", 0), ("Hello<|im_end|>", 1), ("\n", 0)]  # fmt: skip
    assert_example(get_renderer("smollm2", smollm2_tokenizer), messages, TrainOnWhat.ALL_MESSAGES, pieces)


def test_a_token_straddling_header_and_content_is_trained(qwen3_tokenizer: Any) -> None:
    """'user\\n' + content '\\nYes' tokenizes '\\n\\n' as one token: half header, half content."""
    assert qwen3_tokenizer.encode("\n\n", add_special_tokens=False) == [271]
    messages: list[Message] = [{"role": "user", "content": "\nYes"}]
    pieces = [("<|im_start|>user", 0), ("\n\n", 1), ("Yes<|im_end|>", 1), ("\n", 0)]
    assert_example(
        get_renderer("qwen3", qwen3_tokenizer), messages, TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES, pieces
    )


def test_llama3_weights(llama3_tokenizer: Any) -> None:
    messages: list[Message] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "  Hello \n"},
    ]
    pieces = [("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", 0),
              ("<|start_header_id|>assistant<|end_header_id|>\n\n", 0), ("Hello<|eot_id|>", 1)]  # fmt: skip
    assert_example(
        get_renderer("llama3", llama3_tokenizer), messages, TrainOnWhat.LAST_ASSISTANT_MESSAGE, pieces
    )


def test_role_colon_trains_the_user_that_completes_the_stop_string() -> None:
    tokenizer = get_tokenizer("meta-llama/Llama-3.1-8B")
    messages: list[Message] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    pieces = [
        ("<|begin_of_text|>", 0),
        ("User:", 0),
        (" Hi\n\n", 0),
        ("Assistant:", 0),
        (" Hello\n\n", 1),
        ("User:", 1),
    ]
    assert_example(
        get_renderer("role_colon", tokenizer), messages, TrainOnWhat.LAST_ASSISTANT_MESSAGE, pieces
    )


def test_qwen3_trains_the_think_block_of_the_final_turn_only(qwen3_tokenizer: Any) -> None:
    messages: list[Message] = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "thinking": "Add them."},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "6", "thinking": "Add again."},
    ]
    pieces = [("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n", 0), ("4<|im_end|>", 1),
              ("\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n", 0),
              ("<think>\nAdd again.\n</think>\n\n6<|im_end|>", 1), ("\n", 0)]  # fmt: skip
    assert_example(
        get_renderer("qwen3", qwen3_tokenizer), messages, TrainOnWhat.ALL_ASSISTANT_MESSAGES, pieces
    )


def test_qwen3_disable_thinking_leaves_the_empty_think_block_to_the_prompt(qwen3_tokenizer: Any) -> None:
    messages: list[Message] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    pieces = [("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", 0),
              ("Hello<|im_end|>", 1), ("\n", 0)]  # fmt: skip
    renderer = get_renderer("qwen3_disable_thinking", qwen3_tokenizer)
    assert_example(renderer, messages, TrainOnWhat.LAST_ASSISTANT_MESSAGE, pieces)
    with pytest.raises(RendererError, match="reasoning"):
        renderer.build_supervised_example([messages[0], {**messages[1], "thinking": "hmm"}])


@pytest.mark.parametrize("train_on_what", [TrainOnWhat.ALL_MESSAGES, TrainOnWhat.ALL_ASSISTANT_MESSAGES])
def test_qwen3_tool_call_and_response_weights(qwen3_tokenizer: Any, train_on_what: TrainOnWhat) -> None:
    call = ToolCall.of("add", {"a": 1, "b": 2})
    messages: list[Message] = [
        {"role": "user", "content": "Add"},
        {"role": "assistant", "content": "", "tool_calls": [call, call]},
        {"role": "tool", "content": "3"},
        {"role": "tool", "content": "3"},
        {"role": "assistant", "content": "3"},
    ]
    call_text = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    others = int(train_on_what == TrainOnWhat.ALL_MESSAGES)  # user and tool outputs
    pieces = [("<|im_start|>user\n", 0), ("Add<|im_end|>", others), ("\n<|im_start|>assistant\n", 0),
              (f"{call_text}\n{call_text}<|im_end|>", 1), ("\n<|im_start|>user", 0),
              ("\n<tool_response>\n3\n</tool_response>", others),
              ("\n<tool_response>\n3\n</tool_response><|im_end|>", others), ("\n<|im_start|>assistant\n", 0),
              ("<think>\n\n</think>\n\n3<|im_end|>", 1), ("\n", 0)]  # fmt: skip
    assert_example(get_renderer("qwen3", qwen3_tokenizer), messages, train_on_what, pieces)


def test_bad_inputs_raise_named_errors(smollm2_tokenizer: Any, llama3_tokenizer: Any) -> None:
    smollm2 = get_renderer("smollm2", smollm2_tokenizer)
    with pytest.raises(DataFormatError, match="needs an assistant message"):
        smollm2.build_supervised_example([{"role": "user", "content": "Hi"}])
    with pytest.raises(DataFormatError, match="'trainable' flag on every message"):
        smollm2.build_supervised_example(CHAT, TrainOnWhat.CUSTOMIZED)
    with pytest.raises(DataFormatError, match="only TrainOnWhat.CUSTOMIZED reads"):
        smollm2.build_supervised_example([{**CHAT[0], "trainable": True}, *CHAT[1:]])  # type: ignore[typeddict-item]
    with pytest.raises(DataFormatError, match="string 'content'"):
        smollm2.build_generation_prompt([{"role": "user"}])  # type: ignore[typeddict-item]
    with pytest.raises(RendererError, match="tool_calls"):
        get_renderer("role_colon", smollm2_tokenizer).build_generation_prompt(
            [{"role": "assistant", "content": "", "tool_calls": [ToolCall.of("f", "{}")]}]
        )
    with pytest.raises(RendererError, match="thinking"):
        get_renderer("llama3", llama3_tokenizer).build_generation_prompt(
            [{"role": "assistant", "content": "", "thinking": "x"}]
        )


def test_train_on_what_accepts_its_string_values(smollm2_tokenizer: Any) -> None:
    renderer = get_renderer("smollm2", smollm2_tokenizer)
    by_string = renderer.build_supervised_example(CHAT, "all_assistant_messages")  # type: ignore[arg-type]
    by_member = renderer.build_supervised_example(CHAT, TrainOnWhat.ALL_ASSISTANT_MESSAGES)
    assert by_string[0] == by_member[0] and by_string[1].tolist() == by_member[1].tolist()
    with pytest.raises(ConfigurationError, match="all_assistant_messages"):
        renderer.build_supervised_example(CHAT, "assistant_only")  # type: ignore[arg-type]


class CharTokenizer:
    """A slow (offset-less) tokenizer: one id per character, one per ChatML special token."""

    is_fast = False
    name_or_path = "fake/char"
    specials = {"<|im_start|>": 1_000_001, "<|im_end|>": 1_000_002}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = []
        while text:
            special = next((s for s in self.specials if text.startswith(s)), None)
            ids.append(self.specials[special] if special else ord(text[0]))
            text = text[len(special) :] if special else text[1:]
        return ids


def test_tokenizers_without_offsets_are_tokenized_span_by_span() -> None:
    renderer = get_renderer("chatml", CharTokenizer())
    messages: list[Message] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    pieces = [("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", 0), ("Yo<|im_end|>", 1), ("\n", 0)]
    assert_example(renderer, messages, TrainOnWhat.LAST_ASSISTANT_MESSAGE, pieces)
