"""Reverse-KL advantages and the datums built from them, against hand-computed values."""

import numpy as np
import pytest

from distillation.advantages import reverse_kl_advantages, teacher_kl
from distillation.data import Completion, completion_to_datum, teacher_targets_T
from recipes_lib.exceptions import DataFormatError

# Two prompt targets (mask 0), then three sampled tokens.
STUDENT = np.array([0.0, 0.0, -0.5, -1.0, -2.0])
TEACHER = np.array([-9.0, -9.0, -1.5, -0.5, -2.0])
MASK = np.array([0.0, 0.0, 1.0, 1.0, 1.0])


def test_advantage_is_minus_coef_times_student_minus_teacher() -> None:
    # kl = (-0.5 - -1.5, -1.0 - -0.5, -2 - -2) = (1.0, -0.5, 0.0) on the sampled tokens.
    np.testing.assert_allclose(reverse_kl_advantages(STUDENT, TEACHER, MASK, coef=1.0), [0, 0, -1.0, 0.5, 0.0])
    np.testing.assert_allclose(reverse_kl_advantages(STUDENT, TEACHER, MASK, coef=2.0), [0, 0, -2.0, 1.0, 0.0])


def test_discount_adds_the_discounted_future_advantages() -> None:
    # a = (-1, 0.5, 0); with discount 0.5: a2 = 0, a1 = 0.5 + 0.5*0 = 0.5, a0 = -1 + 0.5*0.5 = -0.75.
    np.testing.assert_allclose(reverse_kl_advantages(STUDENT, TEACHER, MASK, discount=0.5), [0, 0, -0.75, 0.5, 0.0])


def test_baseline_is_subtracted_from_each_sampled_tokens_kl() -> None:
    # kl = (1.0, -0.5, 0.0), baseline 0.5: advantages (0.5 - kl) = (-0.5, 1.0, 0.5); prompt targets stay 0.
    np.testing.assert_allclose(reverse_kl_advantages(STUDENT, TEACHER, MASK, baseline=0.5), [0, 0, -0.5, 1.0, 0.5])


def test_teacher_kl_is_the_token_mean_over_sampled_tokens_only() -> None:
    other = (np.array([0.0, -1.0]), np.array([0.0, -3.0]), np.array([0.0, 1.0]))  # one sampled token, kl 2
    # (1.0 - 0.5 + 0.0 + 2.0) / 4 sampled tokens; the prompt targets' large gaps do not count.
    assert teacher_kl([STUDENT, other[0]], [TEACHER, other[1]], [MASK, other[2]]) == pytest.approx(2.5 / 4)


def test_completion_becomes_an_aligned_importance_sampling_datum() -> None:
    completion = Completion(prompt_tokens=[10, 11, 12], tokens=[20, 21], logprobs=[-0.25, -1.0])
    # compute_logprobs of [10, 11, 12, 20, 21]: None for the first token, then one per token.
    teacher_T = teacher_targets_T(completion, [None, -7.0, -7.0, -0.75, -3.0])
    np.testing.assert_allclose(teacher_T, [0.0, 0.0, -0.75, -3.0])
    datum, mask_T = completion_to_datum(completion, teacher_T, coef=1.0)
    assert datum.model_input.to_ints() == [10, 11, 12, 20]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [11, 12, 20, 21]
    np.testing.assert_allclose(datum.loss_fn_inputs["logprobs"].tolist(), [0.0, 0.0, -0.25, -1.0])
    # kl = (-0.25 - -0.75, -1.0 - -3.0) = (0.5, 2.0)
    np.testing.assert_allclose(datum.loss_fn_inputs["advantages"].tolist(), [0.0, 0.0, -0.5, -2.0])
    np.testing.assert_array_equal(mask_T, [0, 0, 1, 1])


def test_mismatched_lengths_are_named_errors() -> None:
    with pytest.raises(DataFormatError, match="2 tokens came with 1 log-probs"):
        Completion([1], [2, 3], [-1.0])
    with pytest.raises(DataFormatError, match="3 log-probs for a sequence of 2 tokens"):
        teacher_targets_T(Completion([1], [2], [-1.0]), [None, -1.0, -2.0])
