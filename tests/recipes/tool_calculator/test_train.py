"""The calculator recipe: its problems and grading, its warm-up data (tool results never trained on),
and an episode through the real calculator. The whole pipeline runs in
tests/server/test_tool_calculator_through_server.py."""

import asyncio
from pathlib import Path

import chz
import pytest

from recipes.tool_calculator.task import (
    WARMUP_SEED_OFFSET,
    CalculatorDatasetBuilder,
    WorkedTranscriptsBuilder,
    final_answer,
    held_out_problems,
    make_env,
    make_problems,
    worked_transcript,
)
from recipes_lib.argv import config_from_argv
from recipes_lib.logging import read_metrics
from renderers import Message
from rl import train as rl_train
from rl.dataset import renderer_for
from supervised.types import ChatDatasetBuilderCommonConfig

TINY = "recipes/tiny-llama"


def test_problems_are_exact_distinct_and_held_out_ones_never_trained_on() -> None:
    problems = make_problems(200, seed=0)
    assert len({p.expression for p in problems}) == 200
    for p in problems:
        # Independently of the recipe's evaluator: Python's own arithmetic on the same text.
        assert p.answer == eval(p.expression, {"__builtins__": {}})  # noqa: S307 - digits, * and + only
        assert p.expression in p.question
    test = {p.expression for p in held_out_problems(64, seed=0)}
    rl = asyncio.run(CalculatorDatasetBuilder(model_name_for_tokenizer=TINY, n_batches=50, test_size=64)())[0]
    trained = {b.env_thunk.args[0].expression for i in range(len(rl)) for b in rl.get_batch(i)}  # type: ignore[attr-defined]
    assert len(trained) == 400 and not trained & test


@pytest.mark.parametrize(("reply", "expected"), [
    ("347 * 28 = 9716", 9716), ("The answer is 9,716.", 9716), ("-12 then 40", 40), ("no number", None)])
def test_the_final_answer_is_the_last_integer_of_the_last_reply(reply: str, expected: int | None) -> None:
    assert final_answer([Message(role="user", content="What is 1 + 2?"),
                         Message(role="assistant", content=reply)]) == expected


def test_warmup_transcripts_train_both_assistant_turns_and_never_the_tool_result(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=TINY, batch_size=1, max_length=1024)
    data, test = WorkedTranscriptsBuilder(common_config=common, num_examples=1, test_size=8)()
    problem = make_problems(1, seed=WARMUP_SEED_OFFSET, exclude=held_out_problems(8, seed=0))[0]
    [datum] = data.all_datums()
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    weights = datum.loss_fn_inputs["weights"].to_numpy()
    trained = tiny_tokenizer.decode(targets[weights > 0].tolist())
    untrained = tiny_tokenizer.decode(targets[weights == 0].tolist())
    assert test is None and set(weights.tolist()) == {0.0, 1.0}
    assert f'{{"expression": "{problem.expression}"}}' in trained and f"= {problem.answer}" in trained
    assert f"<tool_response>\n{problem.answer}\n</tool_response>" in untrained  # the tool's result: weight 0
    assert problem.question in untrained and "<tools>" in untrained


def test_an_episode_runs_the_real_calculator_and_rewards_the_right_answer() -> None:
    renderer = renderer_for(TINY)
    problem = make_problems(1, seed=5)[0]
    call = worked_transcript(problem, renderer)[-3]  # the assistant's calculator call

    async def play(final_text: str) -> tuple[float, str]:
        env = make_env(problem, renderer, with_tools=True, max_turns=3)
        await env.initial_observation()
        first = await env.step(_action(renderer, call))
        assert not first.episode_done
        second = await env.step(_action(renderer, Message(role="assistant", content=final_text)))
        assert second.episode_done
        return second.reward, renderer.tokenizer.decode(first.next_observation.to_ints())

    reward, seen = asyncio.run(play(f"It is {problem.answer}."))
    # The calculator's own output for the expression, in the prompt of the second turn.
    assert reward == 1.0 and f"<tool_response>\n{problem.answer}\n</tool_response>" in seen
    assert asyncio.run(play(f"It is {problem.answer + 1}."))[0] == 0.0


def _action(renderer, message: Message) -> list[int]:  # type: ignore[no-untyped-def]
    """The tokens a policy samples for `message`: the rendered assistant turn after its header."""
    prompt = renderer.build_generation_prompt([Message(role="user", content="x")]).to_ints()
    full, _ = renderer.build_supervised_example([Message(role="user", content="x"), message])
    return full.to_ints()[len(prompt):]


@pytest.mark.parametrize("loop", [
    [],
    ["async_config.max_steps_off_policy=1", "async_config.groups_per_batch=2"],
    ["stream_minibatch_config.groups_per_batch=2", "stream_minibatch_config.num_minibatches=2"],
], ids=["sync", "async", "stream"])
def test_the_tool_env_trains_in_every_rl_loop(loop: list[str], tmp_path: Path) -> None:
    """The calculator env under `rl.train`'s three loops (a random tiny model: its replies rarely
    parse, and those are scored 0 and trained on like any other)."""
    config = config_from_argv(chz.Blueprint(rl_train.Config), [
        f"model_name={TINY}", "backend.precision=float32", "learning_rate=1e-3", "max_tokens=8", "lora_rank=4",
        "eval_every=0",
        "save_every=0", "dataset_builder=recipes.tool_calculator.task:CalculatorDatasetBuilder",
        f"dataset_builder.model_name_for_tokenizer={TINY}", "dataset_builder.batch_size=2",
        "dataset_builder.group_size=2", "dataset_builder.n_batches=2", "dataset_builder.test_size=2",
        f"log_path={tmp_path}", *loop])
    rl_train.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1]
    assert all(row["env/all/total_episodes"] == 4 and "env/all/parse_error" in row for row in rows)
