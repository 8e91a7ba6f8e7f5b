"""Advantages (pure): group-centred rewards, dropping groups with nothing to learn, KL shaping.

GRPO-style: a trajectory's advantage is its total reward minus the mean of its group, with no
division by the standard deviation. A group whose rewards are all equal has zero advantages and
teaches nothing, so it can be dropped before training to save compute.
"""

from collections.abc import Sequence

import numpy as np

from rl.types import TrajectoryGroup


def compute_advantages(groups_P: Sequence[TrajectoryGroup]) -> list[np.ndarray]:
    """Each trajectory's total reward minus its group's mean.

    Returns:
        advantages_P_G: one float array of shape (G,) per group.
    """
    advantages_P_G = []
    for group in groups_P:
        rewards_G = np.asarray(group.get_total_rewards(), dtype=np.float64)
        advantages_P_G.append(rewards_G - rewards_G.mean())
    return advantages_P_G


def is_constant_reward(group: TrajectoryGroup) -> bool:
    """True when every trajectory of the group has the same total reward."""
    rewards_G = group.get_total_rewards()
    return all(reward == rewards_G[0] for reward in rewards_G)


def remove_constant_reward_groups(groups_P: Sequence[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """The groups whose rewards differ (all others have zero advantage everywhere)."""
    return [group for group in groups_P if not is_constant_reward(group)]


def kl_penalty(
    advantages_D: Sequence[np.ndarray],
    sampler_logprobs_D: Sequence[np.ndarray],
    base_logprobs_D: Sequence[np.ndarray],
    masks_D: Sequence[np.ndarray],
    coef: float,
) -> tuple[list[np.ndarray], float]:
    """Shape per-token advantages with a penalty on drifting from the base model.

    With `kl_t = sampler_logprob_t - base_logprob_t` on action tokens (a one-sample estimate of
    KL(policy || base)) and `kl_mean` its mean over all action tokens of the batch, each action
    token's advantage gains `coef * (kl_mean - kl_t)`: tokens the policy likes more than the base
    does are pushed down, relative to the batch. Observation tokens (mask 0) are unchanged.

    Args:
        advantages_D, sampler_logprobs_D, base_logprobs_D, masks_D: per datum, arrays of shape (T,).
        coef: the penalty's weight (`kl_penalty_coef`).

    Returns:
        (advantages_D with the penalty added, kl_mean).
    """
    kl_D = [(s - b) * m for s, b, m in zip(sampler_logprobs_D, base_logprobs_D, masks_D, strict=True)]
    num_action_tokens = sum(float(m.sum()) for m in masks_D)
    kl_mean = sum(float(kl.sum()) for kl in kl_D) / max(num_action_tokens, 1.0)
    shaped_D = [a + coef * (kl_mean - kl) * m for a, kl, m in zip(advantages_D, kl_D, masks_D, strict=True)]
    return shaped_D, kl_mean
