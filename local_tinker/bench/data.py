"""The token batches every trainer of the bench sees: the same ids and loss targets for ours and the peers.

- `random_batch`: 8 rows of 129 random token ids, the last `loss_fraction` of the 128 targets weighted;
- `number_words_batch`: 8 number-to-words chats in SmolLM2's ChatML template, loss on the answer
  (its words and the end-of-turn token), as `recipes.number_words.dataset` builds them with the
  default `TrainOnWhat` (the engine imports nothing from the cookbook, so the
  few lines are repeated here; tests/bench/test_data.py checks they agree token for token).
"""

from dataclasses import dataclass

import numpy as np
from tinker import types

from local_tinker.tokenizers import Tokenizer

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
_ONES = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
# The sampling workloads' prompts (our engine, HF `generate`, CTranslate2): 8 prompts x 64 new tokens.
SAMPLING_PROMPTS = tuple(f"Tell me a short story about the number {i}." for i in range(8))


@dataclass(frozen=True)
class TokenBatch:
    """Whole sequences and a 0/1 weight per target: `weights_S[i][t]` weights predicting `tokens_S[i][t + 1]`."""

    tokens_S: list[list[int]]
    weights_S: list[list[float]]

    @property
    def predicted_tokens(self) -> int:
        """Positions that predict a next token (every target, weighted or not): the tokens/s unit."""
        return sum(len(tokens) - 1 for tokens in self.tokens_S)

    def datums(self) -> list[types.Datum]:
        """Cross-entropy datums of the engine: input `tokens[:-1]`, targets `tokens[1:]`."""
        return [types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                            loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.asarray(tokens[1:])),
                                            "weights": types.TensorData.from_numpy(np.asarray(weights, np.float32))})
                for tokens, weights in zip(self.tokens_S, self.weights_S, strict=True)]

    def labels(self) -> list[list[int]]:
        """Hugging Face labels (unshifted, -100 where nothing is learnt): the same loss as `datums`."""
        return [[-100] + [token if weight else -100 for token, weight in zip(tokens[1:], weights, strict=True)]
                for tokens, weights in zip(self.tokens_S, self.weights_S, strict=True)]


def random_batch(rows: int = 8, length: int = 128, loss_fraction: float = 1.0, seed: int = 0) -> TokenBatch:
    """`rows` x `length` predicted tokens drawn from ids 100..39999; the last `loss_fraction` weighted."""
    rng = np.random.default_rng(seed)
    weights = (np.arange(length) >= length * (1 - loss_fraction)).astype(np.float32).tolist()
    return TokenBatch([rng.integers(100, 40000, size=length + 1).tolist() for _ in range(rows)],
                      [list(weights) for _ in range(rows)])


def number_to_words(n: int) -> str:
    """`n` (1..9999) in American English words, as `recipes.number_words.task.number_to_words` writes it."""
    thousands, rest = divmod(n, 1000)
    hundreds, below = divmod(rest, 100)
    words = [f"{_ONES[thousands]} thousand"] if thousands else []
    words += [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if below:
        words.append(_ONES[below] if below < 20 else _TENS[below // 10] + (f"-{_ONES[below % 10]}" if below % 10 else ""))
    return " ".join(words)


def number_words_prompt(n: int) -> str:
    """The ChatML prompt asking for `n` in words, up to the assistant's turn opener."""
    return (f"{IM_START}system\nAnswer in words.{IM_END}\n{IM_START}user\nWrite {n} in words.{IM_END}\n"
            f"{IM_START}assistant\n")


def bench_numbers(count: int = 8, seed: int = 0) -> list[int]:
    """`count` numbers, the magnitudes 1-9 .. 1000-9999 taken in turn (as the training split draws them)."""
    rng = np.random.default_rng(seed)
    magnitudes = [(1, 9), (10, 99), (100, 999), (1000, 9999)]
    return [int(rng.integers(low, high + 1)) for low, high in (magnitudes[i % 4] for i in range(count))]


def number_words_batch(tokenizer: Tokenizer, numbers: list[int]) -> TokenBatch:
    """One chat per number; the answer (words and end-of-turn) weighted, the separator after it not."""
    tokens_S, weights_S = [], []
    for n in numbers:
        prompt = tokenizer.encode(number_words_prompt(n), add_special_tokens=False)
        answer = tokenizer.encode(number_to_words(n) + IM_END, add_special_tokens=False)
        separator = tokenizer.encode("\n", add_special_tokens=False)
        tokens_S.append(list(prompt) + list(answer) + list(separator))
        weights_S.append([0.0] * (len(prompt) - 1) + [1.0] * len(answer) + [0.0] * len(separator))
    return TokenBatch(tokens_S, weights_S)


def end_of_turn_token(tokenizer: Tokenizer) -> int:
    """The id of `<|im_end|>`, the SmolLM2 renderer's stop sequence."""
    ids = tokenizer.encode(IM_END, add_special_tokens=False)
    assert len(ids) == 1, f"{IM_END} is not one token for this tokenizer: {ids}"
    return int(ids[0])
