"""Chat dataset builders: a conversations JSONL file, and a Hugging Face dataset.

Both read records `{"messages": [{"role": ..., "content": ...}, ...]}`, check every message against
the one message schema (`renderers.messages`: tool calls, thinking, per-message `trainable` for
`train_on_what=customized`, ... are kept), render every conversation up front (so a bad record
stops the run before training starts, with its file, line and field), and split off an optional
test set.

    dataset_builder=FromConversationFileBuilder dataset_builder.file_path=example_data/conversations.jsonl
    dataset_builder=HuggingFaceChatBuilder dataset_builder.path=HuggingFaceH4/no_robots

(The synthetic number-to-words builder is `recipes.number_words.dataset.NumberWordsBuilder`.)
"""

import logging
from collections.abc import Sequence
from pathlib import Path

import chz
import numpy as np
from tinker import types

from recipes_lib.exceptions import ConfigurationError, DataFormatError, RendererError
from recipes_lib.hub_data import load_hub_split
from recipes_lib.jsonl import read_jsonl
from renderers import Message, Renderer
from supervised.datums import conversation_to_datum, parse_conversation
from supervised.types import ChatDatasetBuilder, ChatDatasetBuilderCommonConfig, DatumListDataset

logger = logging.getLogger(__name__)

Sourced = tuple[str, list[Message]]  # (where it came from, e.g. "data.jsonl line 3"; the messages)


def read_conversations_jsonl(path: Path | str) -> list[Sourced]:
    """Every non-blank line of a JSONL file as a checked conversation.

    Raises:
        DataFormatError: naming the file and line for invalid JSON, a missing `messages` key, an
            unknown role or a non-string content; or for a file without any conversation.
        ConfigurationError: the file does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError(f"Conversations file {path} does not exist.")
    conversations = []
    for number, row in read_jsonl(path):
        where = f"{path} line {number}"
        conversations.append((where, parse_conversation(row, where)))
    if not conversations:
        raise DataFormatError(f"{path} holds no conversations; expected one JSON object per line.")
    return conversations


def render_conversations(
    conversations: Sequence[Sourced], renderer: Renderer, common: ChatDatasetBuilderCommonConfig
) -> list[types.Datum]:
    """Each conversation as a Datum; an error names the record it came from."""
    datums = []
    for where, messages in conversations:
        try:
            datums.append(conversation_to_datum(messages, renderer, common.max_length, common.resolved_train_on_what))
        except (DataFormatError, RendererError) as exc:
            raise DataFormatError(f"{where}: {exc}") from exc
    return datums


def split_train_test(
    datums: Sequence[types.Datum], common: ChatDatasetBuilderCommonConfig, test_size: int, shuffle_seed: int
) -> tuple[DatumListDataset, DatumListDataset | None]:
    """Shuffle once with `shuffle_seed`, take the first `test_size` as the test set.

    Raises:
        DataFormatError: too few examples for the test split plus one training batch.
    """
    if len(datums) < test_size + common.batch_size:
        raise DataFormatError(
            f"{len(datums)} conversations cannot make a test split of {test_size} plus one training batch of "
            f"{common.batch_size}; lower test_size or dataset_builder.common_config.batch_size."
        )
    order = np.random.default_rng(shuffle_seed).permutation(len(datums))
    shuffled = [datums[int(i)] for i in order]
    test = DatumListDataset(shuffled[:test_size], batch_size=test_size) if test_size else None
    return DatumListDataset(shuffled[test_size:], common.batch_size, shuffle_seed), test


@chz.chz
class FromConversationFileBuilder(ChatDatasetBuilder):
    """Conversations from a JSONL file, one `{"messages": [...]}` object per line."""

    file_path: str
    # Conversations held out as the test split (reported as test/nll); 0 for none.
    test_size: int = 0
    # Seed of the train/test split and of the per-epoch shuffles.
    shuffle_seed: int = 0

    def __call__(self) -> tuple[DatumListDataset, DatumListDataset | None]:
        conversations = read_conversations_jsonl(Path(self.file_path).expanduser())
        datums = render_conversations(conversations, self.renderer, self.common_config)
        return split_train_test(datums, self.common_config, self.test_size, self.shuffle_seed)


@chz.chz
class HuggingFaceChatBuilder(ChatDatasetBuilder):
    """A chat dataset from the Hugging Face hub (default: NoRobots), or a local dataset folder.

    Needs the hub (or its local cache); offline, use FromConversationFileBuilder.
    """

    # A hub id (HuggingFaceH4/no_robots) or a local folder of JSON/JSONL/Parquet files.
    path: str = "HuggingFaceH4/no_robots"
    # The dataset's configuration name, if it has several.
    name: str | None = None
    split: str = "train"
    # A split of the dataset used as the test set; None for no test set.
    test_split: str | None = "test"
    # The column holding the list of messages.
    message_field: str = "messages"
    # Use at most this many rows of each split (None: all).
    max_examples: int | None = None
    shuffle_seed: int = 0

    def __call__(self) -> tuple[DatumListDataset, DatumListDataset | None]:
        train = render_conversations(self._load(self.split), self.renderer, self.common_config)
        test = render_conversations(self._load(self.test_split), self.renderer, self.common_config) if self.test_split else []
        test_set = DatumListDataset(test, batch_size=len(test)) if test else None
        return DatumListDataset(train, self.common_config.batch_size, self.shuffle_seed), test_set

    def _load(self, split: str) -> list[Sourced]:
        rows = load_hub_split(self.path, self.name, split,
                              "Offline, train on a JSONL file of conversations (dataset=jsonl dataset.file_path=<file>.jsonl)")
        count = len(rows) if self.max_examples is None else min(len(rows), self.max_examples)
        where = [f"{self.path} [{split}] row {i}" for i in range(count)]
        return [(where[i], parse_conversation(rows[i], where[i], self.message_field)) for i in range(count)]
