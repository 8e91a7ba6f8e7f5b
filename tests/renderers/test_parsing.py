"""`parse_response(render(message))` returns the message; truncated or malformed output gives ok=False.

"render(message)" is what a model produces for that turn: the trained tokens of a supervised
example whose last message it is.
"""

import random
from typing import Any

import numpy as np
import pytest

from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, ToolCall, TrainOnWhat, get_renderer

QUESTION: Message = {"role": "user", "content": "What is the weather in Paris?"}
PLAIN: Message = {"role": "assistant", "content": "Sunny, 21 °C.\nEnjoy your day!"}
THINKING: Message = {"role": "assistant", "content": "It is 4.", "thinking": "Two plus two.\nThat is four."}
TOOL_CALLS: Message = {
    "role": "assistant",
    "content": "Let me check.",
    "tool_calls": [
        ToolCall.of("get_weather", {"city": "Paris"}),
        ToolCall.of("add", {"a": 1, "b": 2.5}),
    ],
}
BARE_TOOL_CALL: Message = {
    "role": "assistant",
    "content": "",
    "tool_calls": [ToolCall.of("get_weather", '{"city": "Nice"}')],
}

RENDERERS = {  # renderer name -> model whose tokenizer it runs on
    "role_colon": "meta-llama/Llama-3.1-8B",
    "llama3": "meta-llama/Llama-3.1-8B-Instruct",
    "llama3_1": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3": "Qwen/Qwen3-8B",
    "qwen3_disable_thinking": "Qwen/Qwen3-8B",
    "qwen3_instruct": "Qwen/Qwen3-8B",  # same tokenizer as the 2507 Instruct models
    "chatml": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",
}


def renderer_for(name: str) -> Renderer:
    return get_renderer(name, get_tokenizer(RENDERERS[name]))


def sampled_tokens(renderer: Renderer, message: Message) -> list[int]:
    """The tokens a model emits for `message` after the generation prompt."""
    model_input, weights = renderer.build_supervised_example(
        [QUESTION, message], TrainOnWhat.LAST_ASSISTANT_MESSAGE
    )
    return np.array(model_input.to_ints())[weights == 1].tolist()


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_plain_message_round_trips(name: str) -> None:
    renderer = renderer_for(name)
    assert renderer.parse_response(sampled_tokens(renderer, PLAIN)) == (PLAIN, True)


@pytest.mark.parametrize("name", ["qwen3"])
def test_thinking_message_round_trips(name: str) -> None:
    renderer = renderer_for(name)
    assert renderer.parse_response(sampled_tokens(renderer, THINKING)) == (THINKING, True)


@pytest.mark.parametrize("name", ["qwen3", "qwen3_disable_thinking", "qwen3_instruct", "chatml", "smollm2"])
@pytest.mark.parametrize("message", [TOOL_CALLS, BARE_TOOL_CALL], ids=["with_content", "bare"])
def test_tool_call_message_round_trips(name: str, message: Message) -> None:
    renderer = renderer_for(name)
    assert renderer.parse_response(sampled_tokens(renderer, message)) == (message, True)


def test_thinking_and_tool_calls_round_trip() -> None:
    renderer = renderer_for("qwen3")
    message: Message = {**TOOL_CALLS, "thinking": "I should look it up."}
    assert renderer.parse_response(sampled_tokens(renderer, message)) == (message, True)


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_truncated_output_is_not_ok_and_keeps_the_text(name: str) -> None:
    renderer = renderer_for(name)
    tokens = renderer.encode("Sunny, 21 °C. Enjoy")  # sampling hit max_tokens: no stop sequence
    message, ok = renderer.parse_response(tokens)
    assert not ok
    assert message == {"role": "assistant", "content": "Sunny, 21 °C. Enjoy"}


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n{not json}\n</tool_call>",
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}}',  # unterminated
        '<tool_call>\n{"name": "f", "arguments": [1, 2]}\n</tool_call>',  # arguments not an object
        '<tool_call>\n{"arguments": {}}\n</tool_call>',  # no name
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call> and then more text',
    ],
)
@pytest.mark.parametrize("name", ["qwen3", "smollm2"])
def test_malformed_tool_calls_are_not_ok_and_keep_the_raw_text(name: str, text: str) -> None:
    renderer = renderer_for(name)
    message, ok = renderer.parse_response(renderer.encode(text + "<|im_end|>"))
    assert not ok
    assert message == {"role": "assistant", "content": text}


def test_reasoning_is_parsed_out_even_when_a_tool_call_is_malformed() -> None:
    renderer = renderer_for("qwen3")
    message, ok = renderer.parse_response(
        renderer.encode("<think>\nhmm\n</think>\n\n<tool_call>\n{oops}\n</tool_call><|im_end|>")
    )
    assert not ok
    assert message == {"role": "assistant", "content": "<tool_call>\n{oops}\n</tool_call>", "thinking": "hmm"}


def test_role_colon_stop_conditions() -> None:
    renderer = renderer_for("role_colon")
    eos = renderer.tokenizer.eos_token_id
    assert renderer.parse_response(renderer.encode(" Hi there") + [eos]) == (
        {"role": "assistant", "content": "Hi there"},
        True,
    )
    message, ok = renderer.parse_response(renderer.encode(" A\n\nUser: B\n\nUser:"))
    assert (message["content"], ok) == ("A", False)  # two turns in one sample
    assert renderer.get_stop_sequences() == ["\n\nUser:"]


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_parse_never_raises_on_random_tokens(name: str) -> None:
    renderer = renderer_for(name)
    rng = random.Random(0)
    vocabulary = len(renderer.tokenizer)
    stop = renderer.get_stop_sequences()
    for _ in range(50):
        tokens = [rng.randrange(vocabulary) for _ in range(rng.randint(0, 40))]
        if rng.random() < 0.5 and isinstance(stop[0], int):
            tokens.append(stop[0])
        message, ok = renderer.parse_response(tokens)
        assert message["role"] == "assistant" and isinstance(message["content"], str) and isinstance(ok, bool)


def test_parsed_tool_calls_keep_arguments_as_written(qwen3_tokenizer: Any) -> None:
    renderer = get_renderer("qwen3", qwen3_tokenizer)
    text = '<tool_call>\n{"name": "f", "arguments": {"city":"São Paulo"}}\n</tool_call><|im_end|>'
    message, ok = renderer.parse_response(renderer.encode(text))
    assert ok and message["tool_calls"] == [ToolCall.of("f", '{"city":"São Paulo"}')]
