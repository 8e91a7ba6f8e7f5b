"""The Tinker docs' CustomEvaluator and LLM-as-judge examples run on our classes with only imports (and
model names) changed; our CustomEvaluator grades against known answers."""

import asyncio
import re

import pytest

from eval.custom_evaluators import CustomEvaluator
from recipes_lib.exceptions import DataFormatError
from tests.eval.fakes import TINY, ScriptedSamplingClient

# The Tinker docs' dataset and grader, as written there.
QA_DATASET = [
    {"input": "What is the capital of France?", "output": "Paris"},
    {"input": "What is the capital of Germany?", "output": "Berlin"},
    {"input": "What is the capital of Italy?", "output": "Rome"},
]


def grader_fn(response: str, target: str) -> bool:
    return target.lower() in response.lower()


def test_spec_custom_evaluator_prints_its_accuracy_on_a_local_checkpoint(tiny_checkpoint, capsys) -> None:  # type: ignore[no-untyped-def]
    """The Tinker docs' usage block; its model strings name the tiny model, and it opens our checkpoint."""
    from tests.eval.spec_custom_evaluator import CustomEvaluator as SpecCustomEvaluator
    from tests.eval.spec_custom_evaluator import tinker

    evaluator = SpecCustomEvaluator(
        dataset=QA_DATASET,
        grader_fn=grader_fn,
        renderer_name="smollm2",  # spec: "llama3"
        model_name=TINY,  # spec: "meta-llama/Llama-3.1-8B-Instruct"
    )

    service_client = tinker.ServiceClient()
    sampling_client = service_client.create_sampling_client(model_path=tiny_checkpoint)  # spec: base_model=...

    async def main() -> None:
        result = await evaluator(sampling_client)
        print(result)

    asyncio.run(main())
    printed = capsys.readouterr().out
    assert re.fullmatch(r"\{'accuracy': (0\.0|0\.3333333333333333|0\.6666666666666666|1\.0)\}\n", printed)


def test_spec_llm_as_judge_task_runs_with_our_model_as_the_grader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from inspect_ai import eval_async

    from tests.eval.spec_llm_as_judge import GRADER_MODEL, example_lm_as_judge

    logs = asyncio.run(eval_async(example_lm_as_judge(), model=GRADER_MODEL, log_dir=str(tmp_path), max_tokens=8))
    assert logs[0].status == "success"
    assert [s.name for s in logs[0].results.scores] == ["model_graded_qa"]  # type: ignore[union-attr]
    grades = [sample.scores["model_graded_qa"] for sample in logs[0].samples]  # type: ignore[union-attr, index]
    assert len(grades) == 2 and all(g.explanation is not None for g in grades)  # the grader's own words


def test_custom_evaluator_accuracy_against_known_answers() -> None:
    capitals = {"France": "Paris", "Germany": "Berlin", "Italy": "Milan"}  # one wrong of three
    client = ScriptedSamplingClient(lambda q: next(f"It is {c}." for k, c in capitals.items() if k in q))
    evaluator = CustomEvaluator(QA_DATASET, grader_fn, model_name=TINY, renderer_name="smollm2", name="capitals")
    assert asyncio.run(evaluator(client)) == {"capitals/accuracy": pytest.approx(2 / 3)}
    assert [params.temperature for _, _, params in client.requests] == [0.7] * 3


def test_custom_evaluator_rejects_rows_without_input_and_output() -> None:
    with pytest.raises(DataFormatError, match="row 1 needs string 'input' and 'output'"):
        CustomEvaluator([QA_DATASET[0], {"question": "?"}], grader_fn, model_name=TINY, renderer_name="smollm2")
