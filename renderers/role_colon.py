"""`role_colon`: plain text `User: ...\\n\\nAssistant: ...\\n\\n`, for base (pretrained-only) models.

Each message is a header `{Role}:` and an output ` {content}\\n\\n`; sampling stops at the string
`\\n\\nUser:`. A training example that ends with an assistant message also trains the `User:` that
completes that stop string, so the model learns to end its turn. The tokenizer's BOS token, if it
has one, starts the text. No tool calls or thinking.
"""

from collections.abc import Sequence

from renderers.base import Message, Renderer, Span

STOP_STRING = "\n\nUser:"


class RoleColonRenderer(Renderer):
    """`Role: content` turns separated by blank lines."""

    name = "role_colon"

    @property
    def has_extension_property(self) -> bool:
        return True

    def render_spans(self, messages: Sequence[Message]) -> list[Span]:
        bos = self.tokenizer.bos_token
        spans = [Span(bos)] if bos else []
        for index, message in enumerate(messages):
            spans.append(Span(message["role"].capitalize() + ":", index))
            spans.append(Span(" " + message["content"] + "\n\n", index, is_output=True))
        return spans

    def supervised_spans(self, messages: Sequence[Message]) -> list[Span]:
        spans = self.render_spans(messages)
        if messages and messages[-1]["role"] == "assistant":
            spans.append(Span("User:", len(messages) - 1, is_output=True))
        return spans

    def generation_suffix(self, role: str) -> str:
        return role.capitalize() + ":"

    def get_stop_sequences(self) -> list[str]:
        return [STOP_STRING]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The text before `\\n\\nUser:`; ok when that string, or else a final EOS, ended it."""
        tokens = list(tokens)
        eos = self.tokenizer.eos_token_id
        ended_with_eos = bool(tokens) and eos is not None and tokens[-1] == eos
        pieces = self.decode(tokens[:-1] if ended_with_eos else tokens).split(STOP_STRING)
        ok = len(pieces) == 2 if not ended_with_eos else len(pieces) == 1
        return Message(role="assistant", content=pieces[0].strip()), ok
