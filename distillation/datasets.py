"""Prompt datasets for on-policy distillation: conversations that end before the assistant's turn.

Distillation needs no answers, only prompts: the student writes its own answers and the teacher
grades them token by token. A `PromptDataset` hands out batches of prompts; a
`PromptDatasetBuilder` is the chz config that makes one. For the RL loop each prompt becomes a
single-turn `PromptEnv` (reward 0: the teacher's scores are the signal), sampled `group_size` times
as one group (`PromptEnvDatasetBuilder`).
"""

import functools
from collections.abc import Sequence

import chz
import tinker

from recipes_lib.config import check_positive
from recipes_lib.exceptions import ConfigurationError
from renderers import Message, Renderer
from rl.dataset import RepeatedEnvGroupBuilder, renderer_for
from rl.types import (
    Action,
    Env,
    EnvGroupBuilder,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    StopCondition,
)


class PromptDataset:
    """Consecutive batches of `batch_size` prompts; a last partial batch is dropped."""

    def __init__(self, prompts: Sequence[list[Message]], batch_size: int):
        if batch_size < 1 or len(prompts) < batch_size:
            raise ConfigurationError(f"batch_size must be between 1 and the number of prompts ({len(prompts)}); "
                                     f"got {batch_size}.")
        self.prompts = list(prompts)
        self.batch_size = batch_size

    def get_batch(self, index: int) -> list[list[Message]]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range; the dataset has {len(self)} batches.")
        return self.prompts[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(self.prompts) // self.batch_size


@chz.chz
class PromptDatasetBuilder:
    """Builds the prompts of a distillation run."""

    # Prompts per step (each is sampled `group_size` times).
    batch_size: int = 16

    def __call__(self) -> PromptDataset:
        raise NotImplementedError


class PromptEnv(Env):
    """One prompt, one reply, reward 0: the reply is graded by the teacher, not by the env."""

    def __init__(self, renderer: Renderer, messages: list[Message]):
        self.renderer = renderer
        self.messages = messages

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return self.renderer.build_generation_prompt(self.messages), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        return StepResult(reward=0.0, episode_done=True, next_observation=tinker.types.ModelInput.empty(),
                          next_stop_condition=self.renderer.get_stop_sequences())


class PromptEnvDataset(RLDataset):
    """Batch `i` of the prompts as groups of `group_size` `PromptEnv`s, one group per prompt."""

    def __init__(self, prompts: PromptDataset, renderer: Renderer, group_size: int):
        self.prompts, self.renderer, self.group_size = prompts, renderer, group_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [RepeatedEnvGroupBuilder(functools.partial(PromptEnv, self.renderer, messages), self.group_size)
                for messages in self.prompts.get_batch(index)]

    def __len__(self) -> int:
        return len(self.prompts)


@chz.chz
class PromptEnvDatasetBuilder(RLDatasetBuilder):
    """The RL loop's dataset of a distillation run: its prompts, rendered for the student."""

    prompts: PromptDatasetBuilder
    # The student's base model, whose tokenizer renders the prompts.
    model_name_for_tokenizer: str
    # None: the model's recommended renderer.
    renderer_name: str | None = None
    # Completions sampled per prompt.
    group_size: int = 4

    @chz.validate
    def _check_group_size(self) -> None:
        check_positive(group_size=self.group_size)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        renderer = renderer_for(self.model_name_for_tokenizer, self.renderer_name)
        return PromptEnvDataset(self.prompts(), renderer, self.group_size), None
