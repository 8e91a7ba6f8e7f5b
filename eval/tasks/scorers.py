"""Scorers of the team's Inspect tasks: exact answers and final numbers.

Both read the model's completion (`state.output.completion`) and give `CORRECT` / `INCORRECT`,
so Inspect's `accuracy()` is the fraction of samples answered right.
"""

from inspect_ai.scorer import CORRECT, INCORRECT, Score, Scorer, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState

from recipes_lib.parsing import last_integer as last_integer  # re-exported for the tasks


@scorer(metrics=[accuracy(), stderr()])
def exact_answer() -> Scorer:
    """Correct when the completion equals the target, ignoring surrounding whitespace only.

    The same rule as the supervised pipeline's `test/exact_match`, so the two agree.
    """

    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion.strip()
        return Score(value=CORRECT if answer == target.text.strip() else INCORRECT, answer=answer)

    return score


@scorer(metrics=[accuracy(), stderr()])
def final_integer() -> Scorer:
    """Correct when the last integer in the completion equals the target integer."""

    async def score(state: TaskState, target: Target) -> Score:
        answer = last_integer(state.output.completion)
        expected = last_integer(target.text)
        correct = answer is not None and answer == expected
        return Score(value=CORRECT if correct else INCORRECT, answer=str(answer))

    return score
