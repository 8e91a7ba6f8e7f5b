"""Comparisons -> (chosen, rejected) datum pairs for DPO, through a chat renderer (and the chosen
completions alone as supervised data, `ChosenCompletionsBuilder`).

Each completion becomes one datum of the whole conversation (prompt + completion): the model input
is every token but the last, the targets are shifted left by one, and the weights are 1 on the
completion's tokens and 0 on the prompt's. A `PreferencePair` keeps the two datums of a comparison
together; the pairs are flattened into one list (chosen at even, rejected at odd indices) only
when they are sent to the trainer, and `datums_to_pairs` refuses an odd-length list rather than
pairing a chosen completion with the wrong rejected one.
"""

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import chz
import numpy as np
from tinker import types

from preference.datasets import ComparisonDatasetBuilder
from preference.types import LabeledComparison
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.tokenizers import get_tokenizer
from renderers import Message, Renderer, TrainOnWhat, get_renderer
from supervised.datums import conversation_to_datum, datum_from_tokens_weights
from supervised.types import ChatDatasetBuilder, DatumListDataset

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreferencePair:
    """The datums of one comparison's preferred (`chosen`) and dispreferred (`rejected`) completion."""

    chosen: types.Datum
    rejected: types.Datum


def completion_datum(
    prompt: Sequence[Message], completion: Sequence[Message], renderer: Renderer, max_length: int | None
) -> types.Datum | None:
    """The datum of `prompt + completion`, trained on the completion's tokens only.

    Returns None when truncation to `max_length` tokens leaves no completion token to train on.
    """
    messages = [Message(**{**m, "trainable": False}) for m in prompt]
    messages += [Message(**{**m, "trainable": True}) for m in completion]
    model_input, weights_T = renderer.build_supervised_example(messages, TrainOnWhat.CUSTOMIZED)
    kept_weights = weights_T[1:max_length] if max_length is not None else weights_T[1:]
    if not kept_weights.any():
        return None
    return datum_from_tokens_weights(model_input.to_ints(), weights_T, max_length)


def comparison_to_pair(
    labeled: LabeledComparison, renderer: Renderer, max_length: int | None
) -> PreferencePair | None:
    """The (chosen, rejected) datums of a comparison; None for a tie or when truncation empties one."""
    if labeled.label == "Tie":
        return None
    prompt = labeled.comparison.prompt_conversation
    chosen = completion_datum(prompt, labeled.chosen, renderer, max_length)
    rejected = completion_datum(prompt, labeled.rejected, renderer, max_length)
    if chosen is None or rejected is None:
        return None
    return PreferencePair(chosen, rejected)


def pairs_to_datums(pairs: Sequence[PreferencePair]) -> list[types.Datum]:
    """[chosen_0, rejected_0, chosen_1, rejected_1, ...]: the layout the DPO loss reads."""
    return [datum for pair in pairs for datum in (pair.chosen, pair.rejected)]


def datums_to_pairs(datums: Sequence[types.Datum]) -> list[PreferencePair]:
    """Undo `pairs_to_datums`.

    Raises:
        DataFormatError: the list has an odd length, so some chosen datum has no partner.
    """
    if len(datums) % 2:
        raise DataFormatError(
            f"DPO needs (chosen, rejected) datum pairs, but got {len(datums)} datums (odd); "
            "build batches from PreferencePair lists so no completion is left without its partner."
        )
    return [PreferencePair(datums[i], datums[i + 1]) for i in range(0, len(datums), 2)]


def weighted_token_count(pairs: Sequence[PreferencePair]) -> int:
    """Completion tokens (weight > 0) in all datums of `pairs`."""
    return int(sum(np.count_nonzero(d.loss_fn_inputs["weights"].to_numpy()) for d in pairs_to_datums(pairs)))


class PreferencePairDataset:
    """Batches of `PreferencePair`s, rendered when a batch is asked for; reshuffled per epoch.

    Ties and comparisons that truncation empties are dropped when rendered, so a batch can hold
    fewer than `batch_size` pairs (never an unpaired datum). The last batch may be smaller.
    """

    def __init__(self, comparisons: Sequence[LabeledComparison], renderer: Renderer, batch_size: int,
                 max_length: int | None):
        if not comparisons:
            raise DataFormatError("The preference dataset is empty.")
        _check_comparisons(comparisons)
        self.comparisons = list(comparisons)
        self.renderer = renderer
        self.batch_size = batch_size
        self.max_length = max_length
        self._order = list(range(len(self.comparisons)))

    def __len__(self) -> int:
        return math.ceil(len(self.comparisons) / self.batch_size)

    def set_epoch(self, seed: int = 0) -> None:
        """Shuffle the comparisons with `seed` (epoch e uses seed e, so runs are reproducible)."""
        self._order = list(range(len(self.comparisons)))
        random.Random(seed).shuffle(self._order)

    def get_batch(self, index: int) -> list[PreferencePair]:
        """The pairs of batch `index` (0 <= index < len(self))."""
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of a dataset with {len(self)} batches")
        chosen = self._order[index * self.batch_size : (index + 1) * self.batch_size]
        return self.render([self.comparisons[i] for i in chosen])

    def render(self, comparisons: Sequence[LabeledComparison]) -> list[PreferencePair]:
        pairs = [comparison_to_pair(c, self.renderer, self.max_length) for c in comparisons]
        kept = [p for p in pairs if p is not None]
        if len(kept) < len(pairs):
            logger.debug("dropped %d tied or over-long comparisons of %d", len(pairs) - len(kept), len(pairs))
        return kept

    def all_pairs(self) -> list[PreferencePair]:
        """Every usable pair, in file order (for evaluation sets)."""
        return self.render(self.comparisons)


def _check_comparisons(comparisons: Sequence[LabeledComparison]) -> None:
    """Refuse a dataset no comparison of which can train (all ties, or both completions the same);
    say how many cannot, where some can."""
    ranked = [c for c in comparisons if c.label != "Tie"]
    same = [c for c in ranked if c.chosen == c.rejected]
    if not ranked or len(same) == len(ranked):
        why = "is a tie" if not ranked else "has the same two completions"
        raise DataFormatError(f"Every one of the {len(comparisons)} comparisons {why}, so preference training would "
                              "learn nothing from them; check the data (completion_A, completion_B and label).")
    if same:
        logger.warning("%d of %d comparisons have the same two completions; they train nothing.", len(same),
                       len(comparisons))


@chz.chz
class DPODatasetBuilder:
    """DPO pairs from a comparison dataset: `__call__() -> (train, test | None)`."""

    comparison_builder: ComparisonDatasetBuilder
    # The tokenizer (and default renderer) to render with; None: the trained model's (the DPO loop fills it in).
    model_name_for_tokenizer: str | None = None
    renderer_name: str | None = None  # None: the model's recommended renderer
    batch_size: int = 16  # comparisons (pairs) per step; each is two sequences
    max_length: int | None = 1024  # tokens per sequence; longer ones are cut from the right

    @chz.validate
    def _positive_batch(self) -> None:
        if self.batch_size < 1:
            raise ConfigurationError(f"batch_size must be >= 1, got {self.batch_size}.")

    @property
    def renderer(self) -> Renderer:
        model = self.model_name_for_tokenizer
        if model is None:
            raise ConfigurationError("DPODatasetBuilder needs model_name_for_tokenizer to render comparisons.")
        return get_renderer(resolve_renderer_name(model, self.renderer_name), get_tokenizer(model))

    def __call__(self) -> tuple[PreferencePairDataset, PreferencePairDataset | None]:
        train, test = self.comparison_builder()
        renderer = self.renderer
        test_set = PreferencePairDataset(test, renderer, self.batch_size, self.max_length) if test else None
        return PreferencePairDataset(train, renderer, self.batch_size, self.max_length), test_set


@chz.chz
class ChosenCompletionsBuilder(ChatDatasetBuilder):
    """Supervised data from comparisons: each prompt with its chosen completion (ties are skipped),
    or with both completions.

    The SFT stage of RLHF, which puts the policy in the preference model's distribution. With
    `include_rejected` the policy imitates demonstrations of mixed quality (both sides of every
    comparison), which leaves the preference itself for RL to learn.
    """

    comparison_builder: ComparisonDatasetBuilder
    include_rejected: bool = False  # also train on the rejected completion of each comparison

    def __call__(self) -> tuple[DatumListDataset, DatumListDataset | None]:
        train, test = self.comparison_builder()
        train_set = DatumListDataset(self._datums(train), self.common_config.batch_size)
        test_datums = self._datums(test) if test else []
        return train_set, DatumListDataset(test_datums, len(test_datums)) if test_datums else None

    def _datums(self, comparisons: Sequence[LabeledComparison]) -> list[types.Datum]:
        common = self.common_config
        completions = [(c.comparison.prompt_conversation, completion) for c in comparisons if c.label != "Tie"
                       for completion in ((c.chosen, c.rejected) if self.include_rejected else (c.chosen,))]
        return [conversation_to_datum(prompt + completion, self.renderer, common.max_length,
                                      common.resolved_train_on_what) for prompt, completion in completions]
