"""Preference sets generated in code, on addition questions.

`preference="correct"` (the default, used by `dpo_basic`): a correct sum over a nearly correct one.

    user: What is 17 + 25?
    A: 17 + 25 = 42        B: 17 + 25 = 43        label: A (or swapped, label B)

`preference="concise"` (used by `rlhf_pipeline`): the bare answer over the same answer wrapped in
chatty filler ("Sure! Let me work that out for you. 17 + 25 = 42 I hope this helps!"). Both sums
are right, so the preference is one of style, which a 135M preference model can learn; judging
which of two sums is right, it stayed at chance.

The wrong answer is off by one, two or three, so the pair differs only in the answer's last digit:
telling them apart takes working out the sum's units digit, not noticing a style. (With answers
off by ten among the choices as well, whose tens digit needs the carry, `dpo_basic` on SmolLM2
ended at 0.90 held-out accuracy after hovering at 0.85-0.89; with these offsets it reaches 0.98.)
Train and test problems are disjoint
(no (a, b) or (b, a) is in both), and which side holds the correct answer is random, so the labels
are balanced. Works offline: `dpo_basic` and the RLHF pipeline use it by default.
"""

import random
from typing import Literal

import chz

from preference.datasets import ComparisonDatasetBuilder, Split
from preference.types import Comparison, LabeledComparison
from renderers import Message

WRONG_OFFSETS = (-3, -2, -1, 1, 2, 3)
FILLERS = (
    ("Sure! Let me work that out for you. ", " I hope this helps!"),
    ("Great question! ", " Let me know if you need anything else."),
    ("Of course! Here is the answer: ", " Have a wonderful day!"),
    ("Let me think about this carefully. ", " That is my final answer."),
)
Preference = Literal["correct", "concise"]


def arithmetic_comparison(a: int, b: int, rng: random.Random, preference: Preference = "correct"
                          ) -> LabeledComparison:
    """"a + b = <sum>" against a wrong sum (or against itself padded with filler), in a random order."""
    answer = f"{a} + {b} = {a + b}"
    if preference == "correct":
        worse = f"{a} + {b} = {a + b + rng.choice([o for o in WRONG_OFFSETS if a + b + o >= 0])}"
    else:
        before, after = rng.choice(FILLERS)
        worse = before + answer + after
    prompt = [Message(role="user", content=f"What is {a} + {b}?")]
    labeled = LabeledComparison(Comparison(prompt, [Message(role="assistant", content=answer)],
                                           [Message(role="assistant", content=worse)]), "A")
    return labeled.swap() if rng.random() < 0.5 else labeled


def disjoint_problems(count_train: int, count_test: int, max_operand: int, seed: int
                      ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Distinct unordered problems (a, b) with 1 <= a, b <= max_operand, split train / test."""
    pairs = sorted({(min(a, b), max(a, b)) for a in range(1, max_operand + 1) for b in range(1, max_operand + 1)})
    if count_train + count_test > len(pairs):
        raise ValueError(f"only {len(pairs)} distinct problems with operands up to {max_operand}; "
                         f"asked for {count_train} + {count_test}")
    rng = random.Random(seed)
    rng.shuffle(pairs)
    ordered = [(a, b) if rng.random() < 0.5 else (b, a) for a, b in pairs]
    return ordered[:count_train], ordered[count_train : count_train + count_test]


@chz.chz
class ArithmeticComparisonBuilder(ComparisonDatasetBuilder):
    """Addition comparisons (correct over wrong, or concise over padded); deterministic for a seed."""

    preference: Preference = "correct"  # what makes the chosen answer better
    num_train: int = 512  # training comparisons
    num_test: int = 128  # held-out comparisons (problems never seen in training)
    max_operand: int = 50  # operands are drawn from 1..max_operand
    seed: int = 0

    def __call__(self) -> tuple[Split, Split | None]:
        train, test = disjoint_problems(self.num_train, self.num_test, self.max_operand, self.seed)
        rng = random.Random(self.seed + 1)
        return ([arithmetic_comparison(a, b, rng, self.preference) for a, b in train],
                [arithmetic_comparison(a, b, rng, self.preference) for a, b in test] or None)
