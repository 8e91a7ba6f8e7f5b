"""A sampled completion and the teacher's view of it -> one `importance_sampling` datum (pure).

Over the full sequence `prompt + completion` (T+1 tokens), the datum's input is `tokens[:-1]` and
each loss input is aligned with the targets `tokens[1:]`:

    prompt targets:      logprob 0, advantage 0, mask 0   (context, not trained)
    completion targets:  the sampler's logprob, coef * (baseline - (student - teacher) logprob), mask 1
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tinker

from distillation.advantages import reverse_kl_advantages
from recipes_lib.exceptions import DataFormatError


@dataclass(frozen=True)
class Completion:
    """One sample of the student: its prompt, the sampled tokens and their sampler log-probs."""

    prompt_tokens: list[int]
    tokens: list[int]
    logprobs: list[float]

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.tokens):
            raise DataFormatError(f"A completion of {len(self.tokens)} tokens came with {len(self.logprobs)} "
                                  "log-probs; distillation needs the sampler's log-prob of every sampled token.")
        if not self.prompt_tokens:
            raise DataFormatError("A completion has an empty prompt; the first sampled token needs a context.")

    @property
    def sequence(self) -> list[int]:
        """`prompt + completion`: what the teacher scores."""
        return self.prompt_tokens + self.tokens

    def targets_T(self) -> tuple[np.ndarray, np.ndarray]:
        """The student's log-prob of each target token (0 on the prompt) and the mask, shape (T,)."""
        num_prompt_targets = len(self.prompt_tokens) - 1
        logprobs_T = np.asarray([0.0] * num_prompt_targets + list(self.logprobs), dtype=np.float64)
        mask_T = np.asarray([0.0] * num_prompt_targets + [1.0] * len(self.tokens), dtype=np.float64)
        return logprobs_T, mask_T


def teacher_targets_T(completion: Completion, teacher_logprobs: Sequence[float | None]) -> np.ndarray:
    """The teacher's log-probs of the target tokens, shape (T,), from `compute_logprobs(sequence)`.

    `compute_logprobs` returns one value per token of the sequence, None for the first (it has no
    context); the targets are tokens 1..T. Prompt targets are not used and read as 0.
    """
    if len(teacher_logprobs) != len(completion.sequence):
        raise DataFormatError(f"The teacher returned {len(teacher_logprobs)} log-probs for a sequence of "
                              f"{len(completion.sequence)} tokens.")
    targets = teacher_logprobs[1:]
    _, mask_T = completion.targets_T()
    return np.asarray([0.0 if m == 0 or lp is None else float(lp) for lp, m in zip(targets, mask_T, strict=True)])


def completion_to_datum(
    completion: Completion, teacher_logprobs_T: np.ndarray, coef: float, discount: float = 0.0, baseline: float = 0.0
) -> tuple[tinker.types.Datum, np.ndarray]:
    """The training datum of one completion and its mask (1 on sampled tokens), shape (T,)."""
    sequence = completion.sequence
    student_T, mask_T = completion.targets_T()
    advantages_T = reverse_kl_advantages(student_T, teacher_logprobs_T, mask_T, coef, discount, baseline)
    datum = tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(sequence[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.types.TensorData.from_numpy(np.asarray(sequence[1:], dtype=np.int64)),
            "logprobs": tinker.types.TensorData.from_numpy(student_T.astype(np.float32)),
            "advantages": tinker.types.TensorData.from_numpy(advantages_T.astype(np.float32)),
        },
    )
    return datum, mask_T.astype(np.float32)
