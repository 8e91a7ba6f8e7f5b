"""Qwen3 renderers: `qwen3` (thinking on), `qwen3_disable_thinking` and `qwen3_instruct` (2507 Instruct).

They follow Qwen3's chat template (ChatML turns) case by case:

- an assistant turn after the last user query is framed `<think>\\n{reasoning}\\n</think>\\n\\n{content}`
  when it is the last message or has reasoning (an empty block for the last one without); earlier
  assistant turns lose their reasoning, unless `strip_thinking_from_history=False`, which frames every
  assistant turn so that multi-turn prompts extend each other (the extension property);
- reasoning comes from a message's `thinking`, else from a `<think>...</think>` inside its content;
- tool calls follow the content as `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`;
- `tool` messages become `<tool_response>` blocks in a user turn, consecutive ones sharing the turn;
- tools are declared in the system prompt (`create_conversation_prefix_with_tools`).

The tool-call, tool-response and declaration text is the Hermes-style format of `renderers.chatml`.

`qwen3_disable_thinking` opens the answer with an empty think block in the generation prompt (the
template's `enable_thinking=False`), so that block is prompt, not trained, in supervised examples.
`qwen3_instruct` never writes `<think>` (the 2507 Instruct models do not think).
"""

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import tinker

from recipes_lib.exceptions import RendererError
from recipes_lib.tokenizers import Tokenizer
from renderers.base import (
    Message,
    Renderer,
    Span,
    ToolSpec,
    TrainOnWhat,
    as_train_on_what,
    check_trainable_flags,
    split_at_stop_token,
    trained_message_indices,
)
from renderers.chatml import (
    IM_END,
    IM_START,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    chatml_turn,
    parse_tool_call_blocks,
    tool_calls_text,
    tool_response_spans,
    tools_system_prompt,
)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
EMPTY_THINK_BLOCK = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"


class Qwen3Renderer(Renderer):
    """Qwen3 hybrid models with thinking on (the template's default)."""

    name = "qwen3"
    supports_tool_calls = True
    supports_thinking = True
    frames_thinking: ClassVar[bool] = True

    def __init__(
        self, tokenizer: Tokenizer, model_name: str | None = None, strip_thinking_from_history: bool = True
    ) -> None:
        super().__init__(tokenizer, model_name)
        self.strip_thinking_from_history = strip_thinking_from_history
        for special in (IM_START, TOOL_CALL_OPEN, TOOL_CALL_CLOSE, THINK_OPEN, THINK_CLOSE):
            self._single_token_id(special)
        self._end_of_turn = self._single_token_id(IM_END)

    @property
    def has_extension_property(self) -> bool:
        return not self.strip_thinking_from_history

    def _constructor_kwargs(self) -> dict[str, object]:
        return {"strip_thinking_from_history": self.strip_thinking_from_history}

    def render_spans(self, messages: Sequence[Message]) -> list[Span]:
        last_query = _last_query_index(messages)
        spans: list[Span] = []
        for index, message in enumerate(messages):
            role = message["role"]
            if role in ("user", "system"):
                spans += chatml_turn(index, role, message["content"])
            elif role == "assistant":
                spans += self._assistant_spans(messages, index, last_query)
            elif role == "tool":
                spans += tool_response_spans(messages, index)
            else:
                raise RendererError(
                    f"Message {index} has role {role!r}; Qwen3 renders system, user, assistant, tool."
                )
        return spans

    def _assistant_spans(self, messages: Sequence[Message], index: int, last_query: int) -> list[Span]:
        """Header, optional think block, content + tool calls + `<|im_end|>`, separator."""
        message = messages[index]
        content, reasoning = _split_reasoning(message) if self.frames_thinking else (message["content"], "")
        think, body = "", content
        if self._frames(index, last_query, index == len(messages) - 1, reasoning):
            think = f"{THINK_OPEN}\n" + reasoning.strip("\n") + f"\n{THINK_CLOSE}\n\n"
            body = content.lstrip("\n")
        body += tool_calls_text(message.get("tool_calls", []), content) + IM_END
        return [
            Span(f"{IM_START}assistant\n", index),
            *self._think_spans(think, index),
            Span(body, index, is_output=True),
            Span("\n", index),
        ]

    def _frames(self, index: int, last_query: int, is_last: bool, reasoning: str) -> bool:
        """Whether this assistant turn gets a `<think>` block."""
        if not self.frames_thinking:
            return False
        if not self.strip_thinking_from_history:
            return True
        return index > last_query and (is_last or bool(reasoning))

    def _think_spans(self, think: str, index: int) -> list[Span]:
        """The think block is part of the turn the model produces."""
        return [Span(think, index, is_output=True)] if think else []

    def generation_suffix(self, role: str) -> str:
        return f"{IM_START}{role}\n"

    def get_stop_sequences(self) -> list[int]:
        return [self._end_of_turn]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, stopped = split_at_stop_token(tokens, self._end_of_turn)
        text = self.decode(body)
        if not stopped:
            return Message(role="assistant", content=text), False
        return parse_assistant_text(text, parse_thinking=self.frames_thinking)

    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """A system message declaring `tools` (after `system_prompt`, if any), as the template writes it."""
        return [Message(role="system", content=tools_system_prompt(tools, system_prompt))]


class Qwen3DisableThinkingRenderer(Qwen3Renderer):
    """Qwen3 hybrid models with thinking off (`enable_thinking=False`)."""

    name = "qwen3_disable_thinking"

    def generation_suffix(self, role: str) -> str:
        return super().generation_suffix(role) + (EMPTY_THINK_BLOCK if role == "assistant" else "")

    def _think_spans(self, think: str, index: int) -> list[Span]:
        """The generation prompt supplies the empty block, so it is prompt here too."""
        return [Span(think, index, is_output=think != EMPTY_THINK_BLOCK)] if think else []

    def build_supervised_example(
        self, messages: Sequence[Message], train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    ) -> tuple[tinker.types.ModelInput, np.ndarray]:
        """As the base method, but refuses to train on a turn that reasoned: this renderer's prompts
        make the model answer without thinking, so such a turn could never be sampled."""
        self._refuse_trained_reasoning(messages, as_train_on_what(train_on_what))
        return super().build_supervised_example(messages, train_on_what)

    def _refuse_trained_reasoning(self, messages: Sequence[Message], train_on_what: TrainOnWhat) -> None:
        if train_on_what == TrainOnWhat.ALL_TOKENS:  # trains prompt text too, on purpose
            return
        messages = self._checked(messages)
        check_trainable_flags(messages, train_on_what)
        last_query = _last_query_index(messages)
        for index in sorted(trained_message_indices(messages, train_on_what)):
            reasoning = _split_reasoning(messages[index])[1]
            framed = self._frames(index, last_query, index == len(messages) - 1, reasoning)
            if messages[index]["role"] == "assistant" and reasoning and framed:
                raise RendererError(
                    f"Message {index} has reasoning, but {self.name!r} generates without thinking; "
                    "train it with the 'qwen3' renderer or drop the reasoning."
                )


class Qwen3InstructRenderer(Qwen3Renderer):
    """Qwen3-2507 Instruct models: the Qwen3 format without any `<think>` block."""

    name = "qwen3_instruct"
    supports_thinking = False
    frames_thinking = False

    @property
    def has_extension_property(self) -> bool:
        return True


def _last_query_index(messages: Sequence[Message]) -> int:
    """Index of the last user message that is not a wrapped tool response (else the last index)."""
    for index in range(len(messages) - 1, -1, -1):
        content = messages[index]["content"]
        is_tool_response = content.startswith(TOOL_RESPONSE_OPEN) and content.endswith(TOOL_RESPONSE_CLOSE)
        if messages[index]["role"] == "user" and not is_tool_response:
            return index
    return len(messages) - 1


def _split_reasoning(message: Message) -> tuple[str, str]:
    """(content, reasoning): `thinking` if given, else the template's split of `<think>` in content."""
    if "thinking" in message:
        return message["content"], message["thinking"]
    content = message["content"]
    if THINK_CLOSE not in content:
        return content, ""
    pieces = content.split(THINK_CLOSE)
    return pieces[-1].lstrip("\n"), pieces[0].rstrip("\n").split(THINK_OPEN)[-1].lstrip("\n")


def parse_assistant_text(text: str, parse_thinking: bool = True) -> tuple[Message, bool]:
    """Split a finished assistant turn into thinking, content and tool calls.

    Returns:
        (message, ok): ok is False when a `<tool_call>` block is unterminated, not JSON of the
        form {"name": str, "arguments": object}, or followed by other text; the content then
        keeps the raw text of the calls.
    """
    message = Message(role="assistant", content=text)
    if parse_thinking and THINK_CLOSE in text:
        pieces = text.split(THINK_CLOSE)
        reasoning = pieces[0].split(THINK_OPEN)[-1].strip("\n")
        message["content"] = pieces[-1].lstrip("\n")
        if reasoning:
            message["thinking"] = reasoning
    return parse_tool_call_blocks(message)
