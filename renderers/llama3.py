"""Llama-3 Instruct (`llama3`, `llama3_1`): `<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>`.

As the Llama-3 template does, the conversation starts with `<|begin_of_text|>` and each content is
stripped of surrounding whitespace. `llama3`, like the Tinker docs' renderer, omits the system turn
that the hub templates of Llama-3.1, 3.2 and 3.3 always write; `llama3_1` writes it as they do, even
without a system message: `Cutting Knowledge Date: December 2023\\nToday Date: {date_string}\\n\\n`
before the system prompt, after `Environment: ipython\\n` when tools are declared. Past that turn the
two are the same. (Rendered by transformers, 3.2's template dates the turn today; `llama3_1` writes
`date_string`, by default 3.1's fixed "26 Jul 2024", so that a run's tokens do not change by the day.)

Tools, in the JSON format of Llama-3.1's template (3.2 and 3.3 write the same):

- `create_conversation_prefix_with_tools` returns the system prompt (if any) and a user message that
  declares the tools (an instruction, then each tool's JSON indented by 4). As the template writes
  the tools and the first user message in one turn, that message shares its turn with the user
  message after it; the renderer knows it by its opening sentence, as the first message after the
  system prompt;
- a call is the whole assistant turn, `{"name": ..., "parameters": {...}}<|eot_id|>`. The format
  holds one call per message and no text beside it: two calls, or content beside a call, are refused
  (the template refuses the first and drops the content of the second);
- a `tool` message is an `ipython` turn whose content is written as a JSON string, untrimmed (the
  template's `tojson` of the text);
- `parse_response` reads a reply that opens with `{"name":` or `{"parameters":` as a call: it must be
  one JSON object with a string "name" and an object "parameters", or the reply is not ok and keeps
  its text. The format has no delimiters, so an answer that is such an object reads as a call (the
  reason tinker-cookbook's Llama-3 renderer declines tool calls); any other reply is content.

Built-in tools (`llama3_1` only; Llama-3.1's tokens `<|python_tag|>` and `<|eom_id|>`). The model
writes a call to a built-in tool after `<|python_tag|>` and ends it with `<|eom_id|>` ("a tool answers
next"), so `llama3_1` stops at either end token. `parse_response` reads a reply that opens with
`<|python_tag|>` as one call:

    <|python_tag|>brave_search.call(query="Nice weather")   -> brave_search {"query": "Nice weather"}
    <|python_tag|>{"name": "f", "parameters": {...}}        -> f, as a JSON call (some replies tag those)
    <|python_tag|>import math; print(math.pi)               -> ipython {"code": "import math; ..."}

A `.call(...)` takes only keyword arguments whose values are double-quoted text without a `"`, as the
template writes them. The code interpreter's calls are named `ipython` (Meta's reference code names
them `code_interpreter`), with the text after the tag, unchanged, as `code`. A reply that opens like a
`.call(` or a JSON call but is not a whole one, an empty code, or a `<|python_tag|>` that is not the
reply's first token parses to ok=False with the text kept.

Rendering follows the template's `builtin_tools` argument, a constructor option here
(`Llama31Renderer(tokenizer, builtin_tools=("brave_search", "wolfram_alpha"))`): it adds
`Tools: <names but code_interpreter>` to the system turn, writes calls to those tools as
`<|python_tag|>name.call(key="value", ...)` and ends every call turn with `<|eom_id|>`; the tools it
names are not declared again in the user turn. A call named `ipython` is written as Meta's model
writes it, `<|python_tag|>` + its code + `<|eom_id|>`, with or without the option: the template has no
way to write one (it writes `code_interpreter.call(code="...")`). A JSON call read after a tag renders
back without the tag.

Not rendered: the template's `tools_in_user_message=False` (tools in the system turn). No thinking.
"""

import json
import re
from collections.abc import Sequence

from recipes_lib.exceptions import DataFormatError, RendererError
from recipes_lib.tokenizers import Tokenizer
from renderers.base import (
    Message,
    Renderer,
    Span,
    ToolCall,
    ToolSpec,
    openai_tool,
    split_at_stop_token,
    tool_call_from_json,
)

BEGIN_OF_TEXT = "<|begin_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
END_OF_TURN = "<|eot_id|>"
END_OF_MESSAGE = "<|eom_id|>"  # Llama-3.1: the end of a built-in tool call (a tool answers next)
PYTHON_TAG = "<|python_tag|>"  # Llama-3.1: opens a built-in tool call
CODE_INTERPRETER = "ipython"  # the name of a code-interpreter call, `<|python_tag|>` + code
CODE_INTERPRETER_BUILTIN = "code_interpreter"  # the template's name for it in `builtin_tools`

TOOLS_INTRO = (
    "Given the following functions, please respond with a JSON for a function call with its proper "
    "arguments that best answers the given prompt.\n\n"
)
TOOLS_FORMAT = (
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
    'value}.Do not use variables.\n\n'
)
TOOLS_ENVIRONMENT = "Environment: ipython\n"
KNOWLEDGE_CUTOFF = "Cutting Knowledge Date: December 2023\n"
DEFAULT_DATE = "26 Jul 2024"
_CALL_START = re.compile(r'\s*\{\s*"(name|parameters)"\s*:')
_BUILTIN_CALL_START = re.compile(r"\s*[A-Za-z_]\w*\.call\(")
_BUILTIN_CALL = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\.call\((?P<arguments>.*)\)\s*", re.DOTALL)
_BUILTIN_ARGUMENT = r'\s*(\w+)\s*=\s*"([^"]*)"\s*'
_BUILTIN_ARGUMENTS = re.compile(rf"(?:{_BUILTIN_ARGUMENT}(?:,{_BUILTIN_ARGUMENT})*)?", re.DOTALL)


def _header(role: str) -> str:
    return f"{START_HEADER}{role}{END_HEADER}\n\n"


class Llama3Renderer(Renderer):
    """Llama-3, -3.1, -3.2 and -3.3 Instruct models, without the hub templates' dated system turn."""

    name = "llama3"
    supports_tool_calls = True

    def __init__(self, tokenizer: Tokenizer, model_name: str | None = None) -> None:
        super().__init__(tokenizer, model_name)
        for special in (BEGIN_OF_TEXT, START_HEADER, END_HEADER):
            self._single_token_id(special)
        self._end_of_turn = self._single_token_id(END_OF_TURN)

    @property
    def has_extension_property(self) -> bool:
        return True

    def render_spans(self, messages: Sequence[Message]) -> list[Span]:
        declaration = _declaration_index(messages)
        system_spans, index = self._system_spans(messages, tools_declared=declaration is not None)
        spans = [Span(BEGIN_OF_TEXT), *system_spans]
        while index < len(messages):
            if index == declaration and index + 1 < len(messages) and messages[index + 1]["role"] == "user":
                spans += [
                    Span(_header("user"), index),
                    Span(messages[index]["content"], index, is_output=True),
                    Span(messages[index + 1]["content"].strip() + END_OF_TURN, index + 1, is_output=True),
                ]
                index += 2
            else:
                spans += self._turn_spans(index, messages[index])
                index += 1
        return spans

    def _system_spans(self, messages: Sequence[Message], tools_declared: bool) -> tuple[list[Span], int]:
        """The spans written before the messages' own turns, and the first message not yet written."""
        return [], 0

    def _turn_spans(self, index: int, message: Message) -> list[Span]:
        """One turn: header, then output (content, a call or a quoted tool result) and its end token."""
        if message["role"] == "tool":
            result = json.dumps(message["content"], ensure_ascii=False)
            return [Span(_header("ipython"), index), Span(result + END_OF_TURN, index, is_output=True)]
        if message.get("tool_calls"):
            call = _only_call(index, message)
            return [Span(_header("assistant"), index), Span(self._call_output(index, call), index, is_output=True)]
        return [Span(_header(message["role"]), index), Span(message["content"].strip() + END_OF_TURN, index, is_output=True)]

    def _call_output(self, index: int, call: ToolCall) -> str:
        """The output of the turn of message `index`, which holds `call`: the call's text and end token."""
        return _json_call_text(call) + END_OF_TURN

    def generation_suffix(self, role: str) -> str:
        return _header(role)

    def get_stop_sequences(self) -> list[int]:
        return [self._end_of_turn]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, stopped = split_at_stop_token(tokens, self._end_of_turn)
        message = Message(role="assistant", content=self.decode(body))
        if not stopped:
            return message, False
        return parse_json_tool_call(message)

    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """The system prompt (if any), then the user message declaring `tools` (see the module docstring)."""
        system = [Message(role="system", content=system_prompt)] if system_prompt else []
        return [*system, Message(role="user", content=tools_user_prompt(tools))]


class Llama31Renderer(Llama3Renderer):
    """Llama-3.1, -3.2 and -3.3 Instruct models, with the hub templates' dated system turn and
    built-in tool calls (`<|python_tag|>`, `<|eom_id|>`; see the module docstring).

    Args:
        date_string: the template's `date_string`, the "Today Date" of the system turn.
        builtin_tools: the template's `builtin_tools` (e.g. `("brave_search", "wolfram_alpha")`);
            empty: the template's default, none.
    """

    name = "llama3_1"

    def __init__(self, tokenizer: Tokenizer, model_name: str | None = None, date_string: str = DEFAULT_DATE,
                 builtin_tools: Sequence[str] = ()) -> None:
        super().__init__(tokenizer, model_name)
        self.date_string = date_string
        self.builtin_tools = tuple(builtin_tools)
        self._end_of_message = self._single_token_id(END_OF_MESSAGE)
        self._single_token_id(PYTHON_TAG)

    def _constructor_kwargs(self) -> dict[str, object]:
        return {"date_string": self.date_string, "builtin_tools": self.builtin_tools}

    def get_stop_sequences(self) -> list[int]:
        return [self._end_of_turn, self._end_of_message]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, stopped = _split_at_first_stop(tokens, self.get_stop_sequences())
        message = Message(role="assistant", content=self.decode(body))
        if not stopped:
            return message, False
        if PYTHON_TAG in message["content"]:
            return parse_python_tag_call(message)
        return parse_json_tool_call(message)

    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """As `llama3`'s, without the tools of `builtin_tools`: the system turn names those."""
        declared = [tool for tool in tools if tool["name"] not in self.builtin_tools]
        if tools and not declared:
            return [Message(role="system", content=system_prompt)] if system_prompt else []
        return super().create_conversation_prefix_with_tools(declared, system_prompt)

    def _system_spans(self, messages: Sequence[Message], tools_declared: bool) -> tuple[list[Span], int]:
        """The system turn: preamble (template text), then the system message's content, if any."""
        environment = TOOLS_ENVIRONMENT if tools_declared or self.builtin_tools else ""
        if self.builtin_tools:
            named = [tool for tool in self.builtin_tools if tool != CODE_INTERPRETER_BUILTIN]
            environment += "Tools: " + ", ".join(named) + "\n\n"
        header = _header("system") + environment + KNOWLEDGE_CUTOFF + f"Today Date: {self.date_string}\n\n"
        if messages and messages[0]["role"] == "system":
            return [Span(header, 0), Span(messages[0]["content"].strip() + END_OF_TURN, 0, is_output=True)], 1
        return [Span(header + END_OF_TURN)], 0

    def _call_output(self, index: int, call: ToolCall) -> str:
        """A built-in or code-interpreter call after `<|python_tag|>`, ending with `<|eom_id|>`; any
        other call as JSON, ending with `<|eom_id|>` when built-in tools are on, as the template does."""
        if call.function.name == CODE_INTERPRETER:
            return PYTHON_TAG + _code_of(index, call) + END_OF_MESSAGE
        if call.function.name in self.builtin_tools:
            return PYTHON_TAG + _builtin_call_text(index, call) + END_OF_MESSAGE
        return _json_call_text(call) + (END_OF_MESSAGE if self.builtin_tools else END_OF_TURN)


def tools_user_prompt(tools: Sequence[ToolSpec]) -> str:
    """The text that declares `tools` in the first user turn, as Llama-3.1's template writes it."""
    declared = "".join(json.dumps(openai_tool(tool), indent=4, ensure_ascii=False) + "\n\n" for tool in tools)
    return TOOLS_INTRO + TOOLS_FORMAT + declared


def parse_json_tool_call(message: Message) -> tuple[Message, bool]:
    """`message` as a call when its content opens like one (see the module docstring).

    Returns:
        (message, ok): ok is False when the content opens like a call but is not exactly one
        `{"name": str, "parameters": object}` JSON object; the content is then kept as it is.
    """
    if not _CALL_START.match(message["content"]):
        return message, True
    return _as_call(message, tool_call_from_json(message["content"], "parameters"))


def parse_python_tag_call(message: Message) -> tuple[Message, bool]:
    """`message`, whose content holds `<|python_tag|>`, as the built-in, JSON or code-interpreter call
    written after the tag (see the module docstring).

    Returns:
        (message, ok): ok is False, with the content kept, when the tag is not the content's start or
        comes twice, the text after it opens like a call but is not one, or there is no code.
    """
    text = message["content"]
    code = text.removeprefix(PYTHON_TAG)
    if code == text or PYTHON_TAG in code:
        return message, False
    if _CALL_START.match(code):
        return _as_call(message, tool_call_from_json(code, "parameters"))
    if _BUILTIN_CALL_START.match(code):
        return _as_call(message, _builtin_call(code))
    return _as_call(message, ToolCall.of(CODE_INTERPRETER, {"code": code}) if code.strip() else None)


def _as_call(message: Message, call: ToolCall | None) -> tuple[Message, bool]:
    """A call-only message holding `call`; `message`, not ok, when there is none."""
    if call is None:
        return message, False
    return Message(role="assistant", content="", tool_calls=[call]), True


def _builtin_call(text: str) -> ToolCall | None:
    """The call `name.call(key="value", ...)` in `text`; None when `text` is not exactly one."""
    match = _BUILTIN_CALL.fullmatch(text)
    if match is None or not _BUILTIN_ARGUMENTS.fullmatch(match["arguments"]):
        return None
    pairs = re.findall(_BUILTIN_ARGUMENT, match["arguments"])
    arguments = dict(pairs)
    if len(arguments) != len(pairs):  # a keyword given twice
        return None
    return ToolCall.of(match["name"], arguments)


def _split_at_first_stop(tokens: Sequence[int], stops: Sequence[int]) -> tuple[list[int], bool]:
    """The tokens before the first of `stops`, and whether there was one."""
    tokens = list(tokens)
    for position, token in enumerate(tokens):
        if token in stops:
            return tokens[:position], True
    return tokens, False


def _declaration_index(messages: Sequence[Message]) -> int | None:
    """Index of the tool-declaring user message (first after an optional system message), or None."""
    index = 1 if messages and messages[0]["role"] == "system" else 0
    if index < len(messages) and messages[index]["role"] == "user":
        if messages[index]["content"].startswith(TOOLS_INTRO):
            return index
    return None


def _only_call(index: int, message: Message) -> ToolCall:
    """The one call of message `index`, which has no content beside it (the format holds no more)."""
    calls = message["tool_calls"]
    if len(calls) != 1:
        raise RendererError(
            f"Message {index} has {len(calls)} tool calls; Llama-3's format writes one call per assistant "
            "message. Give each call its own assistant message, followed by its tool result."
        )
    if message["content"].strip():
        raise RendererError(
            f"Message {index} has content beside its tool call; Llama-3's format writes a call turn as the "
            "call's JSON alone (its template drops the content). Drop the content or give it its own message."
        )
    [call] = calls
    if not isinstance(call, ToolCall):
        raise DataFormatError(f"render_spans reads tool calls as renderers.ToolCall objects; got {call!r}. "
                              "build_generation_prompt and build_supervised_example take any form.")
    return call


def _json_call_text(call: ToolCall) -> str:
    """`{"name": ..., "parameters": ...}`, the arguments as written."""
    return f'{{"name": "{call.function.name}", "parameters": {call.function.arguments}}}'


def _builtin_call_text(index: int, call: ToolCall) -> str:
    """`name.call(key="value", ...)`, as the template writes a built-in call: text values in quotes, unescaped."""
    arguments = _arguments_of(index, call)
    if not all(isinstance(value, str) and '"' not in value for value in arguments.values()):
        raise RendererError(
            f"Message {index} calls the built-in tool {call.function.name!r} with {call.function.arguments}; "
            """a built-in call writes each argument as key="value", so every value must be text without a '"'."""
        )
    written = ", ".join(f'{key}="{value}"' for key, value in arguments.items())
    return f"{call.function.name}.call({written})"


def _code_of(index: int, call: ToolCall) -> str:
    """The code of a code-interpreter call, whose arguments must be `{"code": <text>}`."""
    arguments = _arguments_of(index, call)
    if list(arguments) != ["code"] or not isinstance(arguments["code"], str):
        raise RendererError(f"Message {index} calls {CODE_INTERPRETER!r}, the code interpreter, with "
                            f'{call.function.arguments}; its arguments are {{"code": <the code, as text>}}.')
    return arguments["code"]


def _arguments_of(index: int, call: ToolCall) -> dict[str, object]:
    """A call's arguments as a mapping, to write them in a format other than JSON."""
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise RendererError(f"Message {index} calls {call.function.name!r} with {call.function.arguments!r}; "
                            "the arguments must be the JSON text of an object.")
    return arguments
