"""Supervised datasets: what the training loop reads, and the chz builders that make them.

    train_set, test_set = builder()          # a SupervisedDatasetBuilder is a chz config
    train_set.set_epoch(seed=epoch)           # a new order of examples for each epoch
    for i in range(len(train_set)):           # len = number of full batches
        datums_D = train_set.get_batch(i)     # list[tinker.types.Datum], D = batch size

`ChatDatasetBuilder` is the base of builders that render chat conversations: its
`common_config` holds the settings every chat dataset shares (tokenizer, renderer, max_length,
batch size, which messages to train on), set on the command line as
`dataset_builder.common_config.batch_size=4` (or `...batch_size=4`).
"""

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property

import chz
import numpy as np
from tinker import types

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.tokenizers import Tokenizer, get_tokenizer
from renderers import Renderer, TrainOnWhat, get_renderer

logger = logging.getLogger(__name__)


class SupervisedDataset(ABC):
    """Batches of datums, indexed from 0 to `len(self) - 1`, in an order fixed per epoch."""

    @abstractmethod
    def get_batch(self, index: int) -> list[types.Datum]:
        """The datums of batch `index` in the current epoch's order."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of full batches in one epoch."""

    def set_epoch(self, seed: int = 0) -> None:
        """Choose the order of examples for an epoch (the loop passes the epoch number).

        Subclasses that can reorder their examples override this; the default keeps one order.
        """
        logger.debug("%s keeps the same order in every epoch (set_epoch(%d) ignored)", type(self).__name__, seed)


class DatumListDataset(SupervisedDataset):
    """Batches over a fixed list of datums, reshuffled by `set_epoch(seed)`.

    A last batch smaller than `batch_size` is dropped, so every step sees `batch_size` datums.
    The order for epoch `seed` depends only on (`shuffle_seed`, `seed`), so a resumed run sees
    exactly the batches the interrupted one would have seen.
    """

    def __init__(self, datums: Sequence[types.Datum], batch_size: int, shuffle_seed: int = 0):
        if batch_size < 1:
            raise ConfigurationError(f"batch_size must be >= 1, got {batch_size}.")
        self.datums = list(datums)
        self.batch_size = batch_size
        self.shuffle_seed = shuffle_seed
        self._order = np.arange(len(self.datums))

    def set_epoch(self, seed: int = 0) -> None:
        rng = np.random.default_rng([self.shuffle_seed, seed])
        self._order = rng.permutation(len(self.datums))

    def get_batch(self, index: int) -> list[types.Datum]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} out of range: this dataset has {len(self)} batches.")
        rows = self._order[index * self.batch_size : (index + 1) * self.batch_size]
        return [self.datums[int(row)] for row in rows]

    def __len__(self) -> int:
        return len(self.datums) // self.batch_size

    def all_datums(self) -> list[types.Datum]:
        """Every datum in file order (for evaluating a whole test split)."""
        return list(self.datums)


@chz.chz
class SupervisedDatasetBuilder:
    """A chz config that builds `(train, test or None)`; subclasses implement `__call__`."""

    def __call__(self) -> tuple[SupervisedDataset, SupervisedDataset | None]:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")


@chz.chz
class ChatDatasetBuilderCommonConfig:
    """Settings shared by every chat dataset."""

    # The tokenizer to render with: the model being trained (recipes tie it to `model_name`).
    model_name_for_tokenizer: str
    # None: the model's recommended renderer (recipes_lib.model_info).
    renderer_name: str | None = None
    # Longer examples are cut to this many tokens (with a warning); None keeps them whole.
    max_length: int | None = 2048
    # Conversations per optimizer step.
    batch_size: int = 16
    # Which tokens get loss; None means every assistant message.
    train_on_what: TrainOnWhat | None = None

    @property
    def resolved_train_on_what(self) -> TrainOnWhat:
        return self.train_on_what or TrainOnWhat.ALL_ASSISTANT_MESSAGES

    @property
    def resolved_renderer_name(self) -> str:
        return resolve_renderer_name(self.model_name_for_tokenizer, self.renderer_name)


@chz.chz
class ChatDatasetBuilder(SupervisedDatasetBuilder):
    """A builder of chat datasets; gives subclasses `tokenizer` and `renderer`."""

    common_config: ChatDatasetBuilderCommonConfig

    @cached_property
    def tokenizer(self) -> Tokenizer:
        return get_tokenizer(self.common_config.model_name_for_tokenizer)

    @cached_property
    def renderer(self) -> Renderer:
        return get_renderer(self.common_config.resolved_renderer_name, self.tokenizer)
