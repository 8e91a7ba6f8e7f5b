"""Fakes for RL tests: a scripted policy, envs that succeed, fail or return NaN, and record builders."""

from collections.abc import Sequence

import chz
import tinker

from recipes_lib.completers import StopCondition, TokensWithLogprobs
from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder
from rl.types import (
    Action,
    Env,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    Trajectory,
    TrajectoryGroup,
    Transition,
)


def ints(tokens: Sequence[int]) -> tinker.types.ModelInput:
    return tinker.types.ModelInput.from_ints(list(tokens))


def transition(ob: Sequence[int], ac: Sequence[int], logprobs: Sequence[float], reward: float = 0.0,
               metrics: dict[str, float] | None = None, done: bool = True) -> Transition:
    return Transition(ints(ob), TokensWithLogprobs(list(ac), list(logprobs)), reward, done, metrics or {})


def trajectory(*transitions: Transition) -> Trajectory:
    return Trajectory(list(transitions), final_ob=tinker.types.ModelInput.empty())


def group_with_rewards(rewards: Sequence[float], ac_len: int = 1) -> TrajectoryGroup:
    """A group of single-turn trajectories with these rewards (observation [1, 2], action of ac_len)."""
    trajectories = [trajectory(transition([1, 2], [3] * ac_len, [-0.5] * ac_len, reward=r)) for r in rewards]
    return TrajectoryGroup(trajectories, [0.0] * len(rewards), [{} for _ in rewards])


class ScriptedCompleter:
    """A TokenCompleter that replies with the given token lists in turn (log-prob -0.5 each)."""

    def __init__(self, replies: Sequence[Sequence[int]]):
        self.replies = [list(r) for r in replies]
        self.prompts: list[list[int]] = []

    async def __call__(self, model_input: tinker.types.ModelInput, stop: StopCondition, *,
                      max_tokens: int | None = None) -> TokensWithLogprobs:
        self.prompts.append(list(model_input.to_ints()))
        tokens = self.replies[(len(self.prompts) - 1) % len(self.replies)]
        return TokensWithLogprobs(tokens, [-0.5] * len(tokens))


class EchoEnv(Env):
    """Two turns: observation [1, 2], then the history plus [9]; reward 1 per action token 7."""

    def __init__(self) -> None:
        self.history: list[int] = [1, 2]
        self.turn = 0

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return ints(self.history), [0]

    async def step(self, action: Action) -> StepResult:
        self.turn += 1
        self.history = self.history + list(action) + [9]
        reward = float(action.count(7))
        return StepResult(reward, self.turn == 2, ints(self.history), [0], {"sevens": reward})


class FailingEnv(Env):
    """Raises in `step`."""

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return ints([1, 2, 3]), [0]

    async def step(self, action: Action) -> StepResult:
        raise ValueError("the grader crashed")


class NanRewardEnv(Env):
    """Rewards NaN."""

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return ints([1, 2, 3]), [0]

    async def step(self, action: Action) -> StepResult:
        return StepResult(float("nan"), True, tinker.types.ModelInput.empty(), [0])


def dataset_of(env_type: type[Env], groups: int = 2, group_size: int = 2, batches: int = 2) -> RLDataset:
    builders = [RepeatedEnvGroupBuilder(env_type, group_size, tags=("fake",)) for _ in range(groups * batches)]
    return ListRLDataset(builders, batch_size=groups)


@chz.chz
class FakeDatasetBuilder(RLDatasetBuilder):
    """Hands out ready-made datasets."""

    train: RLDataset
    test: RLDataset | None = None

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return self.train, self.test
