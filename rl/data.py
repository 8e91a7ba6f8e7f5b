"""Trajectories to training datums (pure), and splitting a batch into minibatches of whole groups.

A trajectory becomes one datum per run of turns whose observations extend each other: when turn
k+1's observation starts with turn k's observation and action (the renderer's extension property),
both turns share one datum and the model runs over the conversation once. Within a datum, over the
full token sequence:

    observation tokens: logprob 0, advantage 0, mask 0   (context, not trained)
    action tokens:      the sampler's logprob, the trajectory's advantage, mask 1

and, as for every datum, the model input is `tokens[:-1]` and each loss input is aligned with the
targets `tokens[1:]`. The mask stays on this side (it is not a loss input the API accepts); it
selects action tokens for the KL metrics.

Where every action names its sampled sequence (`TokensWithLogprobs.sequence_id`), the datum also
carries provenance (`Datum.with_provenance`, which `stable_reinforce` needs): each observation's new
tokens are a run of that turn's request prompt, each action a run of its sampled tokens.
"""

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import tinker

from recipes_lib.exceptions import DataFormatError
from rl.types import Trajectory, TrajectoryGroup, Transition

T = TypeVar("T")
Span = tinker.types.PromptProvenanceSpan | tinker.types.SampledProvenanceSpan


@dataclass(frozen=True)
class TrainingBatch:
    """Datums with what the loop needs to know about each.

    Attributes:
        data_D: datums with `target_tokens`, `logprobs` and `advantages`, each of shape (T,).
        masks_D: 1.0 where the target is an action token, shape (T,) per datum.
        group_index_D, trajectory_index_D: where each datum came from.
    """

    data_D: list[tinker.types.Datum] = field(default_factory=list)
    masks_D: list[np.ndarray] = field(default_factory=list)
    group_index_D: list[int] = field(default_factory=list)
    trajectory_index_D: list[int] = field(default_factory=list)


@dataclass
class _Sequence:
    """A datum being built: every token with its loss inputs, shape (T+1,) each."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    mask: list[float] = field(default_factory=list)
    # Where each token came from, while every turn so far named its sampled sequence; else None.
    spans: list[Span] | None = field(default_factory=list)

    def add_observation(self, tokens: Sequence[int], sequence_id: str | None) -> None:
        if tokens:
            self._name(sequence_id, lambda sid: tinker.types.PromptProvenanceSpan(
                sequence_id=sid, offset=len(self.tokens), length=len(tokens)))
        self._add(tokens, [0.0] * len(tokens), 0.0, 0.0)

    def add_action(self, transition: Transition, advantage: float) -> None:
        logprobs = transition.ac.maybe_logprobs
        if logprobs is None or len(logprobs) != len(transition.ac.tokens):
            raise DataFormatError(
                f"An action of {len(transition.ac.tokens)} tokens came with "
                f"{'no' if logprobs is None else len(logprobs)} log-probs; RL needs one per sampled token."
            )
        if transition.ac.tokens:
            self._name(transition.ac.sequence_id, lambda sid: tinker.types.SampledProvenanceSpan(
                sequence_id=sid, length=len(transition.ac.tokens)))
        self._add(transition.ac.tokens, logprobs, advantage, 1.0)

    def _name(self, sequence_id: str | None, span: "Callable[[str], Span]") -> None:
        if self.spans is not None:
            self.spans = None if sequence_id is None else [*self.spans, span(sequence_id)]

    def _add(self, tokens: Sequence[int], logprobs: Sequence[float], advantage: float, mask: float) -> None:
        self.tokens += tokens
        self.logprobs += logprobs
        self.advantages += [advantage] * len(tokens)
        self.mask += [mask] * len(tokens)

    def to_datum(self) -> tuple[tinker.types.Datum, np.ndarray]:
        """The datum (input `tokens[:-1]`, inputs aligned with `tokens[1:]`) and its mask."""
        if len(self.tokens) < 2:
            raise DataFormatError(f"A trajectory produced a sequence of {len(self.tokens)} token(s); need >= 2.")
        datum = tinker.types.Datum(
            model_input=tinker.types.ModelInput.from_ints(self.tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": tinker.types.TensorData.from_numpy(np.asarray(self.tokens[1:], dtype=np.int64)),
                "logprobs": tinker.types.TensorData.from_numpy(np.asarray(self.logprobs[1:], dtype=np.float32)),
                "advantages": tinker.types.TensorData.from_numpy(np.asarray(self.advantages[1:], dtype=np.float32)),
            },
        )
        if self.spans:  # the input drops the last token, the targets the first
            datum = datum.with_provenance(model_input=_without_last(self.spans), loss_fn_inputs=_without_first(self.spans))
        return datum, np.asarray(self.mask[1:], dtype=np.float32)


def _without_first(spans: list[Span]) -> list[Span]:
    first = spans[0]
    rest = [dataclasses.replace(first, offset=first.offset + 1, length=first.length - 1)] if first.length > 1 else []
    return rest + spans[1:]


def _without_last(spans: list[Span]) -> list[Span]:
    last = spans[-1]
    return spans[:-1] + ([dataclasses.replace(last, length=last.length - 1)] if last.length > 1 else [])


def trajectory_to_data(trajectory: Trajectory, advantage: float) -> list[tuple[tinker.types.Datum, np.ndarray]]:
    """The datums of one trajectory, each with its action mask of shape (T,).

    Turns are merged into one datum while each observation extends the previous observation and
    action token for token; a turn whose observation does not starts a new datum.
    """
    sequences: list[_Sequence] = []
    for transition in trajectory.transitions:
        ob_tokens = list(transition.ob.to_ints())
        current = sequences[-1] if sequences else None
        sequence_id = transition.ac.sequence_id
        if current is not None and ob_tokens[: len(current.tokens)] == current.tokens:
            current.add_observation(ob_tokens[len(current.tokens) :], sequence_id)
        else:
            current = _Sequence()
            current.add_observation(ob_tokens, sequence_id)
            sequences.append(current)
        current.add_action(transition, advantage)
    return [sequence.to_datum() for sequence in sequences]


def assemble_training_data(groups_P: Sequence[TrajectoryGroup], advantages_P_G: Sequence[np.ndarray]) -> TrainingBatch:
    """Every trajectory's datums, in group order, with their masks and origins."""
    batch = TrainingBatch()
    for p, (group, advantages_G) in enumerate(zip(groups_P, advantages_P_G, strict=True)):
        for g, (trajectory, advantage) in enumerate(zip(group.trajectories_G, advantages_G, strict=True)):
            for datum, mask in trajectory_to_data(trajectory, float(advantage)):
                batch.data_D.append(datum)
                batch.masks_D.append(mask)
                batch.group_index_D.append(p)
                batch.trajectory_index_D.append(g)
    return batch


def split_minibatches(items: Sequence[T], num_parts: int) -> list[list[T]]:
    """Split `items` (whole groups) into `num_parts` contiguous parts of near-equal size.

    The first `len(items) % num_parts` parts get one item more; empty parts are left out, so
    5 groups in 2 parts are [3, 2] and 2 groups in 4 parts are [1, 1].
    """
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}.")
    base, extra = divmod(len(items), num_parts)
    parts, start = [], 0
    for index in range(num_parts):
        size = base + (1 if index < extra else 0)
        if size:
            parts.append(list(items[start : start + size]))
        start += size
    return parts


def with_advantages(datum: tinker.types.Datum, advantages_T: np.ndarray) -> tinker.types.Datum:
    """A copy of an RL datum with its `advantages` replaced (e.g. after KL shaping)."""
    inputs = dict(datum.loss_fn_inputs)
    inputs["advantages"] = tinker.types.TensorData.from_numpy(np.asarray(advantages_T, dtype=np.float32))
    return dataclasses.replace(datum, loss_fn_inputs=inputs)  # its provenance spans stay


def loss_input(datum: tinker.types.Datum, key: str) -> np.ndarray:
    """A loss input of a datum as a float64 array of shape (T,)."""
    return np.asarray(datum.loss_fn_inputs[key].to_numpy(), dtype=np.float64)
