"""The number-to-words task, a chat skill a 135M model learns in minutes on a CPU.

    system:    Answer in words.
    user:      Write 4072 in words.
    assistant: four thousand seventy-two

The short system prompt replaces the 15-token one SmolLM2's template adds when there is none:
examples are a third shorter, so a step is faster at the same accuracy (docs/findings.md).
`system_prompt=None` restores the default.

American style: no "and", tens hyphenated ("seventy-two"), numbers 1 to 9999. Training and
held-out numbers are disjoint. Held-out numbers are drawn equally from 20-99, 100-999 and
1000-9999: the numbers 1-19 all stay in training, because each is a word of its own ("three",
"eleven") that no other number's answer spells out alone, so a model cannot infer it; held out,
they measure memory, not the rule. (A first run of this recipe, with them held out, lost 11
and 13, answering "teneen".) Training numbers come from 1-19, 20-99, 100-999 and 1000-9999 in
the shares 10/20/35/35 %: nineteen words are learned from a tenth of the examples, and the
longer numbers, where the held-out mistakes are, get the most (docs/findings.md).

The task's data as pure functions: the numbers, their words, the split and the prompts. The SFT
dataset builder (`dataset.py`), the distillation prompts (`prompts.py`), the exact-match evaluator
and the Inspect task build on them.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eval.sampling import ReferenceExample
from renderers import Message

ONES = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
TRAIN_MAGNITUDES = ((1, 19), (20, 99), (100, 999), (1000, 9999))
TRAIN_SHARES = (0.1, 0.2, 0.35, 0.35)
HELDOUT_MAGNITUDES = ((20, 99), (100, 999), (1000, 9999))
SYSTEM_PROMPT = "Answer in words."


def number_to_words(n: int) -> str:
    """`n` in American English words: 4072 -> "four thousand seventy-two" (1 <= n <= 9999)."""
    if not 1 <= n <= 9999:
        raise ValueError(f"number_to_words covers 1..9999, got {n}")
    thousands, rest = divmod(n, 1000)
    hundreds, below_hundred = divmod(rest, 100)
    words = []
    if thousands:
        words.append(f"{ONES[thousands]} thousand")
    if hundreds:
        words.append(f"{ONES[hundreds]} hundred")
    if below_hundred:
        words.append(_below_hundred(below_hundred))
    return " ".join(words)


def _below_hundred(n: int) -> str:
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + (f"-{ONES[ones]}" if ones else "")


def prompt_messages(n: int, system_prompt: str | None = None) -> list[Message]:
    """The conversation that asks for `n` in words (with an optional system message first)."""
    system = [Message(role="system", content=system_prompt)] if system_prompt else []
    return system + [Message(role="user", content=f"Write {n} in words.")]


def conversation(n: int, system_prompt: str | None = None) -> list[Message]:
    """The prompt for `n` and its reference answer."""
    return prompt_messages(n, system_prompt) + [Message(role="assistant", content=number_to_words(n))]


@dataclass(frozen=True)
class NumberSplit:
    """Disjoint training and held-out numbers."""

    train_N: list[int]
    heldout_H: list[int]


def split_numbers(num_train: int, num_heldout: int, seed: int = 0) -> NumberSplit:
    """Draw `num_heldout` distinct held-out numbers, then `num_train` training numbers (repeats
    allowed) that avoid them, from `TRAIN_MAGNITUDES` in `TRAIN_SHARES` (see the module docstring).

    The held-out numbers are drawn first, so they depend only on `num_heldout` and `seed`.
    """
    rng = np.random.default_rng(seed)
    per_magnitude = np.array_split(np.arange(num_heldout), len(HELDOUT_MAGNITUDES))
    heldout: list[int] = []
    for (low, high), share in zip(HELDOUT_MAGNITUDES, per_magnitude):
        heldout += rng.choice(np.arange(low, high + 1), size=len(share), replace=False).tolist()
    excluded = set(heldout)
    train: list[int] = []
    while len(train) < num_train:
        low, high = TRAIN_MAGNITUDES[rng.choice(len(TRAIN_MAGNITUDES), p=TRAIN_SHARES)]
        n = int(rng.integers(low, high + 1))
        if n not in excluded:
            train.append(n)
    return NumberSplit(train_N=train, heldout_H=sorted(heldout))


def heldout_examples(numbers: Sequence[int], system_prompt: str | None = None) -> list[ReferenceExample]:
    """Prompts and reference answers for `numbers`."""
    return [ReferenceExample(prompt_messages(n, system_prompt), number_to_words(n)) for n in numbers]
