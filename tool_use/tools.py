"""Tools from typed Python functions (`@tool`), the results they return, and running one call.

    @tool
    async def lookup(word: Annotated[str, "the word to define"]) -> ToolResult:
        '''Look a word up in the dictionary.'''
        return simple_tool_result(DICTIONARY.get(word, "not found"))

`@tool` reads the argument schema from the signature and docstring (`tool_use.schema`) and returns a
`FunctionTool`. The function may be `async def` or a plain `def`; a plain one runs in a worker thread,
so a slow one holds up neither the other calls of its turn nor the time limit. It must return a
`ToolResult` (`simple_tool_result(text)` in the common case).

Methods decorated with `@tool` are tools bound to their object, so the tools of one object share its
state (a sandbox, a client, a counter). Where a tool object is built decides how long that state
lives: in `EnvGroupBuilder.make_envs` per episode, in the group builder per group, in the dataset
builder for the whole run. Calls of one turn run concurrently; a tool whose state cannot take that
guards it (a plain method runs in a thread, so use a `threading.Lock`; an async one, an `asyncio.Lock`).

`handle_tool_call(tools, call)` runs one call of the model and always answers with a `ToolResult`:
a tool name that is not offered, arguments that are not a JSON object or fail the schema, a tool
that raises or that runs past `ToolLimits.timeout_s` each become an error result the model reads
(its kind in `metadata["error"]`). Text past `ToolLimits.max_output_chars` is cut, with a note.
Only a defect of the tool's own code (it returns something other than a `ToolResult`) raises.
A timed-out plain function keeps its worker thread until it returns: Python cannot stop a thread,
so a tool that may hang for good (running code, say) must bound itself, e.g. in a subprocess.
"""

import asyncio
import dataclasses
import importlib
import inspect
import json
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any, get_type_hints

from pydantic import BaseModel, ValidationError

from renderers import Message, ToolCall, ToolSpec
from tool_use.schema import (
    describe_arguments_error,
    docstring_description,
    parameters_model,
    parameters_schema,
)
from tool_use.types import Tool, ToolDefinitionError, ToolErrorKind, ToolInput, ToolLimits, ToolResult


def simple_tool_result(
    content: str,
    *,
    call_id: str = "",
    name: str = "",
    should_stop: bool = False,
    metrics: dict[str, float] | None = None,
    metadata: dict[str, Any] | None = None,
) -> ToolResult:
    """A result of one `tool` message with `content` (text: no renderer here renders images).

    Args:
        call_id, name: the call answered and the tool's name; a `FunctionTool` fills in empty ones.
        should_stop: end the episode after this turn.
    """
    message = Message(role="tool", content=content)
    if call_id:
        message["tool_call_id"] = call_id
    if name:
        message["name"] = name
    return ToolResult([message], should_stop, dict(metrics or {}), dict(metadata or {}))


def error_tool_result(
    error_msg: str,
    *,
    call_id: str = "",
    name: str = "",
    error_type: str = ToolErrorKind.FAILED,
    should_stop: bool = False,
) -> ToolResult:
    """A result telling the model `Error: <error_msg>`, marked `metadata["error"] = error_type`."""
    return simple_tool_result(
        f"Error: {error_msg}", call_id=call_id, name=name, should_stop=should_stop, metadata={"error": error_type}
    )


def _failure_result(tool_name: str, call_id: str | None, exc: Exception) -> ToolResult:
    """The error result of a tool that raised `exc`."""
    return error_tool_result(f"{tool_name} raised {type(exc).__name__}: {exc}", call_id=call_id or "",
                             name=tool_name, error_type=ToolErrorKind.FAILED)


class FunctionTool:
    """A tool made from a typed function or method by `@tool` (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], instance: object = None,
                 arguments_model: type[BaseModel] | None = None) -> None:
        self._fn = fn
        self._instance = instance
        self._name: str = fn.__name__
        self._description = docstring_description(inspect.getdoc(fn) or "")
        self._arguments = arguments_model or parameters_model(fn, self._name)
        if arguments_model is None:
            _check_return_hint(fn, self._name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return parameters_schema(self._arguments)

    def to_spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters_schema)

    async def run(self, input: ToolInput) -> ToolResult:
        """Validate the arguments, call the function, and address its messages to the call."""
        try:
            arguments = self._arguments.model_validate(input.arguments)
        except ValidationError as exc:
            return error_tool_result(describe_arguments_error(exc, self.name, self._arguments),
                                     call_id=input.call_id or "", name=self.name,
                                     error_type=ToolErrorKind.BAD_ARGUMENTS)
        try:
            result = await self._call({key: getattr(arguments, key) for key in type(arguments).model_fields})
        except Exception as exc:  # a failing tool is news for the model, not a crash of the rollout
            return _failure_result(self.name, input.call_id, exc)
        return _addressed(_checked_result(result, self.name), self.name, input.call_id)

    async def _call(self, kwargs: dict[str, Any]) -> object:
        args = () if self._instance is None else (self._instance,)
        if inspect.iscoroutinefunction(self._fn):
            return await self._fn(*args, **kwargs)
        return await asyncio.to_thread(self._fn, *args, **kwargs)

    def __get__(self, instance: object, owner: type | None = None) -> "FunctionTool":
        """`obj.method` is the tool bound to `obj` (its schema is built once, per class)."""
        if instance is None:
            return self
        return FunctionTool(self._fn, instance, self._arguments)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle by reference (the module attribute, or the bound object's attribute), so builders
        holding tools can cross process boundaries."""
        if self._instance is not None:
            return getattr, (self._instance, self._name)
        if "<locals>" in self._fn.__qualname__:
            raise pickle.PicklingError(f"Tool {self._name!r} is defined inside a function; define it at "
                                       "module level to pickle it.")
        return _module_attribute, (self._fn.__module__, self._fn.__qualname__)

    def __repr__(self) -> str:
        bound = "" if self._instance is None else f" bound to {type(self._instance).__name__}"
        return f"<tool {self._name}{bound}>"


def tool(fn: Callable[..., Any]) -> FunctionTool:
    """Make `fn` a tool; see the module docstring.

    Raises:
        ToolDefinitionError: a parameter lacks a type hint, `*args`/`**kwargs`, a return hint other
            than `ToolResult`, or a docstring describing a parameter `fn` does not have.
    """
    return FunctionTool(fn)


async def handle_tool_call(
    tools: Mapping[str, Tool] | Sequence[Tool], tool_call: ToolCall, limits: ToolLimits | None = None
) -> ToolResult:
    """Run one call of the model under `limits`; every failure becomes an error result.

    Args:
        tools: the tools offered, by name (or a list of them).
        tool_call: the call, with its arguments as JSON text.

    Raises:
        ToolDefinitionError: the tool returned something other than a `ToolResult` (a bug in the tool).
    """
    limits = limits or ToolLimits()
    offered = tools_by_name(tools)
    name, call_id = tool_call.function.name, tool_call.id or ""
    if name not in offered:
        return error_tool_result(f"there is no tool named {name!r}; the tools are {sorted(offered)}",
                                 call_id=call_id, name=name, error_type=ToolErrorKind.UNKNOWN_TOOL)
    try:
        arguments = _json_object(tool_call.function.arguments)
    except ValueError as exc:
        return error_tool_result(f"the arguments of {name} {exc}", call_id=call_id, name=name,
                                 error_type=ToolErrorKind.BAD_ARGUMENTS)
    result = await _run_limited(offered[name], ToolInput(arguments, tool_call.id), limits.timeout_s)
    return _capped(result, limits.max_output_chars)


async def run_tool_calls(
    tools: Mapping[str, Tool] | Sequence[Tool], calls: Sequence[ToolCall], limits: ToolLimits | None = None
) -> list[ToolResult]:
    """One assistant turn's calls, all at once, each under `limits`; the results in the order of the calls."""
    return list(await asyncio.gather(*(handle_tool_call(tools, call, limits) for call in calls)))


async def _run_limited(target: Tool, input: ToolInput, timeout_s: float) -> ToolResult:
    """`target.run(input)` within `timeout_s` seconds (0: no limit), its messages addressed to the call."""
    limit = asyncio.timeout(timeout_s or None)
    try:
        async with limit:
            result = await target.run(input)
    except ToolDefinitionError:
        raise
    except Exception as exc:  # as in FunctionTool.run, for tools that implement the protocol themselves
        if isinstance(exc, TimeoutError) and limit.expired():
            return error_tool_result(f"{target.name} did not finish within {timeout_s:g} s",
                                     call_id=input.call_id or "", name=target.name, error_type=ToolErrorKind.TIMEOUT)
        return _failure_result(target.name, input.call_id, exc)
    return _addressed(_checked_result(result, target.name), target.name, input.call_id)


def _capped(result: ToolResult, max_chars: int) -> ToolResult:
    """`result` with each message's content cut to `max_chars` characters plus a note (0: no cap);
    a cut result is marked `metadata["truncated"] = True`."""
    if not max_chars or all(len(message["content"]) <= max_chars for message in result.messages):
        return result
    messages = [_cut(message, max_chars) for message in result.messages]
    return dataclasses.replace(result, messages=messages, metadata={**result.metadata, "truncated": True})


def _cut(message: Message, max_chars: int) -> Message:
    content = message["content"]
    if len(content) <= max_chars:
        return message
    cut = message.copy()
    cut["content"] = (f"{content[:max_chars]}\n[output truncated: showing the first {max_chars} of "
                      f"{len(content)} characters]")
    return cut


def tools_by_name(tools: Mapping[str, Tool] | Sequence[Tool]) -> dict[str, Tool]:
    """The tools by name; a ToolDefinitionError when two tools of a list share a name."""
    if isinstance(tools, Mapping):
        return dict(tools)
    names = [t.name for t in tools]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ToolDefinitionError(f"Several tools are named {repeated}; the model calls tools by name.")
    return dict(zip(names, tools, strict=True))


def _checked_result(result: object, tool_name: str) -> ToolResult:
    if not isinstance(result, ToolResult):
        raise ToolDefinitionError(f"Tool {tool_name!r} returned {type(result).__name__}; a tool returns a "
                                  "ToolResult (simple_tool_result(text) makes one).")
    return result


def _addressed(result: ToolResult, tool_name: str, call_id: str | None) -> ToolResult:
    """`result` with its messages' missing `tool_call_id` and `name` filled in."""
    messages = []
    for message in result.messages:
        message = message.copy()
        if call_id and not message.get("tool_call_id"):
            message["tool_call_id"] = call_id
        message.setdefault("name", tool_name)
        messages.append(message)
    return dataclasses.replace(result, messages=messages)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"are not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object of named arguments; got {text!r}")
    return value


def _check_return_hint(fn: Callable[..., Any], name: str) -> None:
    returns = get_type_hints(fn).get("return", ToolResult)  # resolvable: parameters_model checked it
    if returns is not ToolResult:
        raise ToolDefinitionError(f"Tool {name!r} is annotated to return {returns}; a tool returns a ToolResult.")


def _module_attribute(module: str, qualname: str) -> object:
    value: object = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value
