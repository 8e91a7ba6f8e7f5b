"""`arithmetic`: two-number addition ("What is 23 + 45?"), graded on the last integer answered.

The problems are a pure function of the arguments, so every run of the task sees the same ones.
"""

import numpy as np
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.solver import generate

from eval.tasks.scorers import final_integer

INSTRUCTION = "Answer with only the number."


def addition_samples(num_problems: int, low: int, high: int, seed: int) -> list[Sample]:
    """`num_problems` problems `a + b` with a, b uniform in [low, high]."""
    rng = np.random.default_rng(seed)
    pairs_P_2 = rng.integers(low, high + 1, size=(num_problems, 2))
    return [
        Sample(input=f"What is {a} + {b}? {INSTRUCTION}", target=str(a + b), id=f"{a}+{b}#{i}")
        for i, (a, b) in enumerate(pairs_P_2.tolist())
    ]


@task
def arithmetic(num_problems: int = 40, low: int = 1, high: int = 99, seed: int = 0) -> Task:
    """Addition of two integers in [low, high], greedy decoding, scored on the final integer."""
    return Task(
        name="arithmetic",
        dataset=MemoryDataset(addition_samples(num_problems, low, high, seed), name="arithmetic"),
        solver=generate(),
        scorer=final_integer(),
        config=GenerateConfig(temperature=0.0, max_tokens=32),
    )
