"""Llama-3 Instruct (`llama3`): `<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>`.

As the Llama-3 template does, the conversation starts with `<|begin_of_text|>` and each content is
stripped of surrounding whitespace. Like the Tinker docs' renderer, it omits the "Cutting Knowledge Date"
system preamble that Llama-3.1's hub template adds. No tool calls or thinking.
"""

from collections.abc import Sequence

from recipes_lib.tokenizers import Tokenizer
from renderers.base import Message, Renderer, Span, split_at_stop_token

BEGIN_OF_TEXT = "<|begin_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
END_OF_TURN = "<|eot_id|>"


def _header(role: str) -> str:
    return f"{START_HEADER}{role}{END_HEADER}\n\n"


class Llama3Renderer(Renderer):
    """Llama-3, -3.1, -3.2 and -3.3 Instruct models."""

    name = "llama3"

    def __init__(self, tokenizer: Tokenizer, model_name: str | None = None) -> None:
        super().__init__(tokenizer, model_name)
        for special in (BEGIN_OF_TEXT, START_HEADER, END_HEADER):
            self._single_token_id(special)
        self._end_of_turn = self._single_token_id(END_OF_TURN)

    @property
    def has_extension_property(self) -> bool:
        return True

    def render_spans(self, messages: Sequence[Message]) -> list[Span]:
        spans = [Span(BEGIN_OF_TEXT)]
        for index, message in enumerate(messages):
            spans.append(Span(_header(message["role"]), index))
            spans.append(Span(message["content"].strip() + END_OF_TURN, index, is_output=True))
        return spans

    def generation_suffix(self, role: str) -> str:
        return _header(role)

    def get_stop_sequences(self) -> list[int]:
        return [self._end_of_turn]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        body, stopped = split_at_stop_token(tokens, self._end_of_turn)
        return Message(role="assistant", content=self.decode(body)), stopped
