"""A sampled completion and the teacher's view of it -> training datums (pure).

Over the full sequence `prompt + completion` (T+1 tokens), a datum's input is `tokens[:-1]` and
each loss input is aligned with the targets `tokens[1:]`. The `importance_sampling` datum:

    prompt targets:      logprob 0, advantage 0, mask 0   (context, not trained)
    completion targets:  the sampler's logprob, coef * (baseline - (student - teacher) logprob), mask 1

With the teacher's top-k log-probs at each position, `forward_kl_data` adds k `cross_entropy`
datums on the same input: the j-th has the teacher's j-th likeliest token as target and
`coef * p_teacher(token)` as weight on completion positions (0 on the prompt). Their summed loss is
`-coef * sum_t sum_j p_teacher(j|t) log p_student(j|t)`, the cross-entropy part of the forward
KL(teacher || student) restricted to the teacher's top k, at the prefixes the student wrote itself.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tinker
from tinker.types.topk_logprobs import TopkLogprobs

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


def completion_from_datum(datum: tinker.types.Datum, mask_T: np.ndarray) -> Completion:
    """The completion an RL datum of a single-turn episode holds: the prompt, then the sampled tokens.

    The datum's targets are `sequence[1:]`; its mask is 0 on the prompt's targets and 1 on every
    sampled token after them (one turn), so the first sampled token is target `t0`, token `t0 + 1`.
    """
    mask_T = np.asarray(mask_T)
    sampled = np.flatnonzero(mask_T > 0)
    if sampled.size == 0 or not np.all(mask_T[sampled[0] :] > 0):
        raise DataFormatError("Distillation scores single-turn answers: a datum's sampled tokens must be one run "
                              "at its end, after the prompt.")
    targets = np.asarray(datum.loss_fn_inputs["target_tokens"].to_numpy(), dtype=np.int64)
    sequence = [*datum.model_input.to_ints(), int(targets[-1])]
    first = int(sampled[0]) + 1
    logprobs = np.asarray(datum.loss_fn_inputs["logprobs"].to_numpy(), dtype=np.float64)[sampled[0] :]
    return Completion(sequence[:first], sequence[first:], [float(lp) for lp in logprobs])


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


def forward_kl_data(
    completion: Completion, teacher_topk: TopkLogprobs, coef: float, until_divergence: bool = False
) -> list[tinker.types.Datum]:
    """One `cross_entropy` datum per top-k rank: the teacher's j-th token, weighted by its probability.

    `teacher_topk` is the teacher's top-k over the whole sequence, shape (len(sequence), k), row i
    the distribution of token i given tokens[:i] (row 0 has no context). Target t predicts token
    t+1, so it reads row t+1. Rows the teacher left empty (log-prob -99999) weigh 0.

    With `until_divergence`, positions after the first sampled token that is not the teacher's
    likeliest weigh 0: that position is where the student left the teacher's path and is taught its
    way back; after it the teacher only says how to go on with an answer already wrong.
    """
    sequence = completion.sequence
    ids_L_K, logprobs_L_K = np.asarray(teacher_topk.token_ids), np.asarray(teacher_topk.logprobs, np.float64)
    if ids_L_K.shape != logprobs_L_K.shape or ids_L_K.ndim != 2 or ids_L_K.shape[0] != len(sequence):
        raise DataFormatError(f"The teacher's top-k has shape {ids_L_K.shape} for a sequence of {len(sequence)} "
                              "tokens; expected (sequence length, k).")
    _, mask_T = completion.targets_T()
    if until_divergence:
        misses = np.flatnonzero((mask_T > 0) & (ids_L_K[1:, 0] != np.asarray(sequence[1:])))
        if misses.size:
            mask_T = mask_T.copy()
            mask_T[misses[0] + 1 :] = 0.0
    model_input = tinker.types.ModelInput.from_ints(sequence[:-1])
    data = []
    for rank in range(ids_L_K.shape[1]):
        weights_T = coef * np.exp(logprobs_L_K[1:, rank]) * mask_T
        data.append(tinker.types.Datum(
            model_input=model_input,
            loss_fn_inputs={
                "target_tokens": tinker.types.TensorData.from_numpy(ids_L_K[1:, rank].astype(np.int64)),
                "weights": tinker.types.TensorData.from_numpy(weights_T.astype(np.float32)),
            },
        ))
    return data


def forward_kl_topk(weights_D: Sequence[np.ndarray], student_logprobs_D: Sequence[np.ndarray], coef: float,
                    num_tokens: float) -> float:
    """Mean over sampled tokens of `sum_j p_teacher(j) (log p_teacher(j) - log p_student(j))`, top-k only.

    `weights_D` are the cross-entropy datums' weights (`coef * p_teacher`) and `student_logprobs_D`
    the trainer's log-probs of their targets, both (T,) per datum.
    """
    if coef <= 0 or num_tokens <= 0:
        return 0.0
    total = 0.0
    for weights_T, student_T in zip(weights_D, student_logprobs_D, strict=True):
        p_T = np.asarray(weights_T, np.float64) / coef
        keep = p_T > 0
        total += float(np.sum(p_T[keep] * (np.log(p_T[keep]) - np.asarray(student_T, np.float64)[keep])))
    return total / num_tokens
