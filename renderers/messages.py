"""Chat messages: the `Message` the renderers read, and the one schema every message passes through.

Every message from every source (a JSONL file, a Hugging Face row, a comparison, code) is checked
by the pydantic model `MessageSchema` and turned into a `Message` by `parse_message`, so no field
a renderer understands is dropped on the way and no mistake is guessed around. A message is

    {"role": "system" | "user" | "assistant" | "tool",
     "content": "text" | [{"type": "text", "text": ...} | {"type": "thinking", "thinking": ...}, ...],
     "thinking": "reasoning before the answer",                 # assistant only
     "tool_calls": [{"id": "call_1", "type": "function",          # assistant only
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
     "tool_call_id": "call_1", "name": "get_weather",             # tool only
     "trainable": true}                                           # with train_on_what=customized

- `content` may be a list of parts: text parts are joined in order into the content, thinking
  parts (before any text) become `thinking`. Other part types (images, audio) are refused: no
  renderer here renders them. `content` may be null only for an assistant message with tool calls.
- A tool call is OpenAI's `{"id", "type": "function", "function": {"name", "arguments"}}` or the flat
  `{"name", "arguments", "id"}`; `arguments` is a JSON object or its JSON text (kept as written).
- An optional field given as null counts as absent (Hugging Face datasets fill missing keys with
  null). Types are strict: `"trainable": "yes"` or `"content": 3` is an error, not a conversion.
- Unknown roles, unknown fields and wrong types raise `DataFormatError` naming where the message
  came from (file and line, dataset row) and the field (`tool_calls[0].function.arguments`).
"""

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, TypedDict, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from recipes_lib.exceptions import DataFormatError

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = get_args(Role)


class ToolCall(BaseModel):
    """A function call made in an assistant turn, in OpenAI's shape (tinker-cookbook's too):
    `call.function.name`, `call.function.arguments` (the JSON text of an object), `call.id`,
    `call.type`. Build one as `ToolCall(function=ToolCall.FunctionBody(name=..., arguments=...))`
    or, with the arguments as a mapping, `ToolCall.of(name, {...})`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    class FunctionBody(BaseModel):
        """The function a call names, and its arguments as JSON text."""

        model_config = ConfigDict(extra="forbid", frozen=True)
        name: str
        arguments: str

    type: Literal["function"] = "function"
    id: str | None = None
    function: FunctionBody

    @classmethod
    def of(cls, name: str, arguments: str | Mapping[str, object], id: str | None = None) -> "ToolCall":
        """A call to `name`; mapping arguments are serialized the way chat templates serialize them
        (`tojson`), text arguments are kept as written."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return cls(function=cls.FunctionBody(name=name, arguments=text), id=id)


class ToolSpec(TypedDict):
    """A tool the model may call: name, description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class Message(TypedDict):
    """One chat message as the renderers read it. Only `role` and `content` are required.

    `thinking` is an assistant turn's reasoning (rendered in `<think>` by renderers that support
    it); `tool_calls` are its function calls; `trainable` marks messages to train on with
    `TrainOnWhat.CUSTOMIZED`; `tool_call_id` and `name` identify a `tool` message's call.
    Build one from outside data with `parse_message`, which checks it against `MessageSchema`.
    """

    role: str
    content: str
    tool_calls: NotRequired[list[ToolCall]]
    thinking: NotRequired[str]
    trainable: NotRequired[bool]
    tool_call_id: NotRequired[str]
    name: NotRequired[str]


# -- the schema ------------------------------------------------------------------------------------

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class TextPart(BaseModel):
    """`{"type": "text", "text": ...}`: a piece of a message's content."""

    model_config = _STRICT
    type: Literal["text"]
    text: str


class ThinkingPart(BaseModel):
    """`{"type": "thinking", "thinking": ...}`: an assistant's reasoning, before its answer."""

    model_config = _STRICT
    type: Literal["thinking"]
    thinking: str


ContentPart = Annotated[TextPart | ThinkingPart, Field(discriminator="type")]


class FunctionCall(BaseModel):
    """The function a tool call names, and its arguments (a JSON object, or its JSON text)."""

    model_config = _STRICT
    name: str
    arguments: str | dict[str, Any]

    @field_validator("arguments")
    @classmethod
    def _arguments_are_an_object(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"is not valid JSON ({exc.msg} at column {exc.colno}): {value!r}") from None
            if not isinstance(parsed, dict):
                raise ValueError(f"must hold a JSON object; got {value!r}")
        return value

    def arguments_text(self) -> str:
        """The arguments as JSON text: as written when given as text, else as templates write them."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class ToolCallSchema(BaseModel):
    """A tool call: OpenAI's `{"id", "type": "function", "function": {...}}`, the flat
    `{"name", "arguments", "id"}`, or a `ToolCall` (or any pydantic model of the same shape, such as
    tinker-cookbook's) from code."""

    model_config = _STRICT
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall

    @model_validator(mode="before")
    @classmethod
    def _accept_flat_and_objects(cls, value: Any) -> Any:
        if isinstance(value, BaseModel):
            value = value.model_dump()
        if isinstance(value, Mapping) and "function" not in value and "name" in value:
            flat = dict(value)
            function = {key: flat.pop(key) for key in ("name", "arguments") if key in flat}
            return {**flat, "function": function}
        return value

    def to_tool_call(self) -> ToolCall:
        return ToolCall.of(self.function.name, self.function.arguments_text(), id=self.id)


class MessageSchema(BaseModel):
    """The schema of one chat message (see the module docstring)."""

    model_config = _STRICT
    role: Role
    content: str | list[ContentPart] | None
    thinking: str | None = None
    tool_calls: list[ToolCallSchema] | None = None
    trainable: bool | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_message(self) -> Message:
        """The renderer's `Message`: parts joined, tool calls as `ToolCall`s, absent fields left out.

        Raises:
            ValueError: fields that do not belong to this role, or reasoning given twice.
        """
        content, thinking = self._text_and_thinking()
        message = Message(role=self.role, content=content)
        if thinking is not None:
            message["thinking"] = thinking
        if self.tool_calls is not None:
            message["tool_calls"] = [call.to_tool_call() for call in self.tool_calls]
        if self.trainable is not None:
            message["trainable"] = self.trainable
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            message["name"] = self.name
        self._check_role_fields(message)
        return message

    def _text_and_thinking(self) -> tuple[str, str | None]:
        if self.content is None:
            if not self.tool_calls:
                raise ValueError("'content' is null; only an assistant message with tool_calls may omit its text")
            return "", self.thinking
        if isinstance(self.content, str):
            return self.content, self.thinking
        texts: list[str] = []
        reasoning: list[str] = []
        for index, part in enumerate(self.content):
            if isinstance(part, ThinkingPart):
                if texts:
                    raise ValueError(f"'content[{index}]' is a thinking part after a text part; reasoning comes "
                                     "before the answer")
                reasoning.append(part.thinking)
            else:
                texts.append(part.text)
        if reasoning and self.thinking is not None:
            raise ValueError("the reasoning is given twice: in 'thinking' and as a thinking part of 'content'")
        return "".join(texts), "\n".join(reasoning) if reasoning else self.thinking

    def _check_role_fields(self, message: Message) -> None:
        allowed = {"tool_calls": "assistant", "thinking": "assistant", "tool_call_id": "tool", "name": "tool"}
        for field, role in allowed.items():
            if field in message and message["role"] != role:
                raise ValueError(f"'{field}' belongs on {role} messages; this is a {message['role']!r} message")
        if message["role"] == "assistant" and self.content is None and self.tool_calls == []:
            raise ValueError("'content' is null and 'tool_calls' is empty")


# -- checking and converting -----------------------------------------------------------------------


def parse_message(value: Any, where: str) -> Message:
    """Check `value` (a mapping from JSON, a dataset row or code) against `MessageSchema`.

    Args:
        where: where the message came from, for errors (e.g. "data.jsonl line 3, message 1").

    Raises:
        DataFormatError: "{where}: {problem}", the problem naming the field and what was expected.
    """
    if not isinstance(value, Mapping):
        raise DataFormatError(f"{where}: expected an object with 'role' and 'content'; got {_show(value)}.")
    try:
        return MessageSchema.model_validate(dict(value)).to_message()
    except ValidationError as exc:
        raise DataFormatError(f"{where}: {describe_validation_error(exc)}.") from None
    except ValueError as exc:
        raise DataFormatError(f"{where}: {exc}.") from None


def parse_messages(values: Any, where: str) -> list[Message]:
    """A list of messages; each error names `where` and the message's index ("..., message 2")."""
    if not isinstance(values, list):
        raise DataFormatError(f"{where}: expected a list of messages; got {_show(values)}.")
    return [parse_message(value, f"{where}, message {index}") for index, value in enumerate(values)]


_EXPECTED = {
    "role": f"one of {list(ROLES)}",
    "content": "a string",
    "thinking": "a string",
    "tool_calls": "a list of tool calls",
    "trainable": "true or false",
    "tool_call_id": "a string",
    "name": "a string",
    "id": "a string",
    "type": "'function'",
    "function": 'an object {"name", "arguments"}',
    "arguments": "a JSON object (or its JSON text)",
    "text": "a string",
}
_HINTS = {
    "content": ' (a list of {"type": "text", "text": ...} and {"type": "thinking", "thinking": ...} parts '
    "is also accepted)",
    "tool_calls": ' of the form {"id", "type": "function", "function": {"name", "arguments"}}',
}
_FIELD_NAMES = set(_EXPECTED)


def describe_validation_error(error: ValidationError) -> str:
    """A pydantic error of `MessageSchema` as one sentence per problem, each naming its field."""
    groups: dict[tuple[str | int, ...], list[Any]] = {}
    for item in error.errors():
        groups.setdefault(_field_path(item["loc"]), []).append(item)
    # A union reports every member; keep the most specific location (a part, not the whole list).
    paths = [p for p in groups if not any(q != p and q[: len(p)] == p for q in groups)]
    return "; ".join(_describe(path, groups[path]) for path in paths)


def _field_path(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """The location without pydantic's union-member labels (`content.str`, `content.list[...]`)."""
    path: list[str | int] = []
    for key in loc:
        if isinstance(key, int) or (key in _FIELD_NAMES and (not path or path[-1] != key)):
            path.append(key)
    return tuple(path)


def _describe(path: tuple[str | int, ...], items: list[Any]) -> str:
    name = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path).lstrip(".")
    first = items[0]
    field = next((key for key in reversed(path) if isinstance(key, str)), "")
    if first["type"] == "missing":
        return f"'{name}' is missing" + ("; a message needs a 'role' and a string 'content'" if len(path) == 1 else "")
    if first["type"] == "extra_forbidden":
        key = first["loc"][-1]
        allowed = list(MessageSchema.model_fields) if len(path) <= 1 else None
        where = f" in '{name}'" if name else ""
        return f"unknown field {key!r}{where}" + (f"; a message has only the fields {allowed}" if allowed else "")
    if path == ("role",):
        return f"unknown role {first['input']!r}; expected one of {list(ROLES)}"
    if first["type"] == "union_tag_invalid":
        return (f"'{name}' has the part type {first['ctx'].get('tag')!r}; expected 'text' or 'thinking' "
                "parts (no renderer here renders other kinds)")
    if first["type"] == "union_tag_not_found":
        return f"'{name}' needs a 'type' ('text' or 'thinking')"
    if first["type"] == "value_error":
        return f"'{name}' {first['msg'].removeprefix('Value error, ')}"
    expected = _EXPECTED.get(field, "another type")
    return f"'{name}' must be {expected}; got {_show(first['input'])}{_HINTS.get(name, '')}"


def _show(value: Any) -> str:
    kinds = {str: "string", bool: "boolean", int: "int", float: "number", type(None): "null", list: "list",
             dict: "object"}
    text = repr(value)
    return f"{kinds.get(type(value), type(value).__name__)} {text[:80] + '...' if len(text) > 80 else text}"
