"""Advantages (pure): group-centred rewards, how token terms add up, dropping groups with nothing to
learn, KL shaping.

By default a trajectory's advantage is its total reward minus the mean of its group, with no
division by the standard deviation (`advantage_normalization`); a group whose rewards are all equal
has zero advantages and teaches nothing, so it can be dropped before training to save compute.
"""

from collections.abc import Sequence
from typing import Literal

import numpy as np

from rl.types import TrajectoryGroup

AdvantageNormalization = Literal["group_mean", "group_std", "batch_std"]
LossAggregation = Literal["token_sum", "sequence_mean", "token_mean", "constant"]
# Added to a standard deviation before dividing by it (a group of nearly equal rewards stays finite).
STD_EPSILON = 1e-4


def compute_advantages(
    groups_P: Sequence[TrajectoryGroup], normalization: AdvantageNormalization = "group_mean"
) -> list[np.ndarray]:
    """Each trajectory's advantage from the total rewards R of its group (G trajectories):

    - `group_mean`: `A = R - mean(R)`;
    - `group_std` (GRPO): `A = (R - mean(R)) / (std(R) + 1e-4)`, std with G - 1 degrees of freedom;
    - `batch_std`: `A = (R - mean(R)) / (std(C) + 1e-4)`, C every group's centred rewards `R - mean(R)`
      together (the groups trained together), std with N - 1 degrees of freedom.

    Returns:
        advantages_P_G: one float array of shape (G,) per group.
    """
    centred_P_G = []
    for group in groups_P:
        rewards_G = np.asarray(group.get_total_rewards(), dtype=np.float64)
        centred_P_G.append(rewards_G - rewards_G.mean())
    if normalization == "group_mean":
        return centred_P_G
    if normalization == "group_std":
        return [c / (_std(c) + STD_EPSILON) for c in centred_P_G]
    if normalization == "batch_std":
        scale = _std(np.concatenate(centred_P_G)) + STD_EPSILON if centred_P_G else 1.0
        return [c / scale for c in centred_P_G]
    raise ValueError(f"unknown advantage normalization {normalization!r}")


def _std(values: np.ndarray) -> float:
    return float(values.std(ddof=1)) if len(values) > 1 else 0.0


def aggregate_advantages(
    advantages_D: Sequence[np.ndarray], masks_D: Sequence[np.ndarray], aggregation: LossAggregation, constant: float
) -> list[np.ndarray]:
    """Advantages scaled so that the engine's sum over tokens aggregates the token terms as chosen.

    Every policy-gradient loss here is a sum of per-token terms proportional to their advantage, so
    scaling datum d's advantages by `c_d > 0` weights its terms by `c_d`. With `n_d` the action tokens
    of datum d (mask 1) and N their total over the datums trained together:

    - `token_sum`: `c_d = 1` (every token counts once);
    - `sequence_mean`: `c_d = 1 / n_d` (each sequence's mean token term; every sequence counts once);
    - `token_mean` (DAPO): `c_d = 1 / N` (the mean over every token trained together);
    - `constant` (Dr.GRPO): `c_d = 1 / constant` (a fixed normaliser: the run's `max_tokens`).

    (`dro`'s penalty term does not depend on the advantage, so it stays a sum over tokens.)
    """
    counts_D = [float(np.asarray(m).sum()) for m in masks_D]
    if aggregation == "token_sum":
        scales_D = [1.0] * len(counts_D)
    elif aggregation == "sequence_mean":
        scales_D = [1.0 / max(n, 1.0) for n in counts_D]
    elif aggregation == "token_mean":
        scales_D = [1.0 / max(sum(counts_D), 1.0)] * len(counts_D)
    elif aggregation == "constant":
        scales_D = [1.0 / constant] * len(counts_D)
    else:
        raise ValueError(f"unknown loss aggregation {aggregation!r}")
    return [np.asarray(a, dtype=np.float64) * c for a, c in zip(advantages_D, scales_D, strict=True)]


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
    discount: float = 0.0,
) -> tuple[list[np.ndarray], float]:
    """Shape per-token advantages with a penalty on drifting from a reference model (the base model,
    or the weights `kl_reference_path` names).

    With `kl_t = sampler_logprob_t - base_logprob_t` on action tokens (a one-sample estimate of
    KL(policy || reference)) and `kl_mean` its mean over all action tokens of the batch, action token
    t's penalty is `p_t = coef * (kl_mean - kl_t)`: tokens the policy likes more than the reference
    does are pushed down, relative to the batch. With a `discount` g > 0 a token also answers for
    the penalties after it in its datum, as a return does: it gains `sum over k >= 0 of g^k p_(t+k)`
    (`kl_discount_factor`); with g = 0, `p_t` alone. Observation tokens (mask 0) are unchanged.

    Args:
        advantages_D, sampler_logprobs_D, base_logprobs_D, masks_D: per datum, arrays of shape (T,).
        coef: the penalty's weight (`kl_penalty_coef`).
        discount: g, in [0, 1).

    Returns:
        (advantages_D with the penalty added, kl_mean).
    """
    kl_D = [(s - b) * m for s, b, m in zip(sampler_logprobs_D, base_logprobs_D, masks_D, strict=True)]
    num_action_tokens = sum(float(m.sum()) for m in masks_D)
    kl_mean = sum(float(kl.sum()) for kl in kl_D) / max(num_action_tokens, 1.0)
    penalties_D = [coef * (kl_mean - kl) * m for kl, m in zip(kl_D, masks_D, strict=True)]
    if discount > 0:
        penalties_D = [_discounted_sums(p, discount) * m for p, m in zip(penalties_D, masks_D, strict=True)]
    return [a + p for a, p in zip(advantages_D, penalties_D, strict=True)], kl_mean


def _discounted_sums(values_T: np.ndarray, discount: float) -> np.ndarray:
    """`out_t = sum over k >= 0 of discount^k * values_(t+k)`, right to left."""
    out = np.zeros(len(values_T), dtype=np.float64)
    running = 0.0
    for t in range(len(values_T) - 1, -1, -1):
        running = float(values_T[t]) + discount * running
        out[t] = running
    return out
