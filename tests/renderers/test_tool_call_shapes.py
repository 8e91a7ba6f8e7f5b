"""Tool calls in the shapes users write them: OpenAI-form dicts, flat dicts, `ToolCall`s (built the
cookbook's way or with `ToolCall.of`) and pydantic models of the same shape render to the same tokens,
and parsed calls read the way tinker-cookbook's code reads them.

The expected text is written by hand from the Qwen3 chat template's tool-call block.
"""

import json
from typing import Any, Literal

import numpy as np
import pydantic
import pytest

from recipes_lib.exceptions import DataFormatError
from renderers import Message, Renderer, ToolCall, TrainOnWhat, get_renderer
from renderers.hf_chat_template import HFChatTemplateRenderer
from tests.renderers.template_reference import read_template

QUESTION = {"role": "user", "content": "What is 617 * 671?"}
RESULT = {"role": "tool", "content": "414007", "tool_call_id": "call_1", "name": "multiply"}
ARGUMENTS_TEXT = '{"a": 617, "b": 671}'
BLOCK = '<tool_call>\n{"name": "multiply", "arguments": {"a": 617, "b": 671}}\n</tool_call>'


class CookbookShapedCall(pydantic.BaseModel):
    """A model of the cookbook's shape from another package (as tinker-cookbook's own class is)."""

    class FunctionBody(pydantic.BaseModel):
        name: str
        arguments: str

    type: Literal["function"] = "function"
    id: str | None = None
    function: FunctionBody


SHAPES: dict[str, Any] = {
    "openai dict": {"type": "function", "id": "call_1", "function": {"name": "multiply", "arguments": ARGUMENTS_TEXT}},
    "openai dict, object arguments": {"type": "function", "id": "call_1",
                                      "function": {"name": "multiply", "arguments": {"a": 617, "b": 671}}},
    "flat dict": {"name": "multiply", "arguments": ARGUMENTS_TEXT, "id": "call_1"},
    "ToolCall, cookbook's constructor": ToolCall(
        function=ToolCall.FunctionBody(name="multiply", arguments=ARGUMENTS_TEXT), id="call_1"),
    "ToolCall.of": ToolCall.of("multiply", {"a": 617, "b": 671}, id="call_1"),
    "another package's model": CookbookShapedCall(
        function=CookbookShapedCall.FunctionBody(name="multiply", arguments=ARGUMENTS_TEXT), id="call_1"),
}


def _conversation(call: Any) -> list[Message]:
    return [QUESTION, {"role": "assistant", "content": "", "tool_calls": [call]}]  # type: ignore[list-item]


def _tool_renderers(qwen3_tokenizer: Any) -> dict[str, Renderer]:
    names = ("qwen3", "qwen3_disable_thinking", "qwen3_instruct")
    return {name: get_renderer(name, qwen3_tokenizer) for name in names}


def _renders(renderer: Renderer, call: Any) -> tuple[list[int], np.ndarray, list[int]]:
    tokens, weights = renderer.build_supervised_example(_conversation(call), TrainOnWhat.LAST_ASSISTANT_MESSAGE)
    prompt = renderer.build_generation_prompt([*_conversation(call), RESULT])  # type: ignore[list-item]
    return tokens.to_ints(), weights, prompt.to_ints()


@pytest.mark.parametrize("family", ["qwen3", "qwen3_disable_thinking", "qwen3_instruct", "hf_chat_template"])
def test_every_shape_renders_as_the_tool_call(family: str, qwen3_tokenizer: Any) -> None:
    if family == "hf_chat_template":
        renderer: Renderer = HFChatTemplateRenderer(qwen3_tokenizer, chat_template=read_template("qwen3.jinja"))
    else:
        renderer = _tool_renderers(qwen3_tokenizer)[family]
    tokens, weights, prompt = _renders(renderer, SHAPES["ToolCall, cookbook's constructor"])
    trained = renderer.decode([t for t, w in zip(tokens, weights, strict=True) if w])
    assert trained.removeprefix("<think>\n\n</think>\n\n") == BLOCK + "<|im_end|>"  # qwen3 closes an empty think
    assert "<tool_response>\n414007\n</tool_response>" in renderer.decode(prompt)
    for shape, call in SHAPES.items():
        other_tokens, other_weights, other_prompt = _renders(renderer, call)
        assert other_tokens == tokens, shape
        assert np.array_equal(other_weights, weights), shape
        assert other_prompt == prompt, shape


def test_parsed_calls_read_as_the_cookbook_reads_them(qwen3_tokenizer: Any) -> None:
    """Built and read as tinker-cookbook's code does: `ToolCall(function=ToolCall.FunctionBody(...))`,
    then `call.function.name`, `json.loads(call.function.arguments)`, `call.type`, `call.id`."""
    renderer = get_renderer("qwen3", qwen3_tokenizer)
    call = ToolCall(function=ToolCall.FunctionBody(name="multiply", arguments=ARGUMENTS_TEXT), id="call_1")
    tokens, weights = renderer.build_supervised_example(_conversation(call))
    sampled = [t for t, w in zip(tokens.to_ints(), weights, strict=True) if w]
    message, ok = renderer.parse_response(sampled)
    assert ok
    [parsed] = message["tool_calls"]
    assert isinstance(parsed, ToolCall) and parsed.type == "function"
    assert parsed.function.name == "multiply"
    assert json.loads(parsed.function.arguments) == {"a": 617, "b": 671}
    assert parsed.id is None  # the Qwen3 format writes no call ids
    assert parsed == ToolCall.of("multiply", ARGUMENTS_TEXT)
    assert parsed.model_dump() == {"type": "function", "id": None,
                                   "function": {"name": "multiply", "arguments": ARGUMENTS_TEXT}}
    with pytest.raises(pydantic.ValidationError):  # frozen, as the cookbook's
        parsed.id = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        ({"type": "function", "function": {"arguments": "{}"}}, r"tool_calls\[0\]\.function\.name"),
        ({"name": "multiply", "arguments": "[1, 2]"}, r"tool_calls\[0\]\.function\.arguments.*JSON object"),
        ({"name": "multiply", "arguments": "{}", "extra": 1}, r"unknown field 'extra' in 'tool_calls\[0\]'"),
        (ToolCall.of("multiply", "{oops"), r"tool_calls\[0\]\.function\.arguments.*not valid JSON"),
    ],
)
def test_a_malformed_call_is_named(call: Any, problem: str, qwen3_tokenizer: Any) -> None:
    renderer = get_renderer("qwen3", qwen3_tokenizer)
    with pytest.raises(DataFormatError, match=f"Message 1: .*{problem}"):
        renderer.build_generation_prompt(_conversation(call))
