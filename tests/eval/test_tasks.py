"""The team's Inspect tasks: their samples against independently computed answers, the scorers, and
task-name resolution."""

import asyncio
import re

import pytest
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import CORRECT, INCORRECT, Target
from inspect_ai.solver import TaskState

from eval.inspect_evaluator import InspectEvaluatorBuilder
from eval.tasks import resolve_tasks, task_names
from eval.tasks.qa import QUESTIONS, qa, qa_judged
from eval.tasks.scorers import exact_answer, final_integer, last_integer
from recipes.arithmetic.inspect_task import arithmetic
from recipes.number_words.evaluator import NumberWordsExactMatchBuilder
from recipes.number_words.inspect_task import number_to_words
from recipes.number_words.task import heldout_examples, split_numbers
from recipes_lib.exceptions import ConfigurationError
from tests.eval.fakes import ScriptedSamplingClient


def test_number_to_words_matches_the_supervised_split_prompts_and_answers() -> None:
    """Same numbers, prompts and references as the run's inline test/exact_match evaluator."""
    task = number_to_words(num_heldout=12, seed=3)
    samples = list(task.dataset)
    numbers = split_numbers(0, 12, 3).heldout_H
    assert [s.id for s in samples] == numbers
    inline = heldout_examples(numbers)
    assert [s.target for s in samples] == [ex.reference for ex in inline]
    assert [[m.text for m in s.input] for s in samples] == [  # type: ignore[union-attr]
        [m["content"] for m in ex.messages] for ex in inline]
    assert samples[0].input[-1].text == f"Write {numbers[0]} in words."  # type: ignore[union-attr, index]
    assert task.config.temperature == 0.0
    assert task.config.max_tokens == NumberWordsExactMatchBuilder(model_name="m").max_tokens


def test_arithmetic_targets_are_the_sums() -> None:
    samples = list(arithmetic(num_problems=5, low=1, high=9, seed=1).dataset)
    for sample in samples:
        a, b = (int(x) for x in sample.input.split("What is ")[1].split("?")[0].split(" + "))  # type: ignore[union-attr]
        assert sample.target == str(a + b) and 1 <= a <= 9 and 1 <= b <= 9


def test_qa_tasks_share_the_team_questions() -> None:
    assert len(list(qa().dataset)) == len(QUESTIONS) == len(list(qa_judged().dataset)) == 20


@pytest.mark.parametrize(("text", "expected"), [("The answer is 1,204.", 1204), ("-3 or 7", 7), ("none", None)])
def test_last_integer(text: str, expected: int | None) -> None:
    assert last_integer(text) == expected


def _score(scorer_factory, completion: str, target: str) -> str:  # type: ignore[no-untyped-def]
    state = TaskState(model="m", sample_id=0, epoch=1, input="q", messages=[],  # type: ignore[arg-type]
                      output=ModelOutput.from_content("m", completion))
    return str(asyncio.run(scorer_factory()(state, Target(target))).value)


def test_exact_answer_ignores_only_surrounding_whitespace() -> None:
    assert _score(exact_answer, " seventy-two\n", "seventy-two") == CORRECT
    assert _score(exact_answer, "Seventy-two", "seventy-two") == INCORRECT
    assert _score(exact_answer, "seventy-two.", "seventy-two") == INCORRECT


def test_final_integer_reads_the_last_number() -> None:
    assert _score(final_integer, "23 + 45 = 68", "68") == CORRECT
    assert _score(final_integer, "68 or 69", "68") == INCORRECT


def test_task_args_are_converted_and_passed_to_tasks_that_take_them() -> None:
    arith, words = resolve_tasks(["arithmetic", "number_to_words"], {"num_problems": "3", "num_heldout": "6"})
    assert len(list(arith.dataset)) == 3 and len(list(words.dataset)) == 6  # type: ignore[union-attr]


def test_unknown_names_and_arguments_are_clear_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match=r"Unknown task 'nope'.*arithmetic"):
        resolve_tasks(["nope"])
    with pytest.raises(ConfigurationError, match="not installed: pip install no-such-package"):
        resolve_tasks(["no_such_package/task"])
    with pytest.raises(ConfigurationError, match="does not exist"):
        resolve_tasks([str(tmp_path / "missing.py")])
    with pytest.raises(ConfigurationError, match=r"\['bogus'\] are not parameters"):
        resolve_tasks(["qa"], {"bogus": "1"})
    assert task_names() == ["arithmetic", "number_to_words", "qa", "qa_judged"]


def test_qa_judged_reads_the_graders_yes_or_no(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The scripted model answers questions 0 and 2 right and 1 and 3 wrong, then grades as a judge."""
    answers = {question: answer if i % 2 == 0 else "I am not sure." for i, (question, answer) in enumerate(QUESTIONS)}

    def model(message: str) -> str:
        if "[Submission]" in message:
            submission = re.search(r"\[Submission\]: (.*?)\n", message).group(1)  # type: ignore[union-attr]
            criterion = re.search(r"\[Criterion\]: (.*?)\n", message).group(1)  # type: ignore[union-attr]
            return "Yes, it does." if criterion in submission else "No. The submission is wrong."
        return answers[message]

    evaluator = InspectEvaluatorBuilder(tasks=["qa_judged"], limit=4, log_dir=str(tmp_path))()
    metrics = asyncio.run(evaluator(ScriptedSamplingClient(model)))
    assert metrics["inspect/qa_judged/accuracy"] == 0.5
    assert evaluator.last_logs[0].results.scores[0].scored_samples == 4  # type: ignore[union-attr]


def test_explicit_numbers_replace_the_split() -> None:
    task = resolve_tasks(["number_to_words"], {"numbers": "21, 507,4072"})[0]
    samples = list(task.dataset)  # type: ignore[union-attr]
    assert [(s.id, s.target) for s in samples] == [
        (21, "twenty-one"), (507, "five hundred seven"), (4072, "four thousand seventy-two")]  # by hand
    with pytest.raises(ConfigurationError, match="comma-separated integers"):
        number_to_words(numbers="21,x")
