"""Trajectory metrics and sampler-vs-trainer KL metrics against hand-computed values."""

import numpy as np
import pytest
import tinker

from rl.metrics import compute_kl_sample_train, compute_trajectory_metrics
from rl.types import TrajectoryGroup
from tests.rl.fakes import group_with_rewards, trajectory, transition


def _rl_datum(logprobs: list[float]) -> tinker.types.Datum:
    n = len(logprobs)
    return tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints([1] * n),
        loss_fn_inputs={"target_tokens": np.ones(n, dtype=np.int64), "logprobs": np.asarray(logprobs, np.float32),
                        "advantages": np.zeros(n, dtype=np.float32)},
    )


def test_kl_sample_train_on_action_tokens_only() -> None:
    # Action tokens: datum 0 positions 1, 2; datum 1 position 0. Sampler [-1, -2, -0.5], trainer
    # [-1.5, -2, -0.25]: d = [0.5, 0, -0.25]. v1 = 0.25/3; v2 = (0.25 + 0 + 0.0625) / 3 / 2;
    # entropy = (1 + 2 + 0.5) / 3. The observation token (sampler 0, trainer -9) is ignored.
    data = [_rl_datum([0.0, -1.0, -2.0]), _rl_datum([-0.5])]
    masks = [np.array([0.0, 1.0, 1.0]), np.array([1.0])]
    trainer = [np.array([-9.0, -1.5, -2.0]), np.array([-0.25])]
    metrics = compute_kl_sample_train(data, masks, trainer)
    assert metrics["optim/kl_sample_train_v1"] == pytest.approx(0.25 / 3)
    assert metrics["optim/kl_sample_train_v2"] == pytest.approx(0.3125 / 6)
    assert metrics["optim/entropy"] == pytest.approx(3.5 / 3)


def test_kl_sample_train_without_action_tokens_is_empty() -> None:
    assert compute_kl_sample_train([], [], []) == {}


def test_trajectory_metrics_of_one_group() -> None:
    # Rewards [1, 0, 0, 1] -> mean 0.5; actions of 2 tokens; observations of 2 tokens ([1, 2]).
    metrics = compute_trajectory_metrics([group_with_rewards([1, 0, 0, 1], ac_len=2)], [["arith"]])
    assert metrics == {
        "env/all/reward/total": 0.5,
        "env/all/ac_tokens_per_turn": 2.0,
        "env/all/ob_tokens_per_turn": 2.0,
        "env/all/turns_per_episode": 1.0,
        "env/all/total_episodes": 4.0,
        "env/all/total_turns": 4.0,
        "env/all/total_ac_tokens": 8.0,
        "env/all/total_ob_tokens": 8.0,
        "env/all/by_group/frac_mixed": 1.0,
        "env/all/by_group/frac_all_good": 0.0,
        "env/all/by_group/frac_all_bad": 0.0,
    }  # a tag held by every group adds no env/<tag>/ copy


def test_env_metrics_are_averaged_over_the_turns_that_report_them() -> None:
    # Episode A: two turns, `correct` reported only at the end (1); episode B: one turn (0) -> mean 0.5.
    # `format` reported on all three turns: (1 + 1 + 0) / 3. Group metric `judge` per episode: (2 + 4) / 2.
    a = trajectory(transition([1], [2], [-1.0], metrics={"format": 1.0}, done=False),
                   transition([1, 2, 5], [3], [-1.0], reward=1.0, metrics={"format": 1.0, "correct": 1.0}))
    b = trajectory(transition([1], [4, 4], [-1.0, -1.0], metrics={"format": 0.0, "correct": 0.0}))
    group = TrajectoryGroup([a, b], [0.0, 0.0], [{"judge": 2.0}, {"judge": 4.0}])
    metrics = compute_trajectory_metrics([group], [[]])
    assert metrics["env/all/correct"] == 0.5
    assert metrics["env/all/format"] == pytest.approx(2 / 3)
    assert metrics["env/all/judge"] == 3.0
    assert metrics["env/all/turns_per_episode"] == 1.5
    assert metrics["env/all/ac_tokens_per_turn"] == pytest.approx(4 / 3)
    assert metrics["env/all/ob_tokens_per_turn"] == pytest.approx(5 / 3)


def test_by_group_fractions_and_per_tag_metrics() -> None:
    groups = [group_with_rewards([1, 1]), group_with_rewards([0, 0]), group_with_rewards([-0.1, -0.1]),
              group_with_rewards([1, 0])]
    tags = [["easy"], ["hard"], ["hard"], ["easy"]]
    metrics = compute_trajectory_metrics(groups, tags)
    assert metrics["env/all/by_group/frac_all_good"] == 0.25
    assert metrics["env/all/by_group/frac_all_bad"] == 0.5
    assert metrics["env/all/by_group/frac_mixed"] == 0.25
    assert metrics["env/easy/reward/total"] == 0.75  # (1 + 1 + 1 + 0) / 4
    assert metrics["env/hard/reward/total"] == pytest.approx(-0.05)
    assert metrics["env/hard/by_group/frac_all_bad"] == 1.0
