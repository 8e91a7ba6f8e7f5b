"""`number_to_words`: the supervised demo's held-out numbers ("Write 4072 in words.").

The numbers, prompts, references, decoding (greedy, the same token budget) and grading (exact match up to
surrounding whitespace) are those of `recipes.number_words.evaluator`, so with the same `num_heldout`,
`seed` and `system_prompt` as a run's `NumberWordsBuilder` (and the same version of its split),
this task's accuracy is an offline re-measurement of that run's inline `test/exact_match`.
`numbers="21,507,4072"` evaluates exactly those numbers instead, e.g. the ones a run's own Inspect
log lists, should the split's code have changed since the run.
"""

from collections.abc import Sequence

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessage, ChatMessageSystem, ChatMessageUser, GenerateConfig
from inspect_ai.solver import generate

from eval.tasks.scorers import exact_answer
from recipes.number_words.evaluator import NumberWordsExactMatchBuilder
from recipes.number_words.task import heldout_examples, split_numbers
from recipes_lib.exceptions import ConfigurationError

# The inline evaluator's sampling budget, read from its default so the two cannot drift apart.
MAX_TOKENS = NumberWordsExactMatchBuilder(model_name="unused").max_tokens


def parse_numbers(numbers: str) -> list[int]:
    """ "21, 507,4072" -> [21, 507, 4072]; a clear error for anything else."""
    try:
        return [int(n) for n in numbers.split(",") if n.strip()]
    except ValueError:
        raise ConfigurationError(f"numbers={numbers!r}: expected comma-separated integers like 21,507,4072.") from None


def heldout_samples(numbers: Sequence[int], system_prompt: str | None) -> list[Sample]:
    """One sample per number: the supervised task's prompt and reference answer."""
    samples = []
    for n, example in zip(numbers, heldout_examples(numbers, system_prompt)):
        messages: list[ChatMessage] = [
            ChatMessageSystem(content=m["content"]) if m["role"] == "system" else ChatMessageUser(content=m["content"])
            for m in example.messages
        ]
        samples.append(Sample(input=messages, target=example.reference, id=n))
    return samples


@task
def number_to_words(
    num_heldout: int = 48, seed: int = 0, system_prompt: str | None = None, numbers: str | None = None
) -> Task:
    """Held-out numbers of the supervised number-to-words task (or `numbers`), graded by exact match."""
    chosen = parse_numbers(numbers) if numbers else split_numbers(0, num_heldout, seed).heldout_H
    return Task(
        name="number_to_words",
        dataset=MemoryDataset(heldout_samples(chosen, system_prompt), name="number_to_words"),
        solver=generate(),
        scorer=exact_answer(),
        config=GenerateConfig(temperature=0.0, max_tokens=MAX_TOKENS),
    )
