"""ProblemEnv's reward formula and prompt, through the arithmetic task on the SmolLM2 template."""

import asyncio

import pytest

from recipes.arithmetic.env import ArithmeticEnv
from renderers import Message, Renderer, get_renderer
from rl.problem_env import last_integer


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer) -> Renderer:  # type: ignore[no-untyped-def]
    return get_renderer("smollm2", tiny_tokenizer)


@pytest.mark.parametrize(
    ("text", "value"),
    [("3 + 19 = 22.", 22), ("It is 1,234", 1234), ("minus: -5", -5), ("22, not 23", 23), ("no digits", None),
     ("", None)],
)
def test_last_integer(text: str, value: int | None) -> None:
    assert last_integer(text) == value


def _reply(renderer: Renderer, text: str, stopped: bool = True) -> list[int]:
    return renderer.encode(text) + (renderer.get_stop_sequences() if stopped else [])  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "stopped", "reward", "correct", "formatted"),
    [
        ("3 + 19 = 22", True, 1.0, 1.0, 1.0),  # right: 1 + 0.1 * (1 - 1)
        ("3 + 19 = 21", True, 0.0, 0.0, 1.0),  # wrong but formatted
        ("3 + 19 = 22", False, 0.9, 1.0, 0.0),  # right but cut off: 1 + 0.1 * (0 - 1)
        ("Let me think", True, -0.1, 0.0, 0.0),  # no number: 0 + 0.1 * (0 - 1)
    ],
)
def test_reward_is_correct_plus_format_coef_times_format_minus_one(
    renderer: Renderer, text: str, stopped: bool, reward: float, correct: float, formatted: float
) -> None:
    env = ArithmeticEnv(renderer, 3, 19, format_coef=0.1)
    result = asyncio.run(env.step(_reply(renderer, text, stopped)))
    assert result.reward == pytest.approx(reward)
    assert result.metrics == {"correct": correct, "format": formatted}
    assert result.episode_done


def test_prompt_is_the_rendered_question_with_the_renderer_stops(renderer: Renderer) -> None:
    ob, stop = asyncio.run(ArithmeticEnv(renderer, 4, 7).initial_observation())
    assert ob.to_ints() == renderer.build_generation_prompt([Message(role="user", content="What is 4 + 7?")]).to_ints()
    assert stop == renderer.get_stop_sequences()
    assert "You are a helpful AI assistant named SmolLM" in renderer.decode(ob.to_ints())
