"""Prompt datasets for on-policy distillation: conversations that end before the assistant's turn.

Distillation needs no answers, only prompts: the student writes its own answers and the teacher
grades them token by token. A `PromptDataset` hands out batches of prompts; a
`PromptDatasetBuilder` is the chz config that makes one.
"""

from collections.abc import Sequence

import chz

from recipes_lib.exceptions import ConfigurationError
from renderers import Message
from supervised.number_words import SYSTEM_PROMPT, prompt_messages, split_numbers


class PromptDataset:
    """Consecutive batches of `batch_size` prompts; a last partial batch is dropped."""

    def __init__(self, prompts: Sequence[list[Message]], batch_size: int):
        if batch_size < 1 or len(prompts) < batch_size:
            raise ConfigurationError(f"batch_size must be between 1 and the number of prompts ({len(prompts)}); "
                                     f"got {batch_size}.")
        self.prompts = list(prompts)
        self.batch_size = batch_size

    def get_batch(self, index: int) -> list[list[Message]]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range; the dataset has {len(self)} batches.")
        return self.prompts[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(self.prompts) // self.batch_size


@chz.chz
class PromptDatasetBuilder:
    """Builds the prompts of a distillation run."""

    # Prompts per step (each is sampled `group_size` times).
    batch_size: int = 16

    def __call__(self) -> PromptDataset:
        raise NotImplementedError


@chz.chz
class NumberWordsPromptsBuilder(PromptDatasetBuilder):
    """"Write <n> in words." for the training numbers of `supervised.number_words` (the held-out
    numbers of the same `num_heldout` and `seed` are never asked, so the exact-match evaluator
    measures what the student generalised)."""

    # Prompts in all (steps = num_prompts // batch_size).
    num_prompts: int = 1024
    num_heldout: int = 48
    seed: int = 0
    system_prompt: str | None = SYSTEM_PROMPT

    def __call__(self) -> PromptDataset:
        numbers = split_numbers(self.num_prompts, self.num_heldout, self.seed).train_N
        return PromptDataset([prompt_messages(n, self.system_prompt) for n in numbers], self.batch_size)
