"""Rollouts with a scripted policy: turns in order, group rewards, env errors named with their cause."""

import asyncio
import traceback
from collections.abc import Sequence
from typing import Any

import pytest

from rl.dataset import RepeatedEnvGroupBuilder
from rl.rollouts import (
    RolloutError,
    RolloutLimits,
    do_group_rollout,
    do_single_rollout,
    gather_or_cancel,
    rollout_group,
)
from rl.types import Env, Metrics, Trajectory
from tests.rl.fakes import EchoEnv, FailingEnv, ScriptedCompleter


def test_single_rollout_runs_until_the_env_is_done() -> None:
    policy = ScriptedCompleter([[7, 7], [5]])
    traj = asyncio.run(do_single_rollout(policy, EchoEnv()))
    assert [t.ob.to_ints() for t in traj.transitions] == [[1, 2], [1, 2, 7, 7, 9]]
    assert [t.ac.tokens for t in traj.transitions] == [[7, 7], [5]]
    assert [t.reward for t in traj.transitions] == [2.0, 0.0]
    assert [t.episode_done for t in traj.transitions] == [False, True]
    assert traj.transitions[0].metrics == {"sevens": 2.0}
    assert traj.final_ob.to_ints() == [1, 2, 7, 7, 9, 5, 9]


class _RankingBuilder(RepeatedEnvGroupBuilder):
    """Adds a group reward: +1 to the trajectory with the most step reward."""

    async def compute_group_rewards(self, trajectories_G: Sequence[Trajectory]) -> list[tuple[float, Metrics]]:
        totals = [t.total_step_reward for t in trajectories_G]
        return [(float(total == max(totals)), {"is_best": float(total == max(totals))}) for total in totals]


def test_group_rollout_adds_group_rewards() -> None:
    # Two envs, each two turns: env 0 gets [7] then [1]; env 1 gets [1] then [1] -> steps 1 and 0.
    policy = ScriptedCompleter([[7], [1], [1], [1]])
    group = asyncio.run(do_group_rollout(_RankingBuilder(EchoEnv, num_envs=2), policy))
    assert sorted(group.get_total_rewards()) == [0.0, 2.0]
    assert sorted(m["is_best"] for m in group.metrics_G) == [0.0, 1.0]


def test_an_env_error_names_the_env_and_keeps_the_original_traceback() -> None:
    policy = ScriptedCompleter([[1]])
    with pytest.raises(RolloutError, match=r"FailingEnv\.step raised ValueError: the grader crashed") as info:
        asyncio.run(do_group_rollout(RepeatedEnvGroupBuilder(FailingEnv, num_envs=2), policy))
    assert info.value.env_name == "FailingEnv" and info.value.error_type == "ValueError"
    assert isinstance(info.value.__cause__, ValueError)
    printed = "".join(traceback.format_exception(info.value))
    assert "in step" in printed and 'raise ValueError("the grader crashed")' in printed


class _BrokenBuilder(RepeatedEnvGroupBuilder):
    async def make_envs(self) -> Sequence[Env]:
        raise KeyError("no such problem")


def test_a_builder_error_names_the_builder() -> None:
    with pytest.raises(RolloutError, match=r"_BrokenBuilder\.make_envs raised KeyError"):
        asyncio.run(do_group_rollout(_BrokenBuilder(EchoEnv, num_envs=1), ScriptedCompleter([[1]])))


def test_gather_or_cancel_cancels_the_others_on_failure() -> None:
    cancelled = []

    async def slow() -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return 1

    async def fail() -> int:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    async def run() -> None:
        with pytest.raises(RuntimeError):
            await gather_or_cancel([slow(), fail()])
        await asyncio.sleep(0)

    asyncio.run(run())
    assert cancelled == [True]


class _FlakyBuilder(RepeatedEnvGroupBuilder):
    """Each `make_envs` call gives fresh envs; env `failing` fails on its first `fails` makings."""

    def __init__(self, num_envs: int, failing: int, fails: int):
        super().__init__(EchoEnv, num_envs)
        self.failing, self.fails, self.makings = failing, fails, 0

    async def make_envs(self) -> Sequence[Env]:
        self.makings += 1
        envs: list[Env] = [EchoEnv() for _ in range(self.num_envs)]
        if self.makings <= self.fails:
            envs[self.failing] = FailingEnv()
        return envs


def test_a_failed_rollout_reruns_on_a_fresh_env() -> None:
    """Env 1 fails on the first making only: with one retry the group is whole; the error is returned."""
    builder = _FlakyBuilder(num_envs=3, failing=1, fails=1)
    group, recovered = asyncio.run(rollout_group(builder, ScriptedCompleter([[7], [1]]), limits=RolloutLimits(max_retries=1)))
    assert len(group.trajectories_G) == 3 and builder.makings == 2
    assert [e.error_type for e in recovered] == ["ValueError"]
    assert group.get_total_rewards() == [1.0, 1.0, 1.0]  # every env replied [7] then [1]


def test_retries_run_out_and_the_group_fails_with_the_count() -> None:
    builder = _FlakyBuilder(num_envs=3, failing=0, fails=10)
    with pytest.raises(RolloutError, match=r"1 of 3 rollouts of the group failed after 2 retries \(it needs 3\)"):
        asyncio.run(rollout_group(builder, ScriptedCompleter([[1]]), limits=RolloutLimits(max_retries=2)))
    assert builder.makings == 3  # the first making and two retries


def test_a_group_goes_on_without_its_failed_rollout_when_enough_succeed() -> None:
    builder = _FlakyBuilder(num_envs=3, failing=2, fails=10)
    group, recovered = asyncio.run(rollout_group(builder, ScriptedCompleter([[7], [7]]),
                                                 limits=RolloutLimits(min_successful=2)))
    assert group.get_total_rewards() == [2.0, 2.0] and len(recovered) == 1
    with pytest.raises(RolloutError, match=r"1 of 3 rollouts .* \(it needs 3\)"):
        asyncio.run(rollout_group(_FlakyBuilder(3, 2, 10), ScriptedCompleter([[1]]),
                                  limits=RolloutLimits(min_successful=3)))


def test_a_hanging_rollout_times_out_and_is_retried() -> None:
    class Hangs(EchoEnv):
        async def step(self, action: Sequence[int]) -> Any:
            await asyncio.sleep(60)

    class HangsOnce(_FlakyBuilder):
        async def make_envs(self) -> Sequence[Env]:
            self.makings += 1
            return [Hangs() if self.makings == 1 and i == 0 else EchoEnv() for i in range(self.num_envs)]

    builder = HangsOnce(num_envs=2, failing=0, fails=0)
    group, recovered = asyncio.run(rollout_group(builder, ScriptedCompleter([[7]]),
                                                 limits=RolloutLimits(timeout_s=0.2, max_retries=1)))
    assert len(group.trajectories_G) == 2 and [e.error_type for e in recovered] == ["Timeout"]


def test_a_policy_error_is_never_retried() -> None:
    class Broken(ScriptedCompleter):
        async def __call__(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("the sampler is gone")

    with pytest.raises(ConnectionError, match="the sampler is gone"):
        asyncio.run(rollout_group(_FlakyBuilder(2, 0, 0), Broken([[1]]), limits=RolloutLimits(max_retries=5)))
