"""ChatML (`chatml`) and SmolLM2 (`smollm2`): `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message,
and the Hermes-style tool format that ChatML models write (shared with `renderers.qwen3`).

`smollm2` is SmolLM2-135M-Instruct's own template: when the first message is not a system message it
inserts the system prompt "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
(as template text, so it is trained only by TrainOnWhat.ALL_TOKENS). Neither renders thinking.

Tools. SmolLM2's template has no tool format, so the one here is our choice: Qwen2.5's layout of the
Hermes format (`qwen2.5.jinja`, which Qwen3 keeps), so that `chatml` equals that template token for
token once a system prompt is given:

- `create_conversation_prefix_with_tools` returns a system message: the system prompt (for `smollm2`,
  its default one when none is given), a blank line, then `# Tools` with one JSON line per tool
  inside `<tools></tools>` and the instruction to answer in `<tool_call>` blocks;
- an assistant turn writes its content, then each call as
  `\\n<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` (no newline before the first call
  when the content is empty), then `<|im_end|>`;
- a `tool` message becomes `\\n<tool_response>\\n{content}\\n</tool_response>` inside a user turn,
  consecutive ones sharing the turn.

`parse_response` reads `<tool_call>` blocks at the end of a reply back into `tool_calls`; a block
that is unterminated, not `{"name": str, "arguments": object}` JSON, or followed by other text makes
the reply not ok, with the raw text kept as content.
"""

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from recipes_lib.exceptions import DataFormatError
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

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SMOLLM2_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call>'
)
_TOOL_CALL_BLOCK = re.compile(f"{TOOL_CALL_OPEN}(.*?){TOOL_CALL_CLOSE}", re.DOTALL)


def chatml_turn(index: int, role: str, output: str) -> list[Span]:
    """One ChatML turn: header `<|im_start|>{role}\\n`, output `{output}<|im_end|>`, separator `\\n`."""
    return [
        Span(f"{IM_START}{role}\n", index),
        Span(output + IM_END, index, is_output=True),
        Span("\n", index),
    ]


class ChatMLRenderer(Renderer):
    """Plain ChatML, for any tokenizer with `<|im_start|>` and `<|im_end|>` tokens."""

    name = "chatml"
    supports_tool_calls = True
    default_system_prompt: ClassVar[str | None] = None

    def __init__(self, tokenizer: Tokenizer, model_name: str | None = None) -> None:
        super().__init__(tokenizer, model_name)
        self._single_token_id(IM_START)
        self._end_of_turn = self._single_token_id(IM_END)

    @property
    def has_extension_property(self) -> bool:
        return True

    def render_spans(self, messages: Sequence[Message]) -> list[Span]:
        spans = []
        if self.default_system_prompt is not None and messages and messages[0]["role"] != "system":
            spans.append(Span(f"{IM_START}system\n{self.default_system_prompt}{IM_END}\n"))
        for index, message in enumerate(messages):
            if message["role"] == "tool":
                spans += tool_response_spans(messages, index)
            else:
                content = message["content"]
                output = content + tool_calls_text(message.get("tool_calls", []), content)
                spans += chatml_turn(index, message["role"], output)
        return spans

    def generation_suffix(self, role: str) -> str:
        return f"{IM_START}{role}\n"

    def get_stop_sequences(self) -> list[int]:
        return [self._end_of_turn]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, stopped = split_at_stop_token(tokens, self._end_of_turn)
        message = Message(role="assistant", content=self.decode(body))
        if not stopped:
            return message, False
        return parse_tool_call_blocks(message)

    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """A system message declaring `tools` after `system_prompt` (else the default system prompt)."""
        prompt = system_prompt or self.default_system_prompt or ""
        return [Message(role="system", content=tools_system_prompt(tools, prompt))]


class SmolLM2Renderer(ChatMLRenderer):
    """SmolLM2-Instruct: ChatML with the model's default system prompt when none is given."""

    name = "smollm2"
    default_system_prompt = SMOLLM2_SYSTEM_PROMPT


# --- the Hermes-style tool format ------------------------------------------------------------------


def tools_system_prompt(tools: Sequence[ToolSpec | Mapping[str, Any]], system_prompt: str = "") -> str:
    """The system-prompt text that declares `tools` (ToolSpecs, or OpenAI `{"type": "function", ...}`)."""
    declared = "".join("\n" + json.dumps(openai_tool(tool), ensure_ascii=False) for tool in tools)
    prefix = system_prompt + "\n\n" if system_prompt else ""
    return prefix + TOOLS_HEADER + declared + TOOLS_FOOTER


def tool_calls_text(tool_calls: Sequence[ToolCall], content: str) -> str:
    """The `<tool_call>` blocks after a content, newline-separated as the templates write them."""
    text = ""
    for position, call in enumerate(tool_calls):
        if not isinstance(call, ToolCall):
            raise DataFormatError(f"render_spans reads tool calls as renderers.ToolCall objects; got {call!r}. "
                                  "build_generation_prompt and build_supervised_example take any form.")
        if position > 0 or content:
            text += "\n"
        text += (
            f'{TOOL_CALL_OPEN}\n{{"name": "{call.function.name}", "arguments": {call.function.arguments}}}\n{TOOL_CALL_CLOSE}'
        )
    return text


def tool_response_spans(messages: Sequence[Message], index: int) -> list[Span]:
    """A `<tool_response>` block; the first of a run opens a user turn and the last closes it."""
    opens = index == 0 or messages[index - 1]["role"] != "tool"
    closes = index == len(messages) - 1 or messages[index + 1]["role"] != "tool"
    output = f"\n{TOOL_RESPONSE_OPEN}\n{messages[index]['content']}\n{TOOL_RESPONSE_CLOSE}"
    spans = [Span(f"{IM_START}user", index)] if opens else []
    spans.append(Span(output + (IM_END if closes else ""), index, is_output=True))
    return spans + ([Span("\n", index)] if closes else [])


def parse_tool_call_blocks(message: Message) -> tuple[Message, bool]:
    """`message` with the `<tool_call>` blocks that end its content moved into `tool_calls`.

    Returns:
        (message, ok): ok is False when a block is unterminated, not JSON of the form
        {"name": str, "arguments": object}, or followed by other text; the content then keeps the
        raw text of the calls. A content without `<tool_call>` is returned as it is, ok.
    """
    content = message["content"]
    if TOOL_CALL_OPEN not in content and TOOL_CALL_CLOSE not in content:
        return message, True
    parsed = parse_tool_calls(content)
    if parsed is None:
        return message, False
    message["content"], message["tool_calls"] = parsed
    return message, True


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]] | None:
    """(content before the calls, calls) from text ending in `<tool_call>` blocks; None if malformed."""
    blocks = list(_TOOL_CALL_BLOCK.finditer(text))
    if not blocks or text.count(TOOL_CALL_OPEN) != len(blocks) or text.count(TOOL_CALL_CLOSE) != len(blocks):
        return None
    gaps = [text[a.end() : b.start()] for a, b in zip(blocks, blocks[1:], strict=False)] + [
        text[blocks[-1].end() :]
    ]
    calls = [tool_call_from_json(block.group(1), "arguments") for block in blocks]
    if any(gap.strip() for gap in gaps) or any(call is None for call in calls):
        return None
    prefix = text[: blocks[0].start()]
    return prefix.removesuffix("\n"), [call for call in calls if call is not None]
