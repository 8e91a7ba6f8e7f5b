"""Labelling texts with a sampling client, and the held-out evaluation of the distillation recipe.

`classify` samples one greedy answer per conversation (all requests in flight at once, so the
engine batches them) and parses it (the teacher's reply with `language_name_to_label`, the
student's with `parse_label`). `LanguageIdEvaluator` asks the model,
without the teacher's prompt, to label the held-out sentences and reports

    test/teacher_agreement   fraction of answers equal to the teacher's (prompted) label
    test/accuracy            fraction of answers equal to the true label
    test/valid_label         fraction of answers that are a bare label at all
"""

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import chz
from tinker import types

from recipes.prompt_distillation.task import heldout_path, parse_label, student_conversation
from recipes_lib.backends.protocols import SamplingClient
from recipes_lib.evaluators import SamplingClientEvaluator
from recipes_lib.exceptions import DataFormatError
from recipes_lib.jsonl import read_jsonl
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, get_renderer


async def classify(sampling_client: SamplingClient, renderer: Renderer, conversations: Sequence[list[Message]],
                   parse: Callable[[str], str | None] = parse_label, prefill: str | None = None,
                   max_tokens: int = 4, temperature: float = 0.0) -> list[tuple[str, str | None]]:
    """(raw reply, `parse(reply)`) for each conversation, sampled concurrently.

    `prefill` begins the assistant's reply; it is part of the prompt, not of the returned reply.
    """
    params = types.SamplingParams(max_tokens=max_tokens, temperature=temperature,
                                  stop=renderer.get_stop_sequences())

    async def one(messages: list[Message]) -> tuple[str, str | None]:
        prompt = renderer.build_generation_prompt(messages, prefill=prefill)
        response = await sampling_client.sample(prompt, 1, params)
        message, _ = renderer.parse_response(response.sequences[0].tokens)
        return message["content"], parse(message["content"])

    return list(await asyncio.gather(*(one(messages) for messages in conversations)))


@dataclass(frozen=True)
class HeldoutItem:
    """A held-out text with its true label and the teacher's label (None: the teacher gave none)."""

    text: str
    label: str
    teacher: str | None


def read_heldout(path: str | Path) -> list[HeldoutItem]:
    """The held-out file `create_data` writes: one {"text", "label", "teacher"} object per line."""
    items = []
    for number, row in read_jsonl(path):
        try:
            items.append(HeldoutItem(row["text"], row["label"], row["teacher"]))
        except (KeyError, TypeError) as exc:
            raise DataFormatError(f"{path} line {number}: expected {{\"text\", \"label\", \"teacher\"}} "
                                  f"(missing {exc}).") from None
    return items


def agreement_metrics(answers: Sequence[str | None], items: Sequence[HeldoutItem], prefix: str) -> dict[str, float]:
    """Teacher agreement, accuracy and valid-answer rate of `answers` on `items`."""
    count = max(len(items), 1)
    return {
        f"{prefix}/teacher_agreement": sum(a is not None and a == i.teacher for a, i in zip(answers, items)) / count,
        f"{prefix}/accuracy": sum(a == i.label for a, i in zip(answers, items)) / count,
        f"{prefix}/valid_label": sum(a is not None for a in answers) / count,
    }


class LanguageIdEvaluator(SamplingClientEvaluator):
    """Labels held-out sentences without the teacher's prompt and compares with teacher and truth."""

    def __init__(self, items: Sequence[HeldoutItem], renderer: Renderer, name: str = "test", max_tokens: int = 4):
        self.items = list(items)
        self.renderer = renderer
        self.name = name
        self.max_tokens = max_tokens

    async def __call__(self, sampling_client: SamplingClient) -> dict[str, float]:
        conversations = [student_conversation(item.text) for item in self.items]
        answers = await classify(sampling_client, self.renderer, conversations, max_tokens=self.max_tokens)
        return agreement_metrics([label for _, label in answers], self.items, self.name)


@chz.chz
class LanguageIdEvaluatorBuilder:
    """Builds a `LanguageIdEvaluator` over the held-out labels that `create_data` wrote next to `data_file`."""

    data_file: str  # the distillation data (create_data's output_file)
    model_name: str  # for the tokenizer and default renderer
    renderer_name: str | None = None
    max_tokens: int = 4

    def __call__(self) -> LanguageIdEvaluator:
        renderer_name = resolve_renderer_name(self.model_name, self.renderer_name)
        renderer = get_renderer(renderer_name, get_tokenizer(self.model_name))
        return LanguageIdEvaluator(read_heldout(heldout_path(self.data_file)), renderer, max_tokens=self.max_tokens)
