"""Pairwise comparisons: a prompt, two completions, and which one a judge preferred.

    comparison = Comparison(prompt_conversation=[{"role": "user", "content": "2+2?"}],
                            completion_A=[{"role": "assistant", "content": "4"}],
                            completion_B=[{"role": "assistant", "content": "5"}])
    labeled = LabeledComparison(comparison, label="A")
    labeled.swap()  # B is now "4", and the label says B

A completion is a list of messages (usually one assistant message) that continues the prompt.
These records are the common currency of the preference code: the dataset builders produce them,
DPO turns them into (chosen, rejected) datum pairs, the reward model is trained to predict their
labels, and a `PreferenceModel` scores new ones.
"""

from dataclasses import dataclass
from typing import Literal, get_args

from renderers import Message

Label = Literal["A", "B", "Tie"]
LABELS: tuple[str, ...] = get_args(Label)
_SWAPPED: dict[Label, Label] = {"A": "B", "B": "A", "Tie": "Tie"}


@dataclass(frozen=True)
class Comparison:
    """A prompt and two candidate completions of it."""

    prompt_conversation: list[Message]
    completion_A: list[Message]
    completion_B: list[Message]

    def swap(self) -> "Comparison":
        """The same comparison with A and B exchanged."""
        return Comparison(self.prompt_conversation, self.completion_B, self.completion_A)


@dataclass(frozen=True)
class LabeledComparison:
    """A comparison and its label: "A" or "B" is the better completion, "Tie" when neither is."""

    comparison: Comparison
    label: Label

    def swap(self) -> "LabeledComparison":
        """A and B exchanged, with the label following its completion (a Tie stays a Tie)."""
        return LabeledComparison(self.comparison.swap(), _SWAPPED[self.label])

    @property
    def chosen(self) -> list[Message]:
        """The preferred completion; a ValueError for a Tie, which has none."""
        if self.label == "Tie":
            raise ValueError("A tied comparison has no chosen completion.")
        return self.comparison.completion_A if self.label == "A" else self.comparison.completion_B

    @property
    def rejected(self) -> list[Message]:
        """The completion that lost; a ValueError for a Tie."""
        if self.label == "Tie":
            raise ValueError("A tied comparison has no rejected completion.")
        return self.comparison.completion_B if self.label == "A" else self.comparison.completion_A
