"""RL metrics (pure), named as the Tinker docs name them.

Trajectory metrics, under `env/all/` and, for a tag that selects only some groups, `env/<tag>/`:

    reward/total          mean total reward (step rewards + group reward) per episode
    <name>                mean of each env metric (`correct`, `format`, ...) over the turns reporting it,
                          and of each group metric over the episodes reporting it
    ac_tokens_per_turn    mean sampled tokens per turn; ob_tokens_per_turn likewise for observations
    turns_per_episode, total_episodes, total_turns, total_ac_tokens, total_ob_tokens
    by_group/frac_mixed   fraction of groups whose rewards differ (only these give a gradient);
    by_group/frac_all_good, by_group/frac_all_bad   constant groups with reward > 0, and <= 0

Sampler-vs-trainer metrics over the action tokens of a training batch, with `d = sampler logprob
- trainer logprob` per token:

    optim/kl_sample_train_v1 = mean(d)          optim/kl_sample_train_v2 = mean(d**2) / 2
    optim/entropy = -mean(sampler logprob)
"""

from collections.abc import Sequence

import numpy as np
import tinker

from rl.data import loss_input
from rl.types import Metrics, TrajectoryGroup


def compute_trajectory_metrics(groups_P: Sequence[TrajectoryGroup], tags_P: Sequence[Sequence[str]]) -> Metrics:
    """`env/all/...` over every group, and `env/<tag>/...` for each tag held by some groups only."""
    metrics = _prefixed("env/all", _group_metrics(groups_P))
    for tag in sorted({tag for tags in tags_P for tag in tags}):
        selected = [group for group, tags in zip(groups_P, tags_P, strict=True) if tag in tags]
        if len(selected) < len(groups_P):
            metrics.update(_prefixed(f"env/{tag}", _group_metrics(selected)))
    return metrics


def _prefixed(prefix: str, metrics: Metrics) -> Metrics:
    return {f"{prefix}/{key}": value for key, value in metrics.items()}


def _group_metrics(groups_P: Sequence[TrajectoryGroup]) -> Metrics:
    trajectories = [t for group in groups_P for t in group.trajectories_G]
    turns = [turn for t in trajectories for turn in t.transitions]
    if not turns:
        return {}
    ac_tokens = sum(len(turn.ac.tokens) for turn in turns)
    ob_tokens = sum(turn.ob.length for turn in turns)
    metrics: Metrics = {
        "reward/total": float(np.mean([r for group in groups_P for r in group.get_total_rewards()])),
        "ac_tokens_per_turn": ac_tokens / len(turns),
        "ob_tokens_per_turn": ob_tokens / len(turns),
        "turns_per_episode": len(turns) / len(trajectories),
        "total_episodes": float(len(trajectories)),
        "total_turns": float(len(turns)),
        "total_ac_tokens": float(ac_tokens),
        "total_ob_tokens": float(ob_tokens),
    }
    metrics.update(_mean_by_key([turn.metrics for turn in turns]))
    metrics.update(_mean_by_key([m for group in groups_P for m in group.metrics_G]))
    metrics.update(_by_group(groups_P))
    return metrics


def _mean_by_key(rows: Sequence[Metrics]) -> Metrics:
    """Each key's mean over the rows that have it."""
    keys = sorted({key for row in rows for key in row})
    return {key: float(np.mean([float(row[key]) for row in rows if key in row])) for key in keys}


def _by_group(groups_P: Sequence[TrajectoryGroup]) -> Metrics:
    mixed = good = bad = 0
    for group in groups_P:
        rewards_G = group.get_total_rewards()
        if any(reward != rewards_G[0] for reward in rewards_G):
            mixed += 1
        elif rewards_G[0] > 0:
            good += 1
        else:
            bad += 1
    n = max(len(groups_P), 1)
    return {"by_group/frac_mixed": mixed / n, "by_group/frac_all_good": good / n, "by_group/frac_all_bad": bad / n}


def compute_kl_sample_train(
    data_D: Sequence[tinker.types.Datum], masks_D: Sequence[np.ndarray], training_logprobs_D: Sequence[np.ndarray]
) -> Metrics:
    """KL(sampler || trainer) estimates and the sampler's entropy over action tokens (see module doc).

    Args:
        data_D: RL datums whose `logprobs` input holds the sampler's log-probs, shape (T,).
        masks_D: 1.0 on action tokens, shape (T,).
        training_logprobs_D: the trainer's log-probs of the same targets, shape (T,).
    """
    sampler, trainer = [], []
    for datum, mask, training_logprobs in zip(data_D, masks_D, training_logprobs_D, strict=True):
        selected = np.asarray(mask) > 0
        sampler.append(loss_input(datum, "logprobs")[selected])
        trainer.append(np.asarray(training_logprobs, dtype=np.float64)[selected])
    if not sampler or sum(len(s) for s in sampler) == 0:
        return {}
    sampler_N, diff_N = np.concatenate(sampler), np.concatenate(sampler) - np.concatenate(trainer)
    return {
        "optim/kl_sample_train_v1": float(diff_N.mean()),
        "optim/kl_sample_train_v2": float(0.5 * (diff_N**2).mean()),
        "optim/entropy": float(-sampler_N.mean()),
    }
