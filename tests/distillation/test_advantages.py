"""Reverse-KL advantages and the datums built from them, against hand-computed values."""

import numpy as np
import pytest
from tinker.types.topk_logprobs import MASK_LOGPROB, TopkLogprobs

from distillation.advantages import reverse_kl_advantages, teacher_kl
from distillation.data import (
    Completion,
    completion_to_datum,
    forward_kl_data,
    forward_kl_topk,
    teacher_targets_T,
)
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


def test_teacher_top_k_becomes_one_weighted_cross_entropy_datum_per_rank() -> None:
    completion = Completion(prompt_tokens=[10, 11, 12], tokens=[20, 21], logprobs=[-0.25, -1.0])
    # The teacher's top 2 at each of the 5 sequence positions; row i is the distribution of token i.
    topk = TopkLogprobs(
        token_ids=np.array([[0, 0], [11, 5], [12, 6], [20, 7], [22, 21]], dtype=np.int32),
        logprobs=np.array([[MASK_LOGPROB] * 2, [-0.1, -3.0], [-0.2, -2.0], [np.log(0.6), np.log(0.3)],
                           [np.log(0.5), np.log(0.25)]], dtype=np.float32),
    )
    first, second = forward_kl_data(completion, topk, coef=2.0)
    for datum in (first, second):
        assert datum.model_input.to_ints() == [10, 11, 12, 20]
    # Target t reads row t+1; the two prompt targets weigh 0.
    assert first.loss_fn_inputs["target_tokens"].tolist() == [11, 12, 20, 22]
    assert second.loss_fn_inputs["target_tokens"].tolist() == [5, 6, 7, 21]
    np.testing.assert_allclose(first.loss_fn_inputs["weights"].tolist(), [0, 0, 1.2, 1.0], rtol=1e-6)
    np.testing.assert_allclose(second.loss_fn_inputs["weights"].tolist(), [0, 0, 0.6, 0.5], rtol=1e-6)
    with pytest.raises(DataFormatError, match="shape"):
        forward_kl_data(completion, TopkLogprobs(topk.token_ids[:4], topk.logprobs[:4]), coef=1.0)


def test_forward_kl_topk_is_the_teacher_weighted_log_ratio_per_sampled_token() -> None:
    # Two sampled tokens; teacher top-2 probabilities (0.6, 0.3) and (0.5, 0.25), coef 2 in the weights.
    weights = [np.array([0, 0, 1.2, 1.0]), np.array([0, 0, 0.6, 0.5])]
    student = [np.array([0, 0, np.log(0.5), np.log(0.5)]), np.array([0, 0, np.log(0.1), np.log(0.25)])]
    expected = (0.6 * np.log(0.6 / 0.5) + 0.5 * np.log(0.5 / 0.5) + 0.3 * np.log(0.3 / 0.1) + 0.0) / 2
    assert forward_kl_topk(weights, student, coef=2.0, num_tokens=2) == pytest.approx(expected)


def test_until_divergence_stops_after_the_first_token_the_teacher_would_not_write() -> None:
    completion = Completion(prompt_tokens=[10, 11], tokens=[20, 21, 22], logprobs=[-0.5, -0.5, -0.5])
    # Row i is the teacher's top 2 for token i: it agrees with 20, would write 30 instead of 21, then 22.
    topk = TopkLogprobs(
        token_ids=np.array([[0, 0], [11, 1], [20, 2], [30, 21], [22, 3]], dtype=np.int32),
        logprobs=np.log(np.array([[1e-9, 1e-9], [0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4]], dtype=np.float32)),
    )
    everywhere = forward_kl_data(completion, topk, coef=1.0)[0].loss_fn_inputs["weights"].tolist()
    np.testing.assert_allclose(everywhere, [0, 0.8, 0.7, 0.6], rtol=1e-6)
    # The miss at 21 is taught (30, weight 0.7); the position after it is not.
    until = forward_kl_data(completion, topk, coef=1.0, until_divergence=True)[0]
    assert until.loss_fn_inputs["target_tokens"].tolist() == [11, 20, 30, 22]
    np.testing.assert_allclose(until.loss_fn_inputs["weights"].tolist(), [0, 0.8, 0.7, 0.0], rtol=1e-6)
