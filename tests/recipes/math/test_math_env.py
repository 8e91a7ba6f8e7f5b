"""recipes.math.math_env: box extraction, math-verify equivalence, the env's reward, and the dataset builder offline."""

import asyncio
from pathlib import Path

import pytest

from recipes.math.math_env import (
    INSTRUCTION,
    MathDatasetBuilder,
    MathEnv,
    grade_reply,
    is_equivalent,
    last_boxed,
    standard_convo_prefix,
)
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from renderers import Message, get_renderer

FIXTURES = Path(__file__).parent / "fixtures"
TINY = "recipes/tiny-llama"


@pytest.mark.parametrize(("text", "expected"), [
    ("so the answer is $\\boxed{5}$.", "5"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("first \\boxed{3}, then \\boxed{ 4 }", "4"),
    ("\\fbox{7}", "7"),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("the answer is 5", None),
    ("cut off \\boxed{\\frac{1}{2}", None),
])
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


@pytest.mark.parametrize(("answer", "reference", "expected"), [
    ("0.5", "\\frac{1}{2}", True),  # decimal vs fraction
    ("1/2", "\\frac{1}{2}", True),
    ("\\frac34", "\\dfrac{3}{4}", True),  # \dfrac, braces omitted
    ("\\tfrac{3}{4}", "0.75", True),
    ("\\frac{2}{4}", "\\frac{1}{2}", True),  # unreduced fraction
    ("\\frac{1}{3}", "\\frac{1}{2}", False),
    ("10\\text{ cm}", "10", True),  # units
    ("5 \\text{ inches}", "5", True),
    ("90^\\circ", "90", True),  # degrees
    ("\\$18.90", "18.90", True),  # currency
    (" x ^ 2 + 1 ", "x^2+1", True),  # LaTeX spacing
    ("1+x^{2}", "x^2+1", True),  # order of terms
    ("(3,\\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)", True),  # \left( \right)
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt2}", True),
    ("5\\sqrt{2}", "\\sqrt{50}", True),
    ("6", "5", False),
    ("x^2-1", "x^2+1", False),
    ("", "5", False),
])
def test_equivalence(answer: str, reference: str, expected: bool) -> None:
    assert is_equivalent(answer, reference) is expected


@pytest.mark.parametrize(("reply", "formatted", "correct"), [
    ("Half of one is \\boxed{\\dfrac{1}{2}}.", True, True),
    ("It is \\boxed{0.5}", True, True),
    ("\\boxed{0.4} no wait, \\boxed{0.5}", True, True),  # the last box counts
    ("\\boxed{0.5} no wait, \\boxed{0.4}", True, False),
    ("The answer is 1/2.", False, False),  # no box: wrong, however right the number
])
def test_grade_reply(reply: str, formatted: bool, correct: bool) -> None:
    assert grade_reply(reply, "\\frac{1}{2}") == (formatted, correct)


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):  # type: ignore[no-untyped-def]
    return get_renderer("smollm2", tiny_tokenizer)


def _reward(renderer, reply: str, stopped: bool = True) -> tuple[float, dict[str, float]]:  # type: ignore[no-untyped-def]
    env = MathEnv(renderer, "What is half of one?", "\\frac{1}{2}")
    tokens = renderer.encode(reply) + (list(renderer.get_stop_sequences()) if stopped else [])
    asyncio.run(env.initial_observation())
    result = asyncio.run(env.step(tokens))
    assert result.episode_done
    return result.reward, result.metrics


def test_env_reward(renderer) -> None:  # type: ignore[no-untyped-def]
    assert _reward(renderer, "\\boxed{0.5}") == (1.0, {"correct": 1.0, "format": 1.0})
    assert _reward(renderer, "\\boxed{0.4}") == (0.0, {"correct": 0.0, "format": 1.0})
    assert _reward(renderer, "0.5") == (pytest.approx(-0.1), {"correct": 0.0, "format": 0.0})  # format penalty
    assert _reward(renderer, "\\boxed{0.5}", stopped=False) == (pytest.approx(0.9), {"correct": 1.0, "format": 0.0})


def test_standard_prefix_comes_before_the_question(renderer) -> None:  # type: ignore[no-untyped-def]
    env = MathEnv(renderer, "What is half of one?", "\\frac{1}{2}", convo_prefix=standard_convo_prefix())
    prompt, _ = asyncio.run(env.initial_observation())
    expected = renderer.build_generation_prompt(
        [*standard_convo_prefix(), Message(role="user", content=f"What is half of one? {INSTRUCTION}")])
    assert prompt.to_ints() == expected.to_ints()
    assert "\\boxed{16}" in standard_convo_prefix()[1]["content"]


def _builder(**overrides: object) -> MathDatasetBuilder:
    values: dict[str, object] = {"batch_size": 2, "group_size": 3, "model_name_for_tokenizer": TINY,
                                 "train_file": str(FIXTURES / "math_train.jsonl"),
                                 "test_file": str(FIXTURES / "math_test.jsonl"), **overrides}
    return MathDatasetBuilder(**values)  # type: ignore[arg-type]


def test_builder_loads_files_in_the_datasets_format() -> None:
    train, test = asyncio.run(_builder()())
    # 9 training rows, one of them also a test problem (dropped): 8 problems, 4 batches of 2.
    assert len(train) == 4 and test is not None and len(test.get_batch(0)) == 3
    envs = [env for i in range(len(train)) for group in train.get_batch(i) for env in asyncio.run(group.make_envs())]
    assert len(envs) == 8 * 3
    problems = {env.problem: env.answer for env in envs}  # type: ignore[attr-defined]
    assert "What is $7 \\times 8$?" not in problems
    assert problems["What is $\\frac{1}{2} + \\frac{1}{4}$?"] == "\\frac{3}{4}"  # from the solution's box
    assert problems["Simplify $\\sqrt{50}$."] == "5\\sqrt{2}"
    test_envs = [asyncio.run(g.make_envs())[0] for g in test.get_batch(0)]
    assert [e.answer for e in test_envs] == ["56", "8", "\\frac{1}{4}"]  # type: ignore[attr-defined]
    assert train.get_batch(0)[0].logging_tags() == ["math"]
    assert test_envs[0].convo_prefix == standard_convo_prefix()  # type: ignore[attr-defined]


def test_builder_without_prefix() -> None:
    train, _ = asyncio.run(_builder(convo_prefix=None, max_test_problems=1)())
    env = asyncio.run(train.get_batch(0)[0].make_envs())[0]
    assert env.convo_prefix == []  # type: ignore[attr-defined]


def test_a_row_without_an_answer_is_named() -> None:
    with pytest.raises(DataFormatError, match=r"math_bad.jsonl train row 1: the solution has no \\boxed"):
        asyncio.run(_builder(train_file=str(FIXTURES / "math_bad.jsonl"))())


def test_builder_checks() -> None:
    with pytest.raises(ConfigurationError, match="group_size must be >= 2"):
        _builder(group_size=1)
    with pytest.raises(ConfigurationError, match="convo_prefix must be 'standard' or None"):
        _builder(convo_prefix="fancy")


def test_gsm8k_takes_the_standard_prefix_too() -> None:
    from recipes.math.gsm8k import Gsm8kDatasetBuilder

    files = {"train_file": str(FIXTURES / "gsm8k_train.jsonl"), "test_file": str(FIXTURES / "gsm8k_test.jsonl")}
    train, _ = asyncio.run(Gsm8kDatasetBuilder(model_name_for_tokenizer=TINY, batch_size=1, convo_prefix="standard",
                                               **files)())
    assert asyncio.run(train.get_batch(0)[0].make_envs())[0].convo_prefix == standard_convo_prefix()  # type: ignore[attr-defined]
    train, _ = asyncio.run(Gsm8kDatasetBuilder(model_name_for_tokenizer=TINY, batch_size=1, **files)())
    assert asyncio.run(train.get_batch(0)[0].make_envs())[0].convo_prefix == []  # type: ignore[attr-defined]
