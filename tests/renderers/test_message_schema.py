"""The one message schema: every field a renderer reads is kept, every mistake is named.

Expectations are written by hand from the schema's documented format (renderers/messages.py).
"""

from typing import Any

import pytest

from recipes_lib.exceptions import DataFormatError
from renderers import Message, ToolCall, get_renderer, parse_message, parse_messages


def test_every_field_is_kept() -> None:
    assistant = parse_message(
        {"role": "assistant", "content": None, "thinking": "Look it up.", "trainable": True,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}},
                        {"name": "get_time", "arguments": '{"zone":  "CET"}'}]},
        "here",
    )
    assert assistant == Message(
        role="assistant", content="", thinking="Look it up.", trainable=True,
        tool_calls=[ToolCall.of("get_weather", '{"city": "Paris", "unit": "°C"}', "call_1"),
                    ToolCall.of("get_time", '{"zone":  "CET"}')],  # JSON text is kept as written
    )
    tool = parse_message({"role": "tool", "content": "18", "tool_call_id": "call_1", "name": "get_weather",
                          "trainable": False}, "here")
    assert tool == Message(role="tool", content="18", tool_call_id="call_1", name="get_weather", trainable=False)


def test_list_of_parts_content() -> None:
    message = parse_message({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "2+2=4"}, {"type": "text", "text": "It is "}, {"type": "text", "text": "4."}]},
        "here")
    assert message == Message(role="assistant", content="It is 4.", thinking="2+2=4")
    assert parse_message({"role": "user", "content": [{"type": "text", "text": "Hi"}]}, "x") == {"role": "user",
                                                                                                 "content": "Hi"}


def test_null_optional_fields_count_as_absent() -> None:
    """Hugging Face datasets fill the fields a row lacks with null."""
    row = {"role": "user", "content": "Hi", "tool_calls": None, "thinking": None, "trainable": None,
           "tool_call_id": None, "name": None}
    assert parse_message(row, "x") == {"role": "user", "content": "Hi"}


def test_tool_call_objects_from_code_pass() -> None:
    call = ToolCall.of("f", '{"a": 1}', "c")
    assert parse_message({"role": "assistant", "content": "", "tool_calls": [call]}, "x")["tool_calls"] == [call]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "robot", "content": "x"}, "unknown role 'robot'; expected one of ['system', 'user', 'assistant', 'tool']"),
        ({"role": "user", "content": "x", "weight": 2}, "unknown field 'weight'; a message has only the fields"),
        ({"role": "user"}, "'content' is missing"),
        ({"role": "user", "content": 3}, "'content' must be a string; got int 3"),
        ({"role": "user", "content": "x", "trainable": "yes"}, "'trainable' must be true or false; got string 'yes'"),
        ({"role": "user", "content": "x", "trainable": 1}, "'trainable' must be true or false; got int 1"),
        ({"role": "assistant", "content": "", "thinking": ["a"]}, "'thinking' must be a string; got list"),
        ({"role": "user", "content": [{"type": "image", "image": "cat.png"}]},
         "'content[0]' has the part type 'image'; expected 'text' or 'thinking' parts"),
        ({"role": "user", "content": [{"type": "text", "text": 5}]}, "'content[0].text' must be a string; got int 5"),
        ({"role": "user", "content": [{"text": "hi"}]}, "'content[0]' needs a 'type'"),
        ({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "thinking", "thinking": "b"}]},
         "'content[1]' is a thinking part after a text part"),
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]},
         "'tool_calls[0].function.arguments' is not valid JSON"),
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]},
         "'tool_calls[0].function.arguments' must hold a JSON object"),
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": 7}}]},
         "'tool_calls[0].function.arguments' must be a JSON object (or its JSON text); got int 7"),
        ({"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": {}}}]},
         "'tool_calls[0].function.name' is missing"),
        ({"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {}, "extra": 1}]},
         "unknown field 'extra'"),
        ({"role": "assistant", "content": "", "tool_calls": {"name": "f"}}, "'tool_calls' must be a list of tool calls"),
        ({"role": "user", "content": "x", "tool_calls": [{"name": "f", "arguments": {}}]},
         "'tool_calls' belongs on assistant messages; this is a 'user' message"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, "'tool_call_id' belongs on tool messages"),
        ({"role": "user", "content": None}, "'content' is null; only an assistant message with tool_calls"),
        ({"role": "assistant", "content": "", "thinking": "a", "tool_calls": None,
          **{"content": [{"type": "thinking", "thinking": "b"}]}}, "the reasoning is given twice"),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 30 else None,
)
def test_mistakes_name_where_and_the_field(message: Any, expected: str) -> None:
    with pytest.raises(DataFormatError) as info:
        parse_messages([{"role": "user", "content": "fine"}, message], "data.jsonl line 4")
    assert str(info.value).startswith("data.jsonl line 4, message 1: ")
    assert expected in str(info.value)


def test_not_an_object_or_not_a_list() -> None:
    with pytest.raises(DataFormatError, match=r"^x, message 0: expected an object with 'role' and 'content'; got string"):
        parse_messages(["hello"], "x")
    with pytest.raises(DataFormatError, match="^x: expected a list of messages; got object"):
        parse_messages({"role": "user"}, "x")


def test_renderers_check_messages_built_in_code(smollm2_tokenizer: Any) -> None:
    """Code-built messages pass the same schema when a renderer renders them."""
    renderer = get_renderer("smollm2", smollm2_tokenizer)
    with pytest.raises(DataFormatError, match="Message 1: unknown field 'trainabel'"):
        renderer.build_generation_prompt([{"role": "user", "content": "a"}, {"role": "user", "content": "b",
                                                                             "trainabel": True}])  # type: ignore[typeddict-unknown-key]
    with pytest.raises(DataFormatError, match="Message 0: unknown role 'bot'"):
        renderer.build_generation_prompt([{"role": "bot", "content": "a"}])
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert renderer.build_generation_prompt(parts) == renderer.build_generation_prompt(  # type: ignore[arg-type]
        [{"role": "user", "content": "ab"}])
    with pytest.raises(DataFormatError, match=r"Message 0: 'content\[0\]' has the part type 'image'"):
        renderer.build_generation_prompt([{"role": "user", "content": [{"type": "image", "image": "x"}]}])  # type: ignore[typeddict-item]
