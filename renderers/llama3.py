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

Not rendered: built-in tools (`<|python_tag|>`, `<|eom_id|>`) and the template's
`tools_in_user_message=False` (tools in the system turn). No thinking.
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
                spans += _message_spans(index, messages[index])
                index += 1
        return spans

    def _system_spans(self, messages: Sequence[Message], tools_declared: bool) -> tuple[list[Span], int]:
        """The spans written before the messages' own turns, and the first message not yet written."""
        return [], 0

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
    """Llama-3.1, -3.2 and -3.3 Instruct models, with the hub templates' dated system turn."""

    name = "llama3_1"

    def __init__(self, tokenizer: Tokenizer, model_name: str | None = None, date_string: str = DEFAULT_DATE) -> None:
        super().__init__(tokenizer, model_name)
        self.date_string = date_string

    def _constructor_kwargs(self) -> dict[str, object]:
        return {"date_string": self.date_string}

    def _system_spans(self, messages: Sequence[Message], tools_declared: bool) -> tuple[list[Span], int]:
        """The system turn: preamble (template text), then the system message's content, if any."""
        environment = TOOLS_ENVIRONMENT if tools_declared else ""
        header = _header("system") + environment + KNOWLEDGE_CUTOFF + f"Today Date: {self.date_string}\n\n"
        if messages and messages[0]["role"] == "system":
            return [Span(header, 0), Span(messages[0]["content"].strip() + END_OF_TURN, 0, is_output=True)], 1
        return [Span(header + END_OF_TURN)], 0


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
    call = tool_call_from_json(message["content"], "parameters")
    if call is None:
        return message, False
    return Message(role="assistant", content="", tool_calls=[call]), True


def _declaration_index(messages: Sequence[Message]) -> int | None:
    """Index of the tool-declaring user message (first after an optional system message), or None."""
    index = 1 if messages and messages[0]["role"] == "system" else 0
    if index < len(messages) and messages[index]["role"] == "user":
        if messages[index]["content"].startswith(TOOLS_INTRO):
            return index
    return None


def _message_spans(index: int, message: Message) -> list[Span]:
    """One turn: header, then output (content, a call's JSON or a quoted tool result) and `<|eot_id|>`."""
    if message["role"] == "tool":
        result = json.dumps(message["content"], ensure_ascii=False)
        return [Span(_header("ipython"), index), Span(result + END_OF_TURN, index, is_output=True)]
    if message.get("tool_calls"):
        return [Span(_header("assistant"), index), Span(_call_text(index, message) + END_OF_TURN, index, is_output=True)]
    return [Span(_header(message["role"]), index), Span(message["content"].strip() + END_OF_TURN, index, is_output=True)]


def _call_text(index: int, message: Message) -> str:
    """`{"name": ..., "parameters": ...}` for the message's one call, arguments as written."""
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
    return f'{{"name": "{call.function.name}", "parameters": {call.function.arguments}}}'
