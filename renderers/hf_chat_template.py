"""`hf_chat_template`: any model's own Jinja chat template, through `tokenizer.apply_chat_template`.

For a model family without a hand-written renderer. The conversation is rendered by the template to
text and tokenized in one call, as `apply_chat_template(..., tokenize=True)` does, so the tokens
are the template's by construction.

Which tokens belong to which message is found by rendering prefixes of the conversation with the
same template, never by parsing the template:

- a message's text ends where the rendering of the conversation up to and including it ends; its
  output ends with the last end-of-turn token in that stretch (a separator after it, such as a
  newline, is weight 0, as in the hand-written renderers);
- an assistant message's output starts where its generation prompt (the messages before it with
  `add_generation_prompt=True`) ends, so training and sampling see the same prompt tokens;
- any other message's output starts at its content: where two renderings with the content replaced
  by two different letters first differ (a token that straddles that point is trained, as in
  `Renderer`).

Each prefix rendering must be a token prefix of the whole conversation's tokens. When it is not
(the template renders a message differently once later messages follow, e.g. Qwen3 drops an
earlier turn's reasoning and empty think block; or the text merges into one token across the
boundary, e.g. an assistant content that starts with a newline), `build_supervised_example` raises
a RendererError naming the message instead of guessing. Only the messages `train_on_what` selects
are located, so `last_assistant_message` can work where `all_assistant_messages` is refused.

At construction the template is probed once with a short conversation for:
- the stop token: the first special token the template writes after an assistant content;
- reasoning: `thinking` is passed as whichever message field the template renders
  (`reasoning_content` or `thinking`); a template that renders neither refuses messages with it;
- tool calls: passed in the OpenAI form (`{"type": "function", "function": {"name", "arguments"}}`)
  when the template renders them, refused otherwise.

Tools. `create_conversation_prefix_with_tools` renders the template with `tools=` (the OpenAI form)
and returns the declaration it writes as one system message: the text that stands where a system
prompt's content would, found by rendering with a probe system prompt and checked by rendering that
message back without `tools=` (Qwen2.5's, Qwen3's and other Hermes-style templates declare tools
this way). A template that writes tools elsewhere (Llama-3.1's writes them in the first user turn
and changes its system turn) or not at all is refused with a RendererError. Calls in a reply are
read by the format the user names with `tool_call_format`, since their syntax is template-specific:

    hermes        `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks ending the reply
    llama3_json   the whole reply as `{"name": ..., "parameters": {...}}` (Llama-3.1's format)
    none          no parsing: the text before the stop token is the content (the default)

`supports_tool_calls` is True when the template renders calls and declares tools, and a format
other than `none` is chosen. `parse_response` does not parse reasoning. Multi-turn prompts are not
assumed to extend each other (`has_extension_property` is False).
"""

import bisect
import json
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any

import jinja2
import numpy as np
import tinker

from recipes_lib.exceptions import ConfigurationError, DataFormatError, RendererError
from recipes_lib.tokenizers import Tokenizer
from renderers.base import (
    Message,
    Renderer,
    Span,
    ToolCall,
    ToolSpec,
    TrainOnWhat,
    as_train_on_what,
    check_trainable_flags,
    checked_messages,
    openai_tool,
    split_at_stop_token,
    trained_message_indices,
)
from renderers.chatml import parse_tool_call_blocks
from renderers.llama3 import parse_json_tool_call

HFMessage = dict[str, Any]

# Probe strings: single words, so templates that trim or strip contents keep them whole.
_PROBE_USER = "Ping"
_PROBE_ANSWER = "Pong"
_PROBE_REASONING = "Reasoning7331"
_PROBE_TOOL = "probe_tool_7331"
_PROBE_SYSTEM = "System7331"
# Two contents that differ in their first character: where their renderings diverge, content starts.
_CONTENT_PROBES = ("A", "B")
_REASONING_FIELDS = ("reasoning_content", "thinking")


class ToolCallFormat(StrEnum):
    """How `parse_response` reads tool calls in a reply (see the module docstring)."""

    HERMES = "hermes"
    LLAMA3_JSON = "llama3_json"
    NONE = "none"


_CALL_PARSERS: dict[ToolCallFormat, Callable[[Message], tuple[Message, bool]]] = {
    ToolCallFormat.HERMES: parse_tool_call_blocks,
    ToolCallFormat.LLAMA3_JSON: parse_json_tool_call,
    ToolCallFormat.NONE: lambda message: (message, True),
}


class HFChatTemplateRenderer(Renderer):
    """Renders through the tokenizer's chat template (or `chat_template=`), with `template_kwargs`
    passed to every rendering (e.g. `{"enable_thinking": False}` for Qwen3's template), and reads
    tool calls in replies by `tool_call_format` ("hermes", "llama3_json" or "none")."""

    name = "hf_chat_template"

    def __init__(
        self,
        tokenizer: Tokenizer,
        model_name: str | None = None,
        chat_template: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        tool_call_format: ToolCallFormat | str = ToolCallFormat.NONE,
    ) -> None:
        super().__init__(tokenizer, model_name)
        self._explicit_template = chat_template
        self.chat_template = chat_template or _tokenizer_template(tokenizer, self.model_name)
        self.template_kwargs = dict(template_kwargs or {})
        self.tool_call_format = _as_tool_call_format(tool_call_format)
        if not getattr(tokenizer, "is_fast", False):
            raise RendererError(
                f"The {self.name!r} renderer needs a fast tokenizer (one with character offsets); the "
                f"tokenizer of {self.model_name!r} is {type(tokenizer).__name__}."
            )
        self._end_of_turn = self._derive_end_of_turn()
        self.reasoning_field = self._probe_reasoning_field()
        self.renders_tool_calls = self._probe_tool_calls()
        self.declares_tools = self._probe_tool_declaration()
        self.supports_tool_calls = (
            self.renders_tool_calls and self.declares_tools and self.tool_call_format != ToolCallFormat.NONE
        )

    # --- the Renderer interface -------------------------------------------------------------

    def build_generation_prompt(
        self, messages: Sequence[Message], role: str = "assistant", prefill: str | None = None
    ) -> tinker.types.ModelInput:
        """The template's rendering with `add_generation_prompt=True`, then `prefill`."""
        _check_role(role)
        messages = self._checked(messages)
        text = self._render(self._hf_messages(messages), generation=True, what="the conversation")
        return tinker.types.ModelInput.from_ints(self.encode(text + (prefill or "")))

    def build_supervised_example(
        self, messages: Sequence[Message], train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    ) -> tuple[tinker.types.ModelInput, np.ndarray]:
        """The template's tokens of the whole conversation, weight 1 on the selected outputs.

        Raises:
            RendererError: a selected message cannot be located (see the module docstring).
        """
        train_on_what = as_train_on_what(train_on_what)
        messages = self._checked(messages)
        check_trainable_flags(messages, train_on_what)
        hf_messages = self._hf_messages(messages)
        whole = self._whole(hf_messages)
        weights_T = np.zeros(len(whole.tokens), dtype=np.float32)
        if train_on_what == TrainOnWhat.ALL_TOKENS:
            weights_T[:] = 1.0
        else:
            for index in sorted(trained_message_indices(messages, train_on_what)):
                start, end = self._output_range(hf_messages, index, whole)
                weights_T[start:end] = 1.0
        return tinker.types.ModelInput.from_ints(whole.tokens), weights_T

    def render_spans(self, messages: Sequence[Message]) -> list[Span]:
        """The whole conversation as spans, with every message's output located (or a RendererError)."""
        messages = self._checked(messages)
        hf_messages = self._hf_messages(messages)
        whole = self._whole(hf_messages)
        spans: list[Span] = []
        cursor = 0
        for index in range(len(messages)):
            start, end = self._output_range(hf_messages, index, whole)
            if start == end:
                continue
            start_char, end_char = whole.char_start(start), whole.char_end(end)
            if start_char > cursor:
                spans.append(Span(whole.text[cursor:start_char], index))
            spans.append(Span(whole.text[start_char:end_char], index, is_output=True))
            cursor = end_char
        if cursor < len(whole.text):
            spans.append(Span(whole.text[cursor:]))
        return spans

    def generation_suffix(self, role: str) -> str:
        """What the template appends to open an assistant turn, after a one-message conversation."""
        _check_role(role)
        conversation = [{"role": "user", "content": _PROBE_USER}]
        closed = self._render(conversation, generation=False, what="a one-message conversation")
        opened = self._render(conversation, generation=True, what="a one-message conversation")
        if not opened.startswith(closed):
            raise RendererError(
                "The chat template's generation prompt does not extend the conversation's text; it has "
                "no conversation-independent suffix. Use build_generation_prompt."
            )
        return opened[len(closed) :]

    def get_stop_sequences(self) -> list[int]:
        return [self._end_of_turn]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The text before the stop token, with tool calls read by `tool_call_format`."""
        body, stopped = split_at_stop_token(tokens, self._end_of_turn)
        message = Message(role="assistant", content=self.decode(body))
        if not stopped:
            return message, False
        return _CALL_PARSERS[self.tool_call_format](message)

    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """A system message holding the template's declaration of `tools` (after `system_prompt`).

        Raises:
            RendererError: the template does not declare tools as a system message's text.
        """
        return [Message(role="system", content=self._tool_declaration(tools, system_prompt))]

    def _constructor_kwargs(self) -> dict[str, object]:
        kwargs: dict[str, object] = {}
        if self._explicit_template is not None:
            kwargs["chat_template"] = self._explicit_template
        if self.template_kwargs:
            kwargs["template_kwargs"] = self.template_kwargs
        if self.tool_call_format != ToolCallFormat.NONE:
            kwargs["tool_call_format"] = self.tool_call_format.value
        return kwargs

    def _checked(self, messages: Sequence[Message]) -> list[Message]:
        messages = checked_messages(messages)
        for index, message in enumerate(messages):
            if message.get("tool_calls") and not self.renders_tool_calls:
                raise RendererError(
                    f"Message {index} has tool_calls, but the chat template of {self.model_name!r} does "
                    "not render tool calls given in the OpenAI form."
                )
            if message.get("thinking") and self.reasoning_field is None:
                raise RendererError(
                    f"Message {index} has thinking, but the chat template of {self.model_name!r} renders "
                    f"neither of the message fields {list(_REASONING_FIELDS)}."
                )
        return messages

    # --- locating outputs -------------------------------------------------------------------

    def _output_range(
        self, hf_messages: Sequence[HFMessage], index: int, whole: "_Tokenized"
    ) -> tuple[int, int]:
        """Token range [start, end) of message `index`'s output within `whole`."""
        end = self._prefix_length(hf_messages[: index + 1], False, index, whole)
        if hf_messages[index]["role"] == "assistant":
            if index == 0:
                raise RendererError(
                    "Message 0 is an assistant message; a chat template opens an assistant turn only "
                    "after another message, so its generation prompt is undefined. Start the "
                    "conversation with a system or user message."
                )
            start = self._prefix_length(hf_messages[:index], True, index, whole)
        else:
            start = whole.token_at(self._content_start(hf_messages, index, whole.text))
        if start > end:
            raise RendererError(
                f"Message {index}'s output would start at token {start}, after its text ends (token "
                f"{end}); the chat template of {self.model_name!r} renders it in an unexpected order."
            )
        stops = [position for position in range(start, end) if whole.tokens[position] == self._end_of_turn]
        return start, (stops[-1] + 1 if stops else end)

    def _prefix_length(
        self, prefix: Sequence[HFMessage], generation: bool, index: int, whole: "_Tokenized"
    ) -> int:
        """Token count of `prefix`'s rendering, which must be a token prefix of `whole`."""
        what = (
            f"the messages before message {index} with a generation prompt"
            if generation
            else f"the messages up to and including message {index}"
        )
        ids = self.encode(self._render(prefix, generation, what))
        if whole.tokens[: len(ids)] != ids:
            at = next(
                (i for i, (a, b) in enumerate(zip(ids, whole.tokens, strict=False)) if a != b),
                min(len(ids), len(whole.tokens)),
            )
            raise RendererError(
                f"Cannot tell which tokens are message {index}'s: the chat template of "
                f"{self.model_name!r} renders {what} as tokens that are not a prefix of the whole "
                f"conversation's (from token {at}: {self.decode(ids[at : at + 6])!r} versus "
                f"{self.decode(whole.tokens[at : at + 6])!r}). The template renders those messages "
                "differently once later messages follow, or the text merges into one token across the "
                "boundary. Train on fewer messages (e.g. train_on_what=last_assistant_message, or one "
                "example per turn), change the content at that boundary, or use a hand-written renderer."
            )
        return len(ids)

    def _content_start(self, hf_messages: Sequence[HFMessage], index: int, whole_text: str) -> int:
        """Character offset in the whole text where message `index`'s content begins."""
        renders = [
            self._render(
                [*hf_messages[:index], {**hf_messages[index], "content": probe}],
                False,
                f"the messages up to message {index} with a probe content",
            )
            for probe in _CONTENT_PROBES
        ]
        start = _common_prefix_length(*renders)
        if start == len(renders[0]) == len(renders[1]):
            raise RendererError(
                f"The chat template of {self.model_name!r} does not render the content of message "
                f"{index} (role {hf_messages[index]['role']!r})."
            )
        if whole_text[:start] != renders[0][:start]:
            raise RendererError(
                f"Cannot tell where message {index}'s content starts: the chat template of "
                f"{self.model_name!r} renders the text before it differently when that message is last "
                "or its content is replaced by a probe."
            )
        return start

    # --- rendering --------------------------------------------------------------------------

    def _whole(self, hf_messages: Sequence[HFMessage]) -> "_Tokenized":
        text = self._render(hf_messages, False, "the conversation")
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return _Tokenized(
            text, list(encoding["input_ids"]), [tuple(pair) for pair in encoding["offset_mapping"]]
        )

    def _render(
        self,
        hf_messages: Sequence[HFMessage],
        generation: bool,
        what: str,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        if not hf_messages:
            raise RendererError(f"Cannot render {what}: a chat template needs at least one message.")
        try:
            text = self.tokenizer.apply_chat_template(
                list(hf_messages),
                tools=tools,
                chat_template=self.chat_template,
                tokenize=False,
                add_generation_prompt=generation,
                **self.template_kwargs,
            )
        except jinja2.TemplateError as error:
            raise DataFormatError(
                f"The chat template of {self.model_name!r} refused {what}: {error}"
            ) from error
        assert isinstance(text, str), type(text)
        return text

    def _tool_declaration(self, tools: Sequence[ToolSpec], system_prompt: str) -> str:
        """The system-message content that renders as the template does given `tools=` (see the
        module docstring); a RendererError when there is none."""
        hf_tools = [openai_tool(tool) for tool in tools]
        question = {"role": "user", "content": _PROBE_USER}
        given = [{"role": "system", "content": system_prompt}] if system_prompt else []
        try:
            expected = self._render([*given, question], False, "a tool declaration", tools=hf_tools)
            frame = self._render([{"role": "system", "content": _PROBE_SYSTEM}, question], False, "a system prompt")
            content = _between_frame(expected, frame, _PROBE_SYSTEM)
            renders_back = content is not None and expected == self._render(
                [{"role": "system", "content": content}, question], False, "a tool declaration"
            )
        except DataFormatError as error:
            raise RendererError(f"Cannot declare tools through the chat template of {self.model_name!r}: {error}") from error
        if content is None or not renders_back or not all(tool["function"]["name"] in content for tool in hf_tools):
            raise RendererError(
                f"The chat template of {self.model_name!r} does not declare tools as the text of a system "
                "message (it writes them elsewhere, as Llama-3.1's does in the first user turn, or not at "
                "all), so the 'hf_chat_template' renderer cannot declare them through messages. Use a "
                "hand-written renderer for this family (e.g. 'llama3_1')."
            )
        return content

    def _hf_messages(self, messages: Sequence[Message]) -> list[HFMessage]:
        return [_hf_message(message, self.reasoning_field, index) for index, message in enumerate(messages)]

    # --- probing the template at construction ------------------------------------------------

    def _derive_end_of_turn(self) -> int:
        """The first special token the template writes after an assistant message's content."""
        text = self._render(
            [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ANSWER}],
            False,
            "a probe conversation (one user and one assistant message)",
        )
        if _PROBE_ANSWER not in text:
            raise RendererError(
                f"The chat template of {self.model_name!r} does not write an assistant content "
                f"({_PROBE_ANSWER!r}) as given: {text!r}."
            )
        tail = text[text.rindex(_PROBE_ANSWER) + len(_PROBE_ANSWER) :]
        special = _special_token_ids(self.tokenizer)
        for token in self.encode(tail):
            if token in special:
                return token
        raise RendererError(
            f"The chat template of {self.model_name!r} writes no special token after an assistant "
            f"message (it writes {tail!r}), so a model trained on it would not learn to stop. Use a "
            f"template that ends assistant turns with a token such as {getattr(self.tokenizer, 'eos_token', None)!r}."
        )

    def _probe_reasoning_field(self) -> str | None:
        for field in _REASONING_FIELDS:
            answer = {"role": "assistant", "content": _PROBE_ANSWER, field: _PROBE_REASONING}
            if _PROBE_REASONING in self._try_render([{"role": "user", "content": _PROBE_USER}, answer]):
                return field
        return None

    def _probe_tool_calls(self) -> bool:
        call = {"type": "function", "function": {"name": _PROBE_TOOL, "arguments": {"x": 1}}}
        answer = {"role": "assistant", "content": "", "tool_calls": [call]}
        return _PROBE_TOOL in self._try_render([{"role": "user", "content": _PROBE_USER}, answer])

    def _probe_tool_declaration(self) -> bool:
        spec = ToolSpec(name=_PROBE_TOOL, description="Probe.", parameters={"type": "object", "properties": {}})
        try:
            self._tool_declaration([spec], "")
        except RendererError:
            return False
        return True

    def _try_render(self, hf_messages: list[HFMessage]) -> str:
        """The rendering, or "" when the template refuses (a template may reject unknown fields)."""
        try:
            return self._render(hf_messages, False, "a probe conversation")
        except DataFormatError:
            return ""


class _Tokenized:
    """The whole conversation's text, tokens and each token's character span."""

    def __init__(self, text: str, tokens: list[int], offsets: list[tuple[int, int]]) -> None:
        self.text = text
        self.tokens = tokens
        self.offsets = offsets
        self._ends = [end for _, end in offsets]

    def token_at(self, char: int) -> int:
        """The first token that ends after `char` (the token holding it, or the next one)."""
        return bisect.bisect_right(self._ends, char)

    def char_start(self, token: int) -> int:
        return self.offsets[token][0] if token < len(self.offsets) else len(self.text)

    def char_end(self, token: int) -> int:
        """Where the text of tokens [.., token) ends."""
        return self.offsets[token - 1][1] if token > 0 else 0


def _as_tool_call_format(value: ToolCallFormat | str) -> ToolCallFormat:
    try:
        return ToolCallFormat(value)
    except ValueError:
        valid = [member.value for member in ToolCallFormat]
        raise ConfigurationError(f"Unknown tool_call_format {value!r}; expected one of {valid}.") from None


def _tokenizer_template(tokenizer: Tokenizer, model_name: str | None) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default one renders conversations
        template = template.get("default")
    if not isinstance(template, str) or not template:
        raise RendererError(
            f"The tokenizer of {model_name!r} has no chat template, so the 'hf_chat_template' renderer "
            "cannot render it. Pass chat_template= (Jinja text), or use a hand-written renderer such as "
            "'role_colon' for a base model."
        )
    return template


def _hf_message(message: Message, reasoning_field: str | None, index: int) -> HFMessage:
    """A message in the form Hugging Face chat templates read."""
    out: HFMessage = {"role": message["role"], "content": message["content"]}
    if "thinking" in message and reasoning_field is not None:
        out[reasoning_field] = message["thinking"]
    if message.get("tool_calls"):
        out["tool_calls"] = [_hf_tool_call(call, index) for call in message["tool_calls"]]
    if "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    if "name" in message:
        out["name"] = message["name"]
    return out


def _hf_tool_call(call: ToolCall, index: int) -> dict[str, Any]:
    """The OpenAI form, with the arguments as an object (templates serialize them with `tojson`)."""
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError as error:
        raise DataFormatError(
            f"Message {index}: the arguments of tool call {call.function.name!r} are not JSON ({error}): "
            f"{call.function.arguments!r}."
        ) from None
    function = {"name": call.function.name, "arguments": arguments}
    return {"type": "function", "function": function, **({"id": call.id} if call.id else {})}


def _special_token_ids(tokenizer: Tokenizer) -> set[int]:
    """Ids of the tokenizer's special tokens: named ones and added tokens flagged special."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return set(tokenizer.all_special_ids) | {token_id for token_id, token in added.items() if token.special}


def _between_frame(text: str, frame: str, probe: str) -> str | None:
    """What stands in `text` where `probe` stands in `frame` (the text around it equal), or None."""
    if frame.count(probe) != 1:
        return None
    before, _, after = frame.partition(probe)
    fits = text.startswith(before) and text.endswith(after) and len(text) >= len(before) + len(after)
    return text[len(before) : len(text) - len(after)] if fits else None


def _common_prefix_length(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _check_role(role: str) -> None:
    if role != "assistant":
        raise RendererError(
            f"The 'hf_chat_template' renderer opens only assistant turns (a chat template's "
            f"add_generation_prompt); got role {role!r}."
        )
