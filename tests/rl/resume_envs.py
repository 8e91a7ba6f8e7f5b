"""An RL task a tiny random model gets mixed rewards on, for resume tests run from the command line.

    python -m rl.train dataset_builder=tests.rl.resume_envs:EvenTokensDatasetBuilder ...

Each episode has two turns; the reward is the share of even token ids among the sampled tokens. A
random model samples near-uniform tokens, so rewards vary within every group, every group trains,
and the weights (hence later samples) depend on every earlier step: a resumed run that replays
anything differently shows in its metrics.
"""

import asyncio
from collections.abc import Sequence

import chz
import tinker

from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder
from rl.types import Action, Env, Observation, RLDataset, RLDatasetBuilder, StepResult, StopCondition

STOP = [0]  # token 0 stops a sample; a random model rarely samples it, so samples use max_tokens


class EvenTokensEnv(Env):
    """Two turns on a fixed prompt; reward: the share of even token ids in both actions."""

    def __init__(self, prompt: Sequence[int], step_delay_s: float):
        self.history = list(prompt)
        self.step_delay_s = step_delay_s
        self.sampled: list[int] = []
        self.turn = 0

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return tinker.types.ModelInput.from_ints(self.history), STOP

    async def step(self, action: Action) -> StepResult:
        await asyncio.sleep(self.step_delay_s)  # keeps the run alive long enough to be killed mid-way
        self.sampled += list(action)
        self.history = self.history + list(action) + [13]
        self.turn += 1
        done = self.turn == 2
        even = sum(1 for t in self.sampled if t % 2 == 0) / max(len(self.sampled), 1)
        return StepResult(even if done else 0.0, done, tinker.types.ModelInput.from_ints(self.history), STOP,
                          {"even": even} if done else {})


class _Prompt:
    """A picklable thunk making the env of prompt `index`."""

    def __init__(self, index: int, step_delay_s: float):
        self.index, self.step_delay_s = index, step_delay_s

    def __call__(self) -> Env:
        return EvenTokensEnv([1 + (self.index * 37 + j * 11) % 997 for j in range(4)], self.step_delay_s)


@chz.chz
class EvenTokensDatasetBuilder(RLDatasetBuilder):
    n_batches: int = 8
    batch_size: int = 2
    group_size: int = 3
    test_size: int = 2
    step_delay_s: float = 0.0

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train = [RepeatedEnvGroupBuilder(_Prompt(i, self.step_delay_s), self.group_size, tags=("even",))
                 for i in range(self.n_batches * self.batch_size)]
        test = [RepeatedEnvGroupBuilder(_Prompt(10_000 + i, 0.0), 1, tags=("even",)) for i in range(self.test_size)]
        return ListRLDataset(train, self.batch_size), ListRLDataset(test, self.test_size)
