"""The RL interfaces a task implements, and the records a rollout produces.

A task is an `Env` (one episode: observe tokens, act with tokens, get rewards), built in groups by
an `EnvGroupBuilder` (the group shares a prompt, so rewards can be compared within it), served in
batches by an `RLDataset`, which an `RLDatasetBuilder` (a chz config) constructs.

Envs work in tokens, not text: training needs the exact tokens that were sampled and their
log-probs. `rl.problem_env.ProblemEnv` and `rl.message_env.MessageEnv` let a task be written in
text or chat messages instead.

Shape suffixes used across `rl/`: `_P` problems (groups) in a batch, `_G` trajectories in a group,
`_T` tokens of one sequence, `_D` datums of a training batch.
"""

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import chz
import tinker

from recipes_lib.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from renderers.completers import MessageCompleter

Action = list[int]
Observation = tinker.types.ModelInput
Metrics = dict[str, float]

__all__ = [
    "Action",
    "Env",
    "EnvGroupBuilder",
    "MessageCompleter",
    "Metrics",
    "Observation",
    "RLDataset",
    "RLDatasetBuilder",
    "StepResult",
    "StopCondition",
    "TokenCompleter",
    "TokensWithLogprobs",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
]


@dataclass(frozen=True)
class StepResult:
    """What an env returns after one action.

    Attributes:
        reward: the reward of this step (a trajectory's reward is the sum over its steps).
        episode_done: True ends the episode; `next_observation` is then ignored.
        next_observation: the tokens the policy sees next (the whole context, not a delta).
        next_stop_condition: where the next sample stops (stop token ids or strings).
        metrics: numbers to average into `env/all/<name>` (e.g. `correct`, `format`).
    """

    reward: float
    episode_done: bool
    next_observation: Observation
    next_stop_condition: StopCondition
    metrics: Metrics = field(default_factory=dict)


class Env(ABC):
    """One episode of a task, for one agent; used once, then discarded (there is no reset)."""

    @abstractmethod
    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        """The first prompt and where sampling from it stops."""

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Score the sampled tokens `action` and say what comes next."""


@dataclass(frozen=True)
class Transition:
    """One turn: the observation, the sampled action (tokens and log-probs), and its outcome."""

    ob: Observation
    ac: TokensWithLogprobs
    reward: float
    episode_done: bool
    metrics: Metrics = field(default_factory=dict)


@dataclass(frozen=True)
class Trajectory:
    """One episode: its turns in order, and the observation it ended on."""

    transitions: list[Transition]
    final_ob: Observation

    @property
    def total_step_reward(self) -> float:
        return sum(t.reward for t in self.transitions)


@dataclass(frozen=True)
class TrajectoryGroup:
    """The episodes of one group, with the group-level reward and metrics of each.

    Attributes:
        trajectories_G: one trajectory per env of the group.
        final_rewards_G: the group reward of each trajectory (`compute_group_rewards`), added to
            its step rewards.
        metrics_G: the group metrics of each trajectory.
    """

    trajectories_G: list[Trajectory]
    final_rewards_G: list[float]
    metrics_G: list[Metrics]

    def get_total_rewards(self) -> list[float]:
        """Step rewards plus group reward, per trajectory, `(G,)`."""
        return [t.total_step_reward + r for t, r in zip(self.trajectories_G, self.final_rewards_G, strict=True)]

    def has_finite_rewards(self) -> bool:
        return all(math.isfinite(r) for r in self.get_total_rewards())


class EnvGroupBuilder(ABC):
    """Builds the envs of one group (usually copies of one problem). Must be picklable."""

    @abstractmethod
    async def make_envs(self) -> Sequence[Env]:
        """Fresh envs, one per trajectory of the group."""

    async def compute_group_rewards(self, trajectories_G: Sequence[Trajectory]) -> list[tuple[float, Metrics]]:
        """A reward and metrics per trajectory that depend on the whole group (default: none).

        Override for rewards that compare samples, e.g. a pairwise judge.
        """
        return [(0.0, {}) for _ in trajectories_G]

    def logging_tags(self) -> list[str]:
        """Names under which this group's metrics are also reported (`env/<tag>/...`)."""
        return []


class RLDataset(ABC):
    """A sequence of batches of env group builders."""

    @abstractmethod
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        """The groups of batch `index` (the same groups every time, so a resumed run repeats nothing)."""

    @abstractmethod
    def __len__(self) -> int:
        """The number of batches."""


@chz.chz
class RLDatasetBuilder:
    """A config that builds the training dataset and, optionally, a held-out test dataset."""

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        raise NotImplementedError(f"{type(self).__name__} must implement async __call__().")
