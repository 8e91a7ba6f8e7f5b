"""Comparison dataset builders: JSONL files, and the public preference sets on Hugging Face.

A `ComparisonDatasetBuilder` is a chz config whose call returns `(train, test)` lists of
`LabeledComparison` (`test` is None when there is no test split). Downstream builders turn them
into DPO pairs (`preference.data`) or reward-model conversations (`preference.reward_model`).

- `ComparisonBuilderFromJsonl(train_path, test_path=None)`: one comparison per line,
      {"prompt_conversation": [{"role": "user", "content": "..."}],
       "completion_A": "text" | [messages], "completion_B": "text" | [messages], "label": "A"|"B"|"Tie"}
  (a string prompt or completion is shorthand for one user / assistant message). Every message
  passes the one message schema (`renderers.messages`), keeping tool calls, thinking and the other
  fields it has. A bad line fails with a `DataFormatError` that names the file, the line and the
  field (`completion_A[0]`, then the message's own field).
- `HHHComparisonBuilder` (Anthropic/hh-rlhf), `HelpSteer3ComparisonBuilder` (nvidia/HelpSteer3,
  "preference" config), `UltraFeedbackComparisonBuilder` (HuggingFaceH4/ultrafeedback_binarized):
  `datasets.load_dataset(dataset_path, ...)`, so `dataset_path` may also be a local copy of the
  dataset (the tests use small fixtures in each dataset's own layout).
"""

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import chz

from preference.types import LABELS, Comparison, Label, LabeledComparison
from recipes_lib.exceptions import DataFormatError
from recipes_lib.hub_data import load_hub_split
from recipes_lib.jsonl import read_jsonl
from renderers import Message, parse_message

logger = logging.getLogger(__name__)

Split = list[LabeledComparison]
REQUIRED_FIELDS = ("prompt_conversation", "completion_A", "completion_B", "label")


class ComparisonDatasetBuilder(ABC):
    """Builds the (train, test) comparisons of a dataset; test is None when there is none."""

    @abstractmethod
    def __call__(self) -> tuple[Split, Split | None]: ...


# -- JSONL files -----------------------------------------------------------------------------------


@chz.chz
class ComparisonBuilderFromJsonl(ComparisonDatasetBuilder):
    """Comparisons from JSONL files (see the module docstring for the line format)."""

    train_path: str  # one comparison per line
    test_path: str | None = None  # held-out comparisons, same format (optional)

    def __call__(self) -> tuple[Split, Split | None]:
        train = read_comparisons_jsonl(self.train_path)
        test = read_comparisons_jsonl(self.test_path) if self.test_path else None
        return train, test


def read_comparisons_jsonl(path: str | Path) -> Split:
    """Every comparison of a JSONL file; blank lines are skipped.

    Raises:
        DataFormatError: the file is missing or empty, or a line is not JSON or lacks a field, has
            an unknown label or an empty completion; the message names the file and line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataFormatError(f"Comparison file {path} does not exist.")
    comparisons = []
    for number, row in read_jsonl(path):
        comparisons.append(parse_comparison_row(row, f"{path} line {number}"))
    if not comparisons:
        raise DataFormatError(f"Comparison file {path} has no comparisons.")
    return comparisons


def parse_comparison_row(row: Any, where: str) -> LabeledComparison:
    """One JSONL row as a LabeledComparison; `where` ("file:line") prefixes every error."""
    if not isinstance(row, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object with fields {list(REQUIRED_FIELDS)}.")
    missing = [name for name in REQUIRED_FIELDS if name not in row]
    if missing:
        raise DataFormatError(f"{where}: missing field(s) {missing}; each line needs {list(REQUIRED_FIELDS)}.")
    if row["label"] not in LABELS:
        raise DataFormatError(f"{where}: unknown label {row['label']!r}; expected one of {list(LABELS)}.")
    comparison = Comparison(
        prompt_conversation=_messages(row["prompt_conversation"], "user", where, "prompt_conversation"),
        completion_A=_completion(row["completion_A"], where, "completion_A"),
        completion_B=_completion(row["completion_B"], where, "completion_B"),
    )
    return LabeledComparison(comparison, row["label"])


def _completion(value: Any, where: str, field: str) -> list[Message]:
    messages = _messages(value, "assistant", where, field)
    if not messages or not any(message["content"].strip() or message.get("tool_calls") for message in messages):
        raise DataFormatError(f"{where}: {field} is empty; a completion needs some text or a tool call.")
    return messages


def _messages(value: Any, default_role: str, where: str, field: str) -> list[Message]:
    """A string becomes one `default_role` message; a list must hold messages of the schema."""
    if isinstance(value, str):
        return [Message(role=default_role, content=value)]
    if not isinstance(value, list):
        raise DataFormatError(f"{where}: {field} must be a string or a list of messages, got {type(value).__name__}.")
    return [_message(message, f"{where}: {field}[{index}]") for index, message in enumerate(value)]


def _message(value: Any, where: str) -> Message:
    """One message of the schema; `where` ends with the field it sits in (`... line 2: completion_A[0]`)."""
    try:
        return parse_message(value, where)
    except DataFormatError as exc:
        problem = str(exc).removeprefix(f"{where}: ")
        raise DataFormatError(f"{where} must be an object of the message schema: {problem}") from None


# -- Hugging Face datasets -------------------------------------------------------------------------


class HuggingFaceComparisonBuilder(ComparisonDatasetBuilder):
    """Shared loading for the public preference sets: load each split, convert each row.

    Rows a subclass cannot convert (`example_to_labeled_comparison` returns None) are skipped and
    counted in the log.
    """

    dataset_path: str
    config_name: str | None
    train_split: str
    test_split: str | None
    max_train: int | None
    max_test: int | None

    @abstractmethod
    def example_to_labeled_comparison(self, example: Mapping[str, Any]) -> LabeledComparison | None:
        """One dataset row as a comparison, or None when the row cannot be used."""

    def _row(self, example: Mapping[str, Any], where: str) -> LabeledComparison | None:
        try:
            return self.example_to_labeled_comparison(example)
        except DataFormatError as exc:
            raise DataFormatError(f"{where}: {exc}") from None

    def __call__(self) -> tuple[Split, Split | None]:
        train = self._split(self.train_split, self.max_train)
        test = self._split(self.test_split, self.max_test) if self.test_split else None
        return train, test

    def _split(self, split: str, limit: int | None) -> Split:
        hint = ("Offline, pass dataset_path=<a local copy of the data set> or train on a JSONL file of "
                "comparisons (ComparisonBuilderFromJsonl, train_path=<file>.jsonl; in DPO: dataset=jsonl "
                "dataset.train_path=<file>.jsonl)")
        rows = load_hub_split(self.dataset_path, self.config_name, split, hint)
        if limit is not None:
            rows = rows.select(range(min(limit, len(rows))))
        return self._convert(rows, f"{self.dataset_path}[{split}]")

    def _convert(self, rows: Iterable[Mapping[str, Any]], name: str) -> Split:
        converted = [self._row(row, f"{name} row {index}") for index, row in enumerate(rows)]
        kept = [c for c in converted if c is not None]
        if len(kept) < len(converted):
            logger.info("%s: skipped %d of %d rows that are not usable comparisons", name,
                        len(converted) - len(kept), len(converted))
        if not kept:
            raise DataFormatError(f"{name}: no usable comparisons.")
        return kept


def _chat(rows: Sequence[Mapping[str, Any]], field: str) -> list[Message]:
    """A dataset's list of messages, each checked against the message schema (every field kept)."""
    if not isinstance(rows, list):
        raise DataFormatError(f"{field} must be a list of messages; got {type(rows).__name__}.")
    return [_message(row, f"{field}[{index}]") for index, row in enumerate(rows)]


@chz.chz
class HHHComparisonBuilder(HuggingFaceComparisonBuilder):
    """Anthropic's helpful-harmless RLHF set: `chosen` / `rejected` transcripts sharing a prefix."""

    dataset_path: str = "Anthropic/hh-rlhf"  # or a local copy with the same layout
    config_name: str | None = None
    train_split: str = "train"
    test_split: str | None = "test"
    max_train: int | None = None  # keep the first N rows (None: all)
    max_test: int | None = 1024

    def example_to_labeled_comparison(self, example: Mapping[str, Any]) -> LabeledComparison | None:
        chosen = parse_hh_transcript(example["chosen"])
        rejected = parse_hh_transcript(example["rejected"])
        if not chosen or not rejected or chosen[:-1] != rejected[:-1]:
            return None  # the two transcripts must differ only in the final turn
        if chosen[-1]["role"] != "assistant" or not chosen[-1]["content"] or not rejected[-1]["content"]:
            return None
        return LabeledComparison(Comparison(chosen[:-1], chosen[-1:], rejected[-1:]), "A")


HH_MARKERS = {"\n\nHuman:": "user", "\n\nAssistant:": "assistant"}


def parse_hh_transcript(text: str) -> list[Message]:
    """`"\\n\\nHuman: hi\\n\\nAssistant: hello"` -> [user "hi", assistant "hello"] (contents stripped)."""
    messages: list[Message] = []
    rest = text
    while rest:
        starts = {marker: rest.find(marker) for marker in HH_MARKERS if rest.find(marker) >= 0}
        if not starts:
            if messages:
                messages[-1]["content"] = (messages[-1]["content"] + rest).strip()
            break
        marker = min(starts, key=lambda m: starts[m])
        if messages:
            messages[-1]["content"] = (messages[-1]["content"] + rest[: starts[marker]]).strip()
        messages.append(Message(role=HH_MARKERS[marker], content=""))
        rest = rest[starts[marker] + len(marker):]
    return messages


@chz.chz
class HelpSteer3ComparisonBuilder(HuggingFaceComparisonBuilder):
    """NVIDIA HelpSteer3 preferences: `context`, `response1`, `response2`, `overall_preference`.

    `overall_preference` runs from -3 (response 1 much better) to 3 (response 2 much better);
    0 is a tie.
    """

    dataset_path: str = "nvidia/HelpSteer3"
    config_name: str | None = "preference"
    train_split: str = "train"
    test_split: str | None = "validation"
    max_train: int | None = None
    max_test: int | None = 1024

    def example_to_labeled_comparison(self, example: Mapping[str, Any]) -> LabeledComparison | None:
        context = _chat(example["context"], "context")
        a, b = example["response1"], example["response2"]
        if not context or not a.strip() or not b.strip():
            return None
        preference = int(example["overall_preference"])
        label: Label = "A" if preference < 0 else "B" if preference > 0 else "Tie"
        comparison = Comparison(context, [Message(role="assistant", content=a)], [Message(role="assistant", content=b)])
        return LabeledComparison(comparison, label)


@chz.chz
class UltraFeedbackComparisonBuilder(HuggingFaceComparisonBuilder):
    """UltraFeedback binarized: `chosen` / `rejected` conversations with `score_chosen` /
    `score_rejected`; equal scores are a tie."""

    dataset_path: str = "HuggingFaceH4/ultrafeedback_binarized"
    config_name: str | None = None
    train_split: str = "train_prefs"
    test_split: str | None = "test_prefs"
    max_train: int | None = None
    max_test: int | None = 1024

    def example_to_labeled_comparison(self, example: Mapping[str, Any]) -> LabeledComparison | None:
        chosen = _chat(example["chosen"], "chosen")
        rejected = _chat(example["rejected"], "rejected")
        if len(chosen) < 2 or chosen[:-1] != rejected[:-1] or chosen[-1]["role"] != "assistant":
            return None
        if not chosen[-1]["content"].strip() or not rejected[-1]["content"].strip():
            return None
        label: Label = "Tie" if example["score_chosen"] == example["score_rejected"] else "A"
        return LabeledComparison(Comparison(chosen[:-1], chosen[-1:], rejected[-1:]), label)
