"""Per-token advantages from a teacher's log-probs (pure).

On a token the student sampled, `kl_t = student_logprob_t - teacher_logprob_t` is a one-sample
estimate of the reverse KL(student || teacher) at that position: positive where the student likes
the token more than the teacher does. The student's advantage is `-coef * kl_t`, so training with
`importance_sampling` lowers the probability of tokens the teacher finds unlikely and raises that of
tokens the teacher prefers. With `discount > 0` each token's advantage also collects the discounted
advantages of the tokens after it (`a_t + discount * a_{t+1} + discount**2 * a_{t+2} + ...`), so an
early token is credited with the mistakes it leads to.

With `baseline` (e.g. the batch's mean KL per sampled token, `teacher_kl`), the advantage is
`coef * (baseline - kl_t)`: a constant baseline leaves the gradient's expectation unchanged (the
expected gradient of a token's log-prob is 0). Without one, the reverse KL is positive on average,
so nearly every sampled token is pushed down and answers drift shorter; what each choice did on the
number-to-words task is in docs/findings.md.

Only sampled tokens (mask 1) count; prompt tokens get advantage 0 and are left out of `teacher_kl`.
"""

from collections.abc import Sequence

import numpy as np


def reverse_kl_T(student_logprobs_T: np.ndarray, teacher_logprobs_T: np.ndarray, mask_T: np.ndarray) -> np.ndarray:
    """`(student - teacher) * mask`, shape (T,)."""
    if not student_logprobs_T.shape == teacher_logprobs_T.shape == mask_T.shape:
        raise ValueError(f"shapes differ: student {student_logprobs_T.shape}, teacher {teacher_logprobs_T.shape}, "
                         f"mask {mask_T.shape}")
    return (np.asarray(student_logprobs_T, np.float64) - np.asarray(teacher_logprobs_T, np.float64)) * mask_T


def reverse_kl_advantages(
    student_logprobs_T: np.ndarray,
    teacher_logprobs_T: np.ndarray,
    mask_T: np.ndarray,
    coef: float = 1.0,
    discount: float = 0.0,
    baseline: float = 0.0,
) -> np.ndarray:
    """The student's per-token advantages, `coef * (baseline - kl_t)` (discounted over later tokens if asked).

    Args:
        student_logprobs_T: the sampler's log-prob of each target token, shape (T,).
        teacher_logprobs_T: the teacher's log-prob of the same tokens, shape (T,).
        mask_T: 1.0 on sampled tokens, 0.0 on prompt tokens, shape (T,).
        coef: the weight of the KL (`kl_penalty_coef`).
        discount: 0 for per-token advantages; in (0, 1] to add discounted future advantages.
        baseline: subtracted from each sampled token's KL (e.g. the batch's `teacher_kl`).
    """
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")
    advantages_T = coef * (baseline - reverse_kl_T(student_logprobs_T, teacher_logprobs_T, mask_T)) * mask_T
    if discount > 0:
        running = 0.0
        for t in range(len(advantages_T) - 1, -1, -1):
            running = advantages_T[t] + discount * running
            advantages_T[t] = running
    return advantages_T * mask_T


def teacher_kl(
    student_logprobs_D: Sequence[np.ndarray], teacher_logprobs_D: Sequence[np.ndarray], masks_D: Sequence[np.ndarray]
) -> float:
    """The mean of `kl_t` over every sampled token of a batch (the `teacher_kl` metric)."""
    total = sum(float(reverse_kl_T(s, t, m).sum()) for s, t, m in zip(student_logprobs_D, teacher_logprobs_D, masks_D,
                                                                       strict=True))
    count = sum(float(m.sum()) for m in masks_D)
    return total / count if count else 0.0
