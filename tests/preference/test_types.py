"""Comparison and LabeledComparison: swapping moves the label with its completion."""

import pytest

from preference.types import Comparison, LabeledComparison

PROMPT = [{"role": "user", "content": "2+2?"}]
FOUR = [{"role": "assistant", "content": "4"}]
FIVE = [{"role": "assistant", "content": "5"}]


def test_swap_exchanges_completions_and_label() -> None:
    labeled = LabeledComparison(Comparison(PROMPT, FOUR, FIVE), "A")  # type: ignore[arg-type]
    swapped = labeled.swap()
    assert swapped.comparison == Comparison(PROMPT, FIVE, FOUR)  # type: ignore[arg-type]
    assert swapped.label == "B"
    assert swapped.chosen == labeled.chosen == FOUR
    assert swapped.rejected == labeled.rejected == FIVE
    assert swapped.swap() == labeled


def test_tie_stays_tie_and_has_no_chosen() -> None:
    tie = LabeledComparison(Comparison(PROMPT, FOUR, FIVE), "Tie")  # type: ignore[arg-type]
    assert tie.swap().label == "Tie"
    with pytest.raises(ValueError, match="no chosen"):
        _ = tie.chosen
