"""Inspect tasks as an inline evaluator: prefixed metrics, and firing on the supervised loop's
schedule (before step 0, every eval_every steps, after the last step) into metrics.jsonl."""

import asyncio
import json
import re

from inspect_ai import Task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

from eval.inspect_evaluator import InspectEvaluatorBuilder, metrics_from_logs
from eval.tasks.scorers import exact_answer
from recipes.number_words.dataset import NumberWordsBuilder
from supervised.train import Config, main
from supervised.types import ChatDatasetBuilderCommonConfig
from tests.eval.fakes import TINY, ScriptedSamplingClient


def _add(question: str) -> str:
    a, b = map(int, re.findall(r"\d+", question)[:2])
    return f"{a} + {b} = {a + b}"


def test_metrics_carry_the_prefix_and_task_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    evaluator = InspectEvaluatorBuilder(tasks=["arithmetic"], task_args={"num_problems": "4"},
                                        log_dir=str(tmp_path), metric_prefix="test/inspect")()
    metrics = asyncio.run(evaluator(ScriptedSamplingClient(_add)))
    assert metrics == {"test/inspect/arithmetic/accuracy": 1.0, "test/inspect/arithmetic/stderr": 0.0}
    assert len(evaluator.last_logs) == 1 and evaluator.last_logs[0].location.startswith(str(tmp_path))


def test_a_task_object_with_several_scorers_names_each(tmp_path) -> None:  # type: ignore[no-untyped-def]
    task = Task(name="two", dataset=MemoryDataset([Sample(input="Say yes", target="yes")]), solver=generate(),
                scorer=[includes(), exact_answer()])
    evaluator = InspectEvaluatorBuilder(tasks=[task], log_dir=str(tmp_path))()
    metrics = asyncio.run(evaluator(ScriptedSamplingClient(lambda q: "Yes!")))
    assert metrics["inspect/two/includes/accuracy"] == 1.0  # "yes" is in "Yes!" ignoring case
    assert metrics["inspect/two/exact_answer/accuracy"] == 0.0  # "Yes!" is not "yes"
    assert metrics_from_logs(evaluator.last_logs, "p") == {k.replace("inspect/", "p/", 1): v for k, v in metrics.items()}


def test_inline_inspect_evaluator_fires_on_the_supervised_schedule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """5 steps, eval_every=2: before steps 0 and 2 (pre-step weights) and after step 4 (final weights)."""
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=TINY, batch_size=2)
    config = Config(
        log_path=str(tmp_path / "run"), model_name=TINY,
        dataset_builder=NumberWordsBuilder(common_config=common, num_train=10, num_heldout=3),
        evaluator_builders=[InspectEvaluatorBuilder(tasks=["number_to_words"], task_args={"num_heldout": "3"},
                                                    log_dir=str(tmp_path / "inspect"))],
        eval_every=2, save_every=0, lora_rank=4, learning_rate=1e-3, backend=_fp32(),
    )
    main(config)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    evaluated = [r["step"] for r in rows if "inspect/number_to_words/accuracy" in r]
    assert evaluated == [0, 2, 4] == [r["step"] for r in rows if "test/nll" in r]
    assert all(0.0 <= r["inspect/number_to_words/accuracy"] <= 1.0 for r in rows if r["step"] in evaluated)
    assert len(list((tmp_path / "inspect").glob("*.eval"))) == 3


def _fp32():  # type: ignore[no-untyped-def]
    from recipes_lib.config import local

    return local(precision="float32", device="cpu")


def test_a_task_file_runs_alongside_our_tasks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Names Inspect resolves itself (files here; inspect_evals/<name> likewise) mix with ours."""
    task_file = tmp_path / "greet.py"
    task_file.write_text(
        "from inspect_ai import Task, task\nfrom inspect_ai.dataset import Sample\n"
        "from inspect_ai.scorer import includes\nfrom inspect_ai.solver import generate\n\n"
        "@task\ndef greet(word: str = 'hi'):\n"
        "    return Task(dataset=[Sample(input='Say ' + word, target=word)], solver=generate(), scorer=includes())\n"
    )
    evaluator = InspectEvaluatorBuilder(tasks=["arithmetic", f"{task_file}@greet"], log_dir=str(tmp_path / "logs"),
                                        task_args={"num_problems": "2", "word": "hello"})()
    metrics = asyncio.run(evaluator(ScriptedSamplingClient(lambda q: _add(q) if "+" in q else "hello there")))
    assert metrics["inspect/arithmetic/accuracy"] == 1.0
    assert metrics["inspect/greet/accuracy"] == 1.0  # task_args reached the file's task ("Say hello")
