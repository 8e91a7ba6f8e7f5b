"""Arithmetic: "What is A + B?" with A, B drawn from a small range (default 1..20).

The reward is lenient: the answer counts when the last integer in the reply equals the sum, so
"3 + 19 = 22" is right. The format check asks for a reply that ends (is not cut off) and contains
an integer. SmolLM2-135M-Instruct starts near 16 % greedy on 1..20, mostly because its verbose
replies run past a 16-token budget, which leaves RL room to teach both brevity and sums.

Held-out problems (the test set) are distinct (A, B) pairs that training never samples.
"""

import functools
import random
from collections.abc import Sequence

import chz

from recipes_lib.exceptions import ConfigurationError
from renderers import Renderer
from rl.dataset import ListRLDataset, TaskDatasetBuilder
from rl.problem_env import ProblemEnv, ProblemGroupBuilder, last_integer
from rl.types import EnvGroupBuilder, RLDataset

Problem = tuple[int, int]


class ArithmeticEnv(ProblemEnv):
    """Asks for `a + b`; right when the reply's last integer is the sum."""

    def __init__(self, renderer: Renderer, a: int, b: int, format_coef: float = 0.1):
        super().__init__(renderer, format_coef=format_coef)
        self.a, self.b = a, b

    def get_question(self) -> str:
        return f"What is {self.a} + {self.b}?"

    def check_answer(self, reply: str) -> bool:
        return last_integer(reply) == self.a + self.b

    def check_format(self, reply: str) -> bool:
        return last_integer(reply) is not None

    def get_reference_answer(self) -> str:
        return str(self.a + self.b)


def split_problems(low: int, high: int, test_size: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """All (a, b) pairs in [low, high]^2, split into (training, held-out) with `test_size` held out."""
    pairs = [(a, b) for a in range(low, high + 1) for b in range(low, high + 1)]
    if not 0 <= test_size < len(pairs):
        raise ConfigurationError(f"test_size must be in [0, {len(pairs)}) for operands {low}..{high}; got {test_size}.")
    held_out = set(random.Random(seed).sample(pairs, test_size))
    return [p for p in pairs if p not in held_out], sorted(held_out)


def problem_group(renderer: Renderer, a: int, b: int, size: int, format_coef: float) -> ProblemGroupBuilder:
    """A group of `size` envs asking for `a + b`, tagged "arithmetic"."""
    env = functools.partial(ArithmeticEnv, renderer, a, b, format_coef)
    return ProblemGroupBuilder(env_thunk=env, num_envs=size, dataset_name="arithmetic")


class ArithmeticDataset(RLDataset):
    """`n_batches` batches of `batch_size` problems drawn from `problems`, each sampled `group_size` times.

    Batch `i` is drawn with its own seed, so it is the same batch every time it is asked for.
    """

    def __init__(self, renderer: Renderer, problems: Sequence[Problem], batch_size: int, group_size: int,
                 n_batches: int, seed: int, format_coef: float):
        if batch_size > len(problems):
            raise ConfigurationError(f"batch_size {batch_size} exceeds the {len(problems)} training problems.")
        self.renderer, self.problems = renderer, list(problems)
        self.batch_size, self.group_size, self.n_batches = batch_size, group_size, n_batches
        self.seed, self.format_coef = seed, format_coef

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        chosen = random.Random(self.seed * 1_000_003 + index).sample(self.problems, self.batch_size)
        return [problem_group(self.renderer, a, b, self.group_size, self.format_coef) for a, b in chosen]

    def __len__(self) -> int:
        return self.n_batches



@chz.chz
class ArithmeticDatasetBuilder(TaskDatasetBuilder):
    """Sums of two integers in [low, high]; a held-out test set of `test_size` problems."""

    n_batches: int = 100
    # Operand range; 1..20 is where SmolLM2 has signal (1..99 gives almost none).
    low: int = 1
    high: int = 20
    # Held-out problems for the test-set evaluator (0: no test set).
    test_size: int = 100
    format_coef: float = 0.1
    seed: int = 0

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        renderer = self.renderer()
        train, test = split_problems(self.low, self.high, self.test_size, self.seed)
        dataset = ArithmeticDataset(renderer, train, self.batch_size, self.group_size, self.n_batches, self.seed,
                                    self.format_coef)
        if not test:
            return dataset, None
        return dataset, ListRLDataset(
            [problem_group(renderer, a, b, 1, self.format_coef) for a, b in test], batch_size=len(test)
        )
