"""`TrainOnWhat` and the `Renderer` base class (the message types are in `renderers.messages`).

A renderer turns a conversation into exactly the tokens a model was trained on, says which tokens to
train on, and parses sampled tokens back into a message.

How rendering works: each renderer lays a conversation out as text `Span`s, each a message's header
(role markers such as `<|im_start|>user\\n`, separators) or its output (content and end-of-turn
token: what the model produces when it speaks that turn). The base class joins the spans and
tokenizes the whole string in one call, as applying a model's chat template and then tokenizing
does, so the tokens equal the template's. Weights come from the tokenizer's character offsets: a
token is trained when any of its characters is. (A token straddles a header/output boundary only
when a content starts with a newline that merges with the header's own newline.)
"""

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np
import tinker

from recipes_lib.exceptions import ConfigurationError, DataFormatError, RendererError
from recipes_lib.model_info import get_recommended_renderer_name
from recipes_lib.tokenizers import Tokenizer

# Message types live in renderers.messages (with the schema that checks them); re-exported here.
from renderers.messages import Message, parse_message
from renderers.messages import ToolCall as ToolCall
from renderers.messages import ToolSpec as ToolSpec


class TrainOnWhat(StrEnum):
    """Which tokens of a conversation get weight 1 in `build_supervised_example`.

    "Output" is a message's content plus its end-of-turn token; role headers are trained only by
    ALL_TOKENS.
    """

    LAST_ASSISTANT_MESSAGE = "last_assistant_message"
    ALL_ASSISTANT_MESSAGES = "all_assistant_messages"
    ALL_MESSAGES = "all_messages"
    ALL_TOKENS = "all_tokens"
    ALL_USER_AND_SYSTEM_MESSAGES = "all_user_and_system_messages"
    CUSTOMIZED = "customized"  # each message's `trainable` flag


@dataclass(frozen=True)
class Span:
    """A piece of rendered text: the header or the output of one message.

    `message_index` is None for text that belongs to no message (BOS, a template's default system
    prompt); such text is trained only by ALL_TOKENS, like headers.
    """

    text: str
    message_index: int | None = None
    is_output: bool = False


class Renderer(ABC):
    """Renders conversations for one chat-template family; see the module docstring.

    Subclasses implement `render_spans`, `generation_suffix`, `get_stop_sequences` and
    `parse_response`. Renderers pickle as (class, model name, options) and rebuild their tokenizer
    with `get_tokenizer(model_name)`, so RL env builders holding one can cross process boundaries.
    """

    name: ClassVar[str] = "renderer"
    # Renders assistant tool calls and `tool` messages, declares tools and parses calls back. An
    # instance attribute, so that `hf_chat_template` can decide per template.
    supports_tool_calls: bool = False
    supports_thinking: ClassVar[bool] = False

    def __init__(self, tokenizer: Tokenizer, model_name: str | None = None) -> None:
        self.tokenizer = tokenizer
        # get_tokenizer() sets name_or_path to the model name it was asked for.
        self.model_name = model_name or getattr(tokenizer, "name_or_path", None) or None

    @abstractmethod
    def render_spans(self, messages: Sequence[Message]) -> list[Span]:
        """The whole conversation as spans (BOS included, no generation prompt)."""

    @abstractmethod
    def generation_suffix(self, role: str) -> str:
        """Text that opens a new `role` turn for the model to complete."""

    @abstractmethod
    def get_stop_sequences(self) -> list[int] | list[str]:
        """Stop token ids (chat templates) or stop strings (plain-text formats) for sampling."""

    @abstractmethod
    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """Parse sampled tokens into an assistant message; never raises on model output.

        Returns:
            (message, ok): ok is False when the output is truncated (no stop sequence) or
            malformed (e.g. a tool call that is not valid JSON); the message then keeps the raw text.
        """

    @property
    def has_extension_property(self) -> bool:
        """True when each multi-turn generation prompt extends the previous one token for token."""
        return False

    def supervised_spans(self, messages: Sequence[Message]) -> list[Span]:
        """The spans of a training example; `render_spans` unless a format needs a tail."""
        return self.render_spans(messages)

    def create_conversation_prefix_with_tools(
        self, tools: Sequence[ToolSpec], system_prompt: str = ""
    ) -> list[Message]:
        """Messages to put first in a conversation so the model knows it may call `tools`."""
        raise RendererError(f"The {self.name!r} renderer does not support tool calling.")

    def build_generation_prompt(
        self, messages: Sequence[Message], role: str = "assistant", prefill: str | None = None
    ) -> tinker.types.ModelInput:
        """The prompt to sample the next `role` turn: the conversation, a turn opener, `prefill`."""
        messages = self._checked(messages)
        text = "".join(span.text for span in self.render_spans(messages))
        return tinker.types.ModelInput.from_ints(
            self.encode(text + self.generation_suffix(role) + (prefill or ""))
        )

    def build_supervised_example(
        self, messages: Sequence[Message], train_on_what: TrainOnWhat = TrainOnWhat.LAST_ASSISTANT_MESSAGE
    ) -> tuple[tinker.types.ModelInput, np.ndarray]:
        """The tokens of the full conversation and a weight per token.

        The tokens are the chat template's rendering of the whole conversation, including any
        separator after the last end-of-turn token (weight 0).

        Args:
            train_on_what: a `TrainOnWhat` or its string value (e.g. "all_assistant_messages").

        Returns:
            (model_input, weights_T): weights_T is float32 of shape (T,), 1.0 exactly on the tokens
            `train_on_what` selects (outputs include the end-of-turn token), 0.0 elsewhere.
        """
        train_on_what = as_train_on_what(train_on_what)
        messages = self._checked(messages)
        check_trainable_flags(messages, train_on_what)
        spans = self.supervised_spans(messages)
        trained = trained_span_mask(spans, messages, train_on_what)
        tokens, weights_T = self._encode_spans(spans, trained)
        return tinker.types.ModelInput.from_ints(tokens), weights_T

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, special-token strings included, with nothing added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        """The exact text of `tokens` (special tokens kept, no space clean-up)."""
        return str(self.tokenizer.decode(list(tokens), clean_up_tokenization_spaces=False))

    def _encode_spans(self, spans: Sequence[Span], trained: Sequence[bool]) -> tuple[list[int], np.ndarray]:
        """Tokenize the joined spans once; a token is trained when any of its characters is."""
        if not getattr(self.tokenizer, "is_fast", False):  # no character offsets
            return self._encode_spans_one_by_one(spans, trained)
        text = "".join(span.text for span in spans)
        char_trained = np.repeat(np.asarray(trained, dtype=bool), [len(span.text) for span in spans])
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = encoding["offset_mapping"]
        weights_T = np.array([_any_trained(char_trained, start, end) for start, end in offsets], np.float32)
        return list(encoding["input_ids"]), weights_T

    def _encode_spans_one_by_one(
        self, spans: Sequence[Span], trained: Sequence[bool]
    ) -> tuple[list[int], np.ndarray]:
        """Fallback for tokenizers without offsets; may differ from the template at span boundaries."""
        tokens: list[int] = []
        weights: list[float] = []
        for span, is_trained in zip(spans, trained, strict=True):
            ids = self.encode(span.text)
            tokens += ids
            weights += [float(is_trained)] * len(ids)
        return tokens, np.array(weights, dtype=np.float32)

    def _single_token_id(self, text: str) -> int:
        """The id of a special token, or a RendererError when the tokenizer lacks it."""
        ids = self.encode(text)
        if len(ids) != 1:
            raise RendererError(
                f"The {self.name!r} renderer needs {text!r} to be one token, but the tokenizer of "
                f"{self.model_name!r} encodes it as {ids}. {_renderer_advice(self.model_name)}"
            )
        return ids[0]

    def _checked(self, messages: Sequence[Message]) -> list[Message]:
        """`messages` in the renderers' form (`checked_messages`), each one this renderer can render."""
        messages = checked_messages(messages)
        for index, message in enumerate(messages):
            if message.get("tool_calls") and not self.supports_tool_calls:
                raise RendererError(
                    f"Message {index} has tool_calls; the {self.name!r} renderer cannot render them."
                )
            if message.get("thinking") and not self.supports_thinking:
                raise RendererError(
                    f"Message {index} has thinking; the {self.name!r} renderer cannot render it."
                )
        return messages

    def _constructor_kwargs(self) -> dict[str, object]:
        """Options beyond the tokenizer that rebuild an equal renderer (for pickling)."""
        return {}

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        if not self.model_name:
            raise RendererError(
                f"Cannot pickle this {self.name!r} renderer: its tokenizer has no model name. Build the "
                "tokenizer with recipes_lib.tokenizers.get_tokenizer, or pass model_name= to the renderer."
            )
        return _rebuild_renderer, (type(self), self.model_name, self._constructor_kwargs())


def _rebuild_renderer(cls: type[Renderer], model_name: str, kwargs: dict[str, Any]) -> Renderer:
    from recipes_lib.tokenizers import get_tokenizer

    return cls(get_tokenizer(model_name), model_name=model_name, **kwargs)


def _renderer_advice(model_name: str | None) -> str:
    """Which renderer to use instead, when the registry knows the model."""
    try:
        return f"The renderer for {model_name!r} is {get_recommended_renderer_name(model_name or '')!r}."
    except ConfigurationError:
        return "Use the renderer that matches the model's chat template."


def _any_trained(char_trained: np.ndarray, start: int, end: int) -> bool:
    if end > start:
        return bool(char_trained[start:end].any())
    return bool(char_trained[start]) if start < len(char_trained) else False


def as_train_on_what(value: TrainOnWhat | str) -> TrainOnWhat:
    """`value` as a TrainOnWhat; a ConfigurationError listing the valid values otherwise."""
    try:
        return TrainOnWhat(value)
    except ValueError:
        valid = [member.value for member in TrainOnWhat]
        raise ConfigurationError(f"Unknown train_on_what {value!r}; expected one of {valid}.") from None


def checked_messages(messages: Sequence[Message]) -> list[Message]:
    """`messages` as the renderers read them, each through `renderers.messages.MessageSchema`: a
    known role, known fields of the right types; tool calls given as OpenAI-form or flat dicts become
    `ToolCall`s and content given as parts becomes text (DataFormatError naming the message otherwise)."""
    if isinstance(messages, (str, Mapping)) or not isinstance(messages, Sequence):
        raise DataFormatError(f"Expected a list of messages; got {type(messages).__name__}.")
    return [parse_message(message, f"Message {index}") for index, message in enumerate(messages)]


def check_trainable_flags(messages: Sequence[Message], train_on_what: TrainOnWhat) -> None:
    """`trainable` must be on every message with CUSTOMIZED and on none otherwise."""
    flagged = ["trainable" in message for message in messages]
    if train_on_what == TrainOnWhat.CUSTOMIZED and not all(flagged):
        raise DataFormatError(
            f"TrainOnWhat.CUSTOMIZED needs a 'trainable' flag on every message; messages "
            f"{[i for i, has in enumerate(flagged) if not has]} have none."
        )
    if train_on_what != TrainOnWhat.CUSTOMIZED and any(flagged):
        raise DataFormatError(
            f"Messages carry 'trainable' flags, which only TrainOnWhat.CUSTOMIZED reads; got {train_on_what}."
        )


def trained_span_mask(
    spans: Sequence[Span], messages: Sequence[Message], train_on_what: TrainOnWhat
) -> list[bool]:
    """Whether each span is trained under `train_on_what` (see `TrainOnWhat`)."""
    if train_on_what == TrainOnWhat.ALL_TOKENS:
        return [True] * len(spans)
    trained_messages = trained_message_indices(messages, train_on_what)
    return [span.is_output and span.message_index in trained_messages for span in spans]


def trained_message_indices(messages: Sequence[Message], train_on_what: TrainOnWhat) -> set[int]:
    """Indices of the messages whose output `train_on_what` trains."""
    roles = [message["role"] for message in messages]
    if train_on_what == TrainOnWhat.LAST_ASSISTANT_MESSAGE:
        if "assistant" not in roles:
            raise DataFormatError(
                "TrainOnWhat.LAST_ASSISTANT_MESSAGE needs an assistant message; there is none."
            )
        return {len(roles) - 1 - roles[::-1].index("assistant")}
    if train_on_what == TrainOnWhat.ALL_ASSISTANT_MESSAGES:
        return {i for i, role in enumerate(roles) if role == "assistant"}
    if train_on_what == TrainOnWhat.ALL_USER_AND_SYSTEM_MESSAGES:
        return {i for i, role in enumerate(roles) if role in ("user", "system")}
    if train_on_what == TrainOnWhat.CUSTOMIZED:
        return {i for i, message in enumerate(messages) if message["trainable"]}
    assert train_on_what in (TrainOnWhat.ALL_MESSAGES, TrainOnWhat.ALL_TOKENS), train_on_what
    return set(range(len(messages)))


def split_at_stop_token(tokens: Sequence[int], stop_token: int) -> tuple[list[int], bool]:
    """The tokens before the first `stop_token`, and whether there was one."""
    tokens = list(tokens)
    if stop_token in tokens:
        return tokens[: tokens.index(stop_token)], True
    return tokens, False


def openai_tool(tool: ToolSpec | Mapping[str, Any]) -> dict[str, Any]:
    """A tool in the form chat templates read: `{"type": "function", "function": {name, description,
    parameters}}` (a `ToolSpec` is wrapped; a tool already in that form is copied)."""
    return dict(tool) if "function" in tool else {"type": "function", "function": dict(tool)}


def tool_call_from_json(body: str, arguments_key: str) -> ToolCall | None:
    """The call in `body`, the JSON text of an object with a string "name" and an object under
    `arguments_key` (other keys are ignored); None when it is not that.

    The arguments keep the text the model wrote when the body has the layout renderers write
    (`{"name": "f", "<arguments_key>": <arguments>}`), so a parsed call renders back to the same tokens.
    """
    body = body.strip()
    payload = _json_or_none(body)
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return None
    name, arguments = payload["name"], payload.get(arguments_key)
    if not isinstance(arguments, dict):
        return None
    head = f'{{"name": "{name}", "{arguments_key}": '
    written = body[len(head) : -1] if body.startswith(head) and body.endswith("}") else ""
    if _json_or_none(written) != arguments:
        written = json.dumps(arguments, ensure_ascii=False)
    return ToolCall.of(name, written)


def _json_or_none(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None
