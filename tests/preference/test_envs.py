"""Pairwise-preference RL pieces: the tournament, win rates, and a group scored by a fake model."""

import asyncio

import pytest
from tinker import types

from preference.envs import PairwisePreferenceGroupBuilder, tournament_pairs, unique_prompts, win_rates
from preference.reward_model import PreferenceModel
from preference.types import Comparison, LabeledComparison
from recipes_lib.completers import TokensWithLogprobs
from recipes_lib.tokenizers import get_tokenizer
from renderers import get_renderer
from rl.types import Trajectory, Transition


def test_tournament_pairs() -> None:
    assert tournament_pairs(3, "all_pairs_one_way") == [(0, 1), (0, 2), (1, 2)]
    assert tournament_pairs(3, "all_pairs_both_ways") == [(0, 1), (0, 2), (1, 2), (1, 0), (2, 0), (2, 1)]


def test_win_rates_by_hand() -> None:
    # 0 vs 1: B (1) clearly better; 0 vs 2: no preference; 1 vs 2: A (1) somewhat better (score -0.5).
    rates = win_rates(3, [(0, 1), (0, 2), (1, 2)], [1.0, 0.0, -0.5])
    assert rates == pytest.approx([(0.0 + 0.5) / 2, (1.0 + 0.75) / 2, (0.5 + 0.25) / 2])
    assert sum(rates) == pytest.approx(1.5)  # every comparison hands out exactly one point
    assert win_rates(2, [], []) == [0.5, 0.5]


def test_both_orders_cancel_a_judges_position_lean_on_equal_replies() -> None:
    """A judge that, between equal replies, always favours position A (score -0.8 on every pair)."""
    one_way = tournament_pairs(4, "all_pairs_one_way")
    both = tournament_pairs(4, "all_pairs_both_ways")
    assert win_rates(4, one_way, [-0.8] * len(one_way)) == pytest.approx([0.9, 0.9 * 2 / 3 + 0.1 / 3, 0.9 / 3 + 0.2 / 3, 0.1])
    assert win_rates(4, both, [-0.8] * len(both)) == pytest.approx([0.5] * 4)


class LongerIsBetter(PreferenceModel):
    """A fake judge: +1 when B is longer, -1 when A is longer, 0 on equal lengths."""

    async def __call__(self, comparison: Comparison) -> float:
        a, b = len(comparison.completion_A[0]["content"]), len(comparison.completion_B[0]["content"])
        return float((b > a) - (a > b))


def trajectory(tokens: list[int]) -> Trajectory:
    action = TokensWithLogprobs(tokens, [0.0] * len(tokens))
    return Trajectory([Transition(types.ModelInput.from_ints([1]), action, 0.0, True)], types.ModelInput.empty())


def test_group_rewards_are_win_rates_of_the_judge() -> None:
    renderer = get_renderer("smollm2", get_tokenizer("recipes/tiny-llama"))
    end = renderer.get_stop_sequences()
    replies = ["a", "a longer reply", "mid reply"]
    builder = PairwisePreferenceGroupBuilder([{"role": "user", "content": "Say something."}], renderer,
                                             LongerIsBetter(), num_envs=3)
    envs = asyncio.run(builder.make_envs())
    assert len(envs) == 3
    trajectories = [trajectory(renderer.encode(text) + list(end)) for text in replies]  # type: ignore[arg-type]
    rewards = asyncio.run(builder.compute_group_rewards(trajectories))
    assert [r for r, _ in rewards] == pytest.approx([0.0, 1.0, 0.5])
    assert rewards[1][1] == {"win_rate": 1.0, "judge_decisiveness": 1.0}  # every pair had a clear winner


def test_unique_prompts_keeps_first_seen_order() -> None:
    def comparison(question: str) -> LabeledComparison:
        return LabeledComparison(Comparison([{"role": "user", "content": question}], [], []), "A")  # type: ignore[list-item]

    prompts = unique_prompts([comparison("x"), comparison("y"), comparison("x")])
    assert prompts == [[{"role": "user", "content": "x"}], [{"role": "user", "content": "y"}]]
