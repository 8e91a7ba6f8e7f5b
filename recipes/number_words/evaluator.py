"""The number-words exact-match evaluator: greedy answers to the held-out numbers (`test/exact_match`)."""

import chz

from eval.sampling import ExactMatchEvaluator
from recipes.number_words.task import SYSTEM_PROMPT, heldout_examples, split_numbers
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer


@chz.chz
class NumberWordsExactMatchBuilder:
    """Builds an evaluator of greedy exact match on the held-out numbers (`test/exact_match`).

    Use the same `num_heldout`, `seed` and `system_prompt` as the dataset builder so the evaluator
    reads the numbers the builder held out (they depend on nothing else).
    """

    model_name: str
    renderer_name: str | None = None
    num_heldout: int = 48
    seed: int = 0
    system_prompt: str | None = SYSTEM_PROMPT
    # The longest answer ("one thousand one hundred twenty-one") is 8 tokens with <|im_end|>.
    max_tokens: int = 16

    def __call__(self) -> ExactMatchEvaluator:
        renderer = get_renderer(resolve_renderer_name(self.model_name, self.renderer_name),
                                get_tokenizer(self.model_name))
        numbers = split_numbers(0, self.num_heldout, self.seed).heldout_H
        return ExactMatchEvaluator(heldout_examples(numbers, self.system_prompt), renderer, self.max_tokens)
