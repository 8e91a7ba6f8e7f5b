"""Ready-made dataset pieces, so a task needs only its `Env`: the fields every task's dataset builder
shares, groups of copies, list-backed batches, and the renderer of a model.

    builders = [RepeatedEnvGroupBuilder(functools.partial(MyEnv, problem), num_envs=4) for problem in problems]
    dataset = ListRLDataset(builders, batch_size=8)
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import chz

from recipes_lib.config import check_group_size, check_positive
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import Renderer, get_renderer
from rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder


def renderer_for(model_name: str, renderer_name: str | None = None) -> Renderer:
    """The renderer `renderer_name` over `model_name`'s tokenizer (None: the model's recommended one)."""
    return get_renderer(resolve_renderer_name(model_name, renderer_name), get_tokenizer(model_name))


@chz.chz
class TaskDatasetBuilder(RLDatasetBuilder):
    """The fields every task's RL dataset builder shares, declared and checked once (as SFT's builders
    share `ChatDatasetBuilderCommonConfig`); a task's builder adds its own. The keys stay flat, as
    in tinker-cookbook's builders: `dataset_builder.group_size=8`."""

    # The policy's base model, whose tokenizer renders the prompts.
    model_name_for_tokenizer: str
    # None: the model's recommended renderer.
    renderer_name: str | None = None
    # Groups (problems, games, prompts) per training step.
    batch_size: int = 8
    # Rollouts per group: the samples whose rewards are compared for advantages.
    group_size: int = 4

    @chz.validate
    def _check_batch_and_group(self) -> None:
        check_group_size(self.group_size)
        check_positive(batch_size=self.batch_size)

    def renderer(self) -> Renderer:
        """The renderer the prompts are written with."""
        return renderer_for(self.model_name_for_tokenizer, self.renderer_name)


@dataclass(frozen=True)
class RepeatedEnvGroupBuilder(EnvGroupBuilder):
    """A group of `num_envs` envs, each made by calling `env_thunk` (e.g. one problem, sampled G times)."""

    env_thunk: Callable[[], Env]
    num_envs: int
    tags: tuple[str, ...] = ()

    async def make_envs(self) -> Sequence[Env]:
        return [self.env_thunk() for _ in range(self.num_envs)]

    def logging_tags(self) -> list[str]:
        return list(self.tags)


class ListRLDataset(RLDataset):
    """Consecutive batches of `batch_size` builders from a list; a last partial batch is dropped."""

    def __init__(self, builders: Sequence[EnvGroupBuilder], batch_size: int):
        if batch_size < 1 or len(builders) < batch_size:
            raise ConfigurationError(
                f"batch_size must be between 1 and the number of groups ({len(builders)}); got {batch_size}."
            )
        self.builders = list(builders)
        self.batch_size = batch_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range; the dataset has {len(self)} batches.")
        return self.builders[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(self.builders) // self.batch_size
