"""Sampling evaluators: answer prompts with the current weights and grade the answers.

`ExactMatchEvaluator` suits tasks with one right answer (number to words, arithmetic, a label): it
decodes each prompt greedily and reports the fraction of answers equal to the reference,
`<name>/exact_match`, and keeps the first few prompts with their answers for the run report. All prompts are sent at once (`asyncio.gather`), so the local engine decodes
them as one batch and the hosted API runs them in parallel.
"""

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinker import types

from recipes_lib.backends.protocols import SamplingClient
from recipes_lib.evaluators import SamplingClientEvaluator
from renderers import Message, Renderer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReferenceExample:
    """A prompt conversation (ending before the assistant's turn) and the expected answer text."""

    messages: list[Message]
    reference: str


def strip_whitespace(text: str) -> str:
    """The default answer normalisation: surrounding whitespace does not count."""
    return text.strip()


class ExactMatchEvaluator(SamplingClientEvaluator):
    """Greedy-decode every example and report `<name>/exact_match` in [0, 1]."""

    def __init__(
        self,
        examples: Sequence[ReferenceExample],
        renderer: Renderer,
        max_tokens: int = 64,
        name: str = "test",
        normalize: Callable[[str], str] = strip_whitespace,
        num_logged: int = 3,
        num_kept: int = 8,
    ):
        self.examples = list(examples)
        self.renderer = renderer
        self.max_tokens = max_tokens
        self.name = name
        self.normalize = normalize
        self.num_logged = num_logged
        self.num_kept = num_kept  # prompts whose answers each evaluation keeps for the run report
        self._samples: list[dict[str, Any]] = []
        if not self.examples:
            logger.warning("%s/exact_match has no examples (none were held out): it is not reported", name)

    async def __call__(self, sampling_client: SamplingClient) -> dict[str, float]:
        if not self.examples:
            return {}  # an accuracy over nothing is no number, not 0
        answers = await asyncio.gather(*(self._answer(sampling_client, ex.messages) for ex in self.examples))
        correct = [self.normalize(a) == self.normalize(ex.reference) for a, ex in zip(answers, self.examples)]
        self._log_mistakes(answers, correct)
        kept = sorted({i * len(self.examples) // self.num_kept for i in range(self.num_kept)})  # spread over the set
        self._samples = [{"evaluator": self.name, "prompt": self.examples[i].messages[-1]["content"],
                          "answer": answers[i], "reference": self.examples[i].reference, "correct": correct[i]}
                         for i in kept]
        return {f"{self.name}/exact_match": sum(correct) / len(correct)}

    def take_samples(self) -> list[dict[str, Any]]:
        samples, self._samples = self._samples, []
        return samples

    async def _answer(self, sampling_client: SamplingClient, messages: list[Message]) -> str:
        prompt = self.renderer.build_generation_prompt(messages)
        params = types.SamplingParams(max_tokens=self.max_tokens, temperature=0.0,
                                      stop=self.renderer.get_stop_sequences())
        response = await sampling_client.sample(prompt, 1, params)
        message, _ = self.renderer.parse_response(response.sequences[0].tokens)
        return message["content"]

    def _log_mistakes(self, answers: Sequence[str], correct: Sequence[bool]) -> None:
        wrong = [(ex, a) for ex, a, ok in zip(self.examples, answers, correct) if not ok][: self.num_logged]
        for example, answer in wrong:
            logger.info("%s: %r -> %r (expected %r)", self.name, example.messages[-1]["content"], answer,
                        example.reference)
