"""The prompts of on-policy distillation on number words (`python -m recipes.distillation.on_policy`)."""

import chz

from distillation.datasets import PromptDataset, PromptDatasetBuilder
from recipes.number_words.task import SYSTEM_PROMPT, prompt_messages, split_numbers


@chz.chz
class NumberWordsPromptsBuilder(PromptDatasetBuilder):
    """"Write <n> in words." for the training numbers of `task.split_numbers` (the held-out
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
