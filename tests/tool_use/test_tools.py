"""handle_tool_call: every failure is an error result for the model; limits; stateful and picklable tools."""

import asyncio
import pickle
import time
from typing import Any

import pytest

from recipes_lib.exceptions import ConfigurationError
from renderers import ToolCall
from tool_use import (
    Tool,
    ToolDefinitionError,
    ToolErrorKind,
    ToolInput,
    ToolLimits,
    ToolResult,
    handle_tool_call,
    simple_tool_result,
    tool,
)


@tool
async def add(a: int, b: int = 0) -> ToolResult:
    """Add two integers."""
    return simple_tool_result(str(a + b), metrics={"magnitude": float(abs(a + b))})


@tool
def divide(a: int, b: int) -> ToolResult:
    """Divide a by b (a plain function: it runs in a worker thread)."""
    return simple_tool_result(str(a // b))


@tool
async def nap(seconds: float) -> ToolResult:
    """Sleep, then say so."""
    await asyncio.sleep(seconds)
    return simple_tool_result(f"slept {seconds}")


@tool
def doze(seconds: float) -> ToolResult:
    """Sleep in a thread, then say so."""
    time.sleep(seconds)
    return simple_tool_result(f"dozed {seconds}")


@tool
async def shout(text: str, times: int) -> ToolResult:
    """Repeat text."""
    return simple_tool_result(text * times)


TOOLS = [add, divide, nap, doze, shout]


def _call(name: str, arguments: str | dict[str, Any], limits: ToolLimits | None = None) -> ToolResult:
    return asyncio.run(handle_tool_call(TOOLS, ToolCall.of(name, arguments, id="call_7"), limits))


def test_a_good_call_answers_with_a_tool_message_addressed_to_the_call() -> None:
    result = _call("add", {"a": 2, "b": 3})
    assert result.messages == [{"role": "tool", "content": "5", "tool_call_id": "call_7", "name": "add"}]
    assert result.error is None and result.metrics == {"magnitude": 5.0}


@pytest.mark.parametrize(("name", "arguments", "kind", "text"), [
    ("mul", "{}", ToolErrorKind.UNKNOWN_TOOL,
     "Error: there is no tool named 'mul'; the tools are ['add', 'divide', 'doze', 'nap', 'shout']"),
    ("add", '{"a": 1', ToolErrorKind.BAD_ARGUMENTS, "Error: the arguments of add are not valid JSON"),
    ("add", "[1, 2]", ToolErrorKind.BAD_ARGUMENTS,
     "Error: the arguments of add must be a JSON object of named arguments; got '[1, 2]'"),
    ("add", {"b": 1}, ToolErrorKind.BAD_ARGUMENTS, "Error: invalid arguments for add: 'a' is missing"),
    ("add", {"a": "two"}, ToolErrorKind.BAD_ARGUMENTS,
     "Error: invalid arguments for add: 'a': input should be a valid integer"),
    ("add", {"a": 1, "c": 2}, ToolErrorKind.BAD_ARGUMENTS,
     "Error: invalid arguments for add: 'c' is not an argument of add (its arguments: ['a', 'b'])"),
    ("divide", {"a": 1, "b": 0}, ToolErrorKind.FAILED,
     "Error: divide raised ZeroDivisionError: integer division or modulo by zero"),
], ids=["unknown tool", "broken JSON", "not an object", "missing argument", "wrong type", "extra argument",
        "tool raises"])
def test_every_failure_is_an_error_result_for_the_model(name: str, arguments: str | dict[str, Any],
                                                        kind: ToolErrorKind, text: str) -> None:
    result = _call(name, arguments)
    assert result.error == kind
    [message] = result.messages
    assert message["role"] == "tool" and message["name"] == name and message["content"].startswith(text)


def test_a_call_past_the_time_limit_is_a_timeout_result() -> None:
    start = time.monotonic()
    result = _call("nap", {"seconds": 30}, ToolLimits(timeout_s=0.05))
    assert time.monotonic() - start < 5
    assert result.error == ToolErrorKind.TIMEOUT
    assert result.messages[0]["content"] == "Error: nap did not finish within 0.05 s"


def test_a_plain_function_past_the_time_limit_is_a_timeout_result_too() -> None:
    assert _call("doze", {"seconds": 0.3}, ToolLimits(timeout_s=0.05)).error == ToolErrorKind.TIMEOUT


def test_a_tool_raising_timeout_error_itself_is_a_failure_not_a_timeout() -> None:
    class Flaky:
        name, description, parameters_schema = "flaky", "Fails.", {"type": "object"}

        async def run(self, input: ToolInput) -> ToolResult:
            raise TimeoutError("upstream timed out")

    result = asyncio.run(handle_tool_call({"flaky": Flaky()}, ToolCall.of("flaky", {})))  # type: ignore[dict-item]
    assert result.error == ToolErrorKind.FAILED
    assert result.messages[0]["content"] == "Error: flaky raised TimeoutError: upstream timed out"


class Echo(Tool):
    """A tool written against the protocol, without `@tool`."""

    name, description = "echo", "Repeat the text."
    parameters_schema = {"type": "object", "properties": {"text": {"type": "string"}}}

    async def run(self, input: ToolInput) -> ToolResult:
        return simple_tool_result(str(input.arguments["text"]))


def test_a_protocol_tool_gets_the_same_handling() -> None:
    result = asyncio.run(handle_tool_call([Echo()], ToolCall.of("echo", {"text": "hi"}, id="call_2")))
    assert result.messages == [{"role": "tool", "content": "hi", "tool_call_id": "call_2", "name": "echo"}]
    assert Echo().to_spec() == {"name": "echo", "description": "Repeat the text.",
                                "parameters": Echo.parameters_schema}
    failed = asyncio.run(handle_tool_call([Echo()], ToolCall.of("echo", {})))
    assert failed.error == ToolErrorKind.FAILED and failed.messages[0]["content"] == "Error: echo raised KeyError: 'text'"


@pytest.mark.parametrize("settings", [{"timeout_s": -1.0}, {"max_output_chars": -5}])
def test_negative_limits_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError, match="ToolLimits needs timeout_s >= 0 and max_output_chars >= 0"):
        ToolLimits(**settings)  # type: ignore[arg-type]


def test_long_output_is_cut_and_says_so() -> None:
    result = _call("shout", {"text": "ab", "times": 60}, ToolLimits(max_output_chars=50))
    assert result.messages[0]["content"] == "ab" * 25 + "\n[output truncated: showing the first 50 of 120 characters]"
    assert result.metadata["truncated"] is True
    assert "truncated" not in _call("shout", {"text": "ab", "times": 25}, ToolLimits(max_output_chars=50)).metadata


def test_a_slow_call_does_not_hold_up_a_fast_one() -> None:
    finished: list[str] = []

    async def run(name: str, arguments: dict[str, Any]) -> None:
        await handle_tool_call(TOOLS, ToolCall.of(name, arguments))
        finished.append(name)

    async def both() -> None:
        await asyncio.gather(run("doze", {"seconds": 0.4}), run("nap", {"seconds": 0.4}), run("add", {"a": 1}))

    start = time.monotonic()
    asyncio.run(both())
    assert finished[0] == "add" and time.monotonic() - start < 0.75  # the two sleeps overlapped


def test_a_tool_that_returns_no_tool_result_is_a_bug_that_raises() -> None:
    @tool
    async def sloppy(x: int):  # type: ignore[no-untyped-def]
        return str(x)

    with pytest.raises(ToolDefinitionError, match="Tool 'sloppy' returned str; a tool returns a ToolResult"):
        asyncio.run(handle_tool_call([sloppy], ToolCall.of("sloppy", {"x": 1})))


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(ToolDefinitionError, match=r"Several tools are named \['add'\]"):
        asyncio.run(handle_tool_call([add, add], ToolCall.of("add", {"a": 1})))


class Counter:
    """Two tools sharing one count: the state lives as long as the object."""

    def __init__(self, start: int = 0) -> None:
        self.count = start

    @tool
    async def increment(self, by: int = 1) -> ToolResult:
        """Add to the count."""
        self.count += by
        return simple_tool_result(str(self.count))

    @tool
    def read(self) -> ToolResult:
        """Read the count."""
        return simple_tool_result(str(self.count))


def test_method_tools_share_their_objects_state() -> None:
    first, second = Counter(), Counter(start=100)
    tools: list[Tool] = [first.increment, first.read]
    asyncio.run(handle_tool_call(tools, ToolCall.of("increment", {"by": 5})))
    assert _content(asyncio.run(handle_tool_call(tools, ToolCall.of("read", {})))) == "5"
    assert _content(asyncio.run(second.read.run(ToolInput({})))) == "100"
    assert isinstance(first.read, Tool) and first.read.name == "read"


def test_tools_pickle_by_reference() -> None:
    assert pickle.loads(pickle.dumps(add)) is add
    counter = Counter(start=3)
    copy = pickle.loads(pickle.dumps(counter.read))
    assert _content(asyncio.run(copy.run(ToolInput({})))) == "3"


def _content(result: ToolResult) -> str:
    return result.messages[0]["content"]
