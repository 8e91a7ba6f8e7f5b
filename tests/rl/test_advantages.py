"""Advantages, constant-group removal and KL shaping against hand-computed values."""

import numpy as np
import pytest

from rl.advantages import (
    aggregate_advantages,
    compute_advantages,
    is_constant_reward,
    kl_penalty,
    remove_constant_reward_groups,
)
from rl.types import TrajectoryGroup
from tests.rl.fakes import group_with_rewards, trajectory, transition


def test_advantages_are_rewards_minus_group_mean() -> None:
    # Means 0.25 and 2.0: [1,0,0,0] -> [.75,-.25,-.25,-.25]; [3,1] -> [1,-1]. No std division.
    advantages = compute_advantages([group_with_rewards([1, 0, 0, 0]), group_with_rewards([3, 1])])
    np.testing.assert_allclose(advantages[0], [0.75, -0.25, -0.25, -0.25])
    np.testing.assert_allclose(advantages[1], [1.0, -1.0])


def test_advantages_include_group_rewards_and_all_steps() -> None:
    # Trajectory 0: steps 1 + 0.5, group reward 1 -> 2.5; trajectory 1: step 0, group reward -0.5 -> -0.5.
    two_steps = trajectory(transition([1], [2], [-1.0], reward=1.0, done=False), transition([1, 2], [3], [-1.0], 0.5))
    one_step = trajectory(transition([1], [2], [-1.0], reward=0.0))
    group = TrajectoryGroup([two_steps, one_step], [1.0, -0.5], [{}, {}])
    assert group.get_total_rewards() == [2.5, -0.5]
    np.testing.assert_allclose(compute_advantages([group])[0], [1.5, -1.5])


@pytest.mark.parametrize(
    ("rewards", "constant"),
    [([1, 1, 1], True), ([0.0, 0.0], True), ([1, 0, 1], False), ([-0.1, -0.1, 0.9], False), ([5], True)],
)
def test_is_constant_reward(rewards: list[float], constant: bool) -> None:
    assert is_constant_reward(group_with_rewards(rewards)) is constant


def test_remove_constant_reward_groups_keeps_mixed_groups_in_order() -> None:
    mixed_a, mixed_b = group_with_rewards([1, 0]), group_with_rewards([0, 0.5])
    groups = [group_with_rewards([1, 1]), mixed_a, group_with_rewards([0, 0]), mixed_b]
    assert remove_constant_reward_groups(groups) == [mixed_a, mixed_b]
    assert remove_constant_reward_groups([group_with_rewards([0, 0])]) == []


def test_kl_penalty_centres_the_log_ratio_on_action_tokens() -> None:
    # Action tokens (mask 1) have kl = sampler - base = [-1 - -2, -1 - -1] = [1, 0] in datum 0 and
    # [-3 - -1] = [-2] in datum 1; kl_mean = (1 + 0 - 2) / 3 = -1/3. With coef 0.3 each action token's
    # advantage gains 0.3 * (-1/3 - kl): -0.4, -0.1, +0.5. The observation token (mask 0) is unchanged.
    advantages = [np.array([0.0, 1.0, 1.0]), np.array([-1.0])]
    sampler = [np.array([0.0, -1.0, -1.0]), np.array([-3.0])]
    base = [np.array([-5.0, -2.0, -1.0]), np.array([-1.0])]
    masks = [np.array([0.0, 1.0, 1.0]), np.array([1.0])]
    shaped, kl_mean = kl_penalty(advantages, sampler, base, masks, coef=0.3)
    assert kl_mean == pytest.approx(-1 / 3)
    np.testing.assert_allclose(shaped[0], [0.0, 0.6, 0.9])
    np.testing.assert_allclose(shaped[1], [-0.5])


def test_a_discounted_kl_penalty_adds_the_later_tokens_penalties() -> None:
    # The same batch with discount 0.5: penalties p = [0, -0.4, -0.1] and [+0.5]; discounted sums
    # right to left within each datum: t2 = -0.1, t1 = -0.4 + 0.5 * -0.1 = -0.45 (the observation
    # token stays 0); the single token of datum 1 keeps +0.5.
    advantages = [np.array([0.0, 1.0, 1.0]), np.array([-1.0])]
    sampler = [np.array([0.0, -1.0, -1.0]), np.array([-3.0])]
    base = [np.array([-5.0, -2.0, -1.0]), np.array([-1.0])]
    masks = [np.array([0.0, 1.0, 1.0]), np.array([1.0])]
    shaped, _ = kl_penalty(advantages, sampler, base, masks, coef=0.3, discount=0.5)
    np.testing.assert_allclose(shaped[0], [0.0, 1.0 - 0.45, 0.9])
    np.testing.assert_allclose(shaped[1], [-0.5])


def test_grpo_divides_by_the_group_standard_deviation() -> None:
    """Rewards (1, 0, 0, 1): mean 0.5, sample std sqrt(1/3) = 0.57735."""
    [a] = compute_advantages([group_with_rewards([1.0, 0.0, 0.0, 1.0])], "group_std")
    np.testing.assert_allclose(a, np.array([0.5, -0.5, -0.5, 0.5]) / (0.5773502691896258 + 1e-4))
    [flat] = compute_advantages([group_with_rewards([2.0, 2.0])], "group_std")
    np.testing.assert_array_equal(flat, [0.0, 0.0])  # equal rewards: zero, not NaN


def test_batch_std_divides_every_group_by_one_scale() -> None:
    """Centred rewards (-1, 1) and (-0.5, 0.5): their sample std over the batch is sqrt(2.5 / 3)."""
    groups = [group_with_rewards([0.0, 2.0]), group_with_rewards([1.0, 2.0])]
    first, second = compute_advantages(groups, "batch_std")
    scale = np.sqrt(2.5 / 3) + 1e-4
    np.testing.assert_allclose(first, np.array([-1.0, 1.0]) / scale)
    np.testing.assert_allclose(second, np.array([-0.5, 0.5]) / scale)


@pytest.mark.parametrize(
    ("aggregation", "scales"),
    [("token_sum", [1.0, 1.0]), ("sequence_mean", [1 / 2, 1 / 4]), ("token_mean", [1 / 6, 1 / 6]),
     ("constant", [1 / 8, 1 / 8])],
)
def test_aggregation_scales_each_datum_by_its_share(aggregation: str, scales: list[float]) -> None:
    """Two datums with 2 and 4 action tokens (6 in all); the Dr.GRPO constant is 8 (max_tokens)."""
    advantages = [np.array([0.0, 1.0, 1.0]), np.array([-2.0, -2.0, -2.0, -2.0, 0.0])]
    masks = [np.array([0.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0, 1.0, 0.0])]
    scaled = aggregate_advantages(advantages, masks, aggregation, 8.0)  # type: ignore[arg-type]
    for got, a, c in zip(scaled, advantages, scales, strict=True):
        np.testing.assert_allclose(got, a * c)
