"""ChatML (`chatml`) and SmolLM2 (`smollm2`): `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message.

`smollm2` is SmolLM2-135M-Instruct's own template: when the first message is not a system message it
inserts the system prompt "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
(as template text, so it is trained only by TrainOnWhat.ALL_TOKENS). Neither renders tool calls or
thinking, as the template does not.
"""

from collections.abc import Sequence
from typing import ClassVar

from recipes_lib.tokenizers import Tokenizer
from renderers.base import Message, Renderer, Span, split_at_stop_token

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SMOLLM2_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


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
            spans += chatml_turn(index, message["role"], message["content"])
        return spans

    def generation_suffix(self, role: str) -> str:
        return f"{IM_START}{role}\n"

    def get_stop_sequences(self) -> list[int]:
        return [self._end_of_turn]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, stopped = split_at_stop_token(tokens, self._end_of_turn)
        return Message(role="assistant", content=self.decode(body)), stopped


class SmolLM2Renderer(ChatMLRenderer):
    """SmolLM2-Instruct: ChatML with the model's default system prompt when none is given."""

    name = "smollm2"
    default_system_prompt = SMOLLM2_SYSTEM_PROMPT
