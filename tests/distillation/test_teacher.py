"""The teacher's scores as the RL step's shaper hook, against hand-computed values and against the
datums the old distillation loop built from the same samples (`completion_to_datum`)."""

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import tinker
from tinker.types.topk_logprobs import MASK_LOGPROB, TopkLogprobs

from distillation.data import Completion, completion_from_datum, completion_to_datum, forward_kl_data
from distillation.datasets import PromptDataset, PromptEnv, PromptEnvDataset
from distillation.teacher import TeacherScorer
from recipes_lib.completers import TokensWithLogprobs
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from rl.data import TrainingBatch, assemble_training_data, loss_input
from rl.dataset import renderer_for
from rl.types import Trajectory, TrajectoryGroup, Transition
from tests.rl.fakes import ints

# compute_logprobs of [10, 11, 12, 20, 21]: None for the first token, then one per token.
TEACHER_LOGPROBS = {(10, 11, 12, 20, 21): [None, -7.0, -7.0, -0.75, -3.0], (10, 11, 12, 22): [None, -7.0, -7.0, -1.0]}
TOPK = TopkLogprobs(
    token_ids=np.array([[0, 0], [11, 5], [12, 6], [20, 7], [22, 21]], dtype=np.int32),
    logprobs=np.array([[MASK_LOGPROB] * 2, [-0.1, -3.0], [-0.2, -2.0], [np.log(0.6), np.log(0.3)],
                       [np.log(0.5), np.log(0.25)]], dtype=np.float32),
)


class _FakeTeacher:
    """Scores the sequences of TEACHER_LOGPROBS; its top 2 is TOPK (for the five-token sequence)."""

    async def compute_logprobs(self, model_input: tinker.types.ModelInput) -> list[float | None]:
        return TEACHER_LOGPROBS[tuple(model_input.to_ints())]

    async def sample(self, model_input: tinker.types.ModelInput, num_samples: int, params: Any, **kwargs: Any) -> Any:
        assert kwargs == {"include_prompt_logprobs": True, "topk_prompt_logprobs": 2}
        return SimpleNamespace(prompt_logprobs=TEACHER_LOGPROBS[tuple(model_input.to_ints())],
                               topk_prompt_logprobs_np=TOPK)


def _batch(*answers: tuple[list[int], list[float]]) -> TrainingBatch:
    """One group of single-turn episodes on the prompt [10, 11, 12], rewards 0 (advantages 0)."""
    trajectories = [Trajectory([Transition(ints([10, 11, 12]), TokensWithLogprobs(tokens, logprobs), 0.0, True)],
                               final_ob=tinker.types.ModelInput.empty()) for tokens, logprobs in answers]
    group = TrajectoryGroup(trajectories, [0.0] * len(answers), [{} for _ in answers])
    return assemble_training_data([group], [np.zeros(len(answers))])


def _shape(scorer: TeacherScorer, batch: TrainingBatch) -> Any:
    return asyncio.run(scorer(batch))


def test_advantages_are_minus_coef_times_the_reverse_kl_as_the_old_loops_datums() -> None:
    batch = _batch(([20, 21], [-0.25, -1.0]))
    shaped = _shape(TeacherScorer(_FakeTeacher(), kl_penalty_coef=1.0), batch)
    (datum,) = shaped.batch.data_D
    # kl = (-0.25 - -0.75, -1.0 - -3.0) = (0.5, 2.0); the prompt's targets stay 0.
    np.testing.assert_allclose(loss_input(datum, "advantages"), [0.0, 0.0, -0.5, -2.0])
    old, old_mask = completion_to_datum(Completion([10, 11, 12], [20, 21], [-0.25, -1.0]),
                                        np.array([0.0, 0.0, -0.75, -3.0]), coef=1.0)
    assert datum.model_input.to_ints() == old.model_input.to_ints()
    for key in ("target_tokens", "logprobs", "advantages"):
        np.testing.assert_array_equal(datum.loss_fn_inputs[key].to_numpy(), old.loss_fn_inputs[key].to_numpy())
    np.testing.assert_array_equal(shaped.batch.masks_D[0], old_mask)
    assert shaped.policy_loss and shaped.extra_losses == []
    assert shaped.metrics["teacher_kl"] == pytest.approx(1.25) and shaped.metrics["completion_tokens"] == 2.0
    assert shaped.metrics["num_tokens"] == 5.0


def test_center_kl_subtracts_the_minibatch_mean_and_empty_answers_are_left_out() -> None:
    # Answers [20, 21] (kl 0.5, 2.0) and [22] (kl -0.5 - -1.0 = 0.5), and an empty one: mean kl 3.0 / 3 = 1.0.
    batch = _batch(([20, 21], [-0.25, -1.0]), ([22], [-0.5]), ([], []))
    shaped = _shape(TeacherScorer(_FakeTeacher(), kl_penalty_coef=2.0, center_kl=True), batch)
    assert len(shaped.batch.data_D) == 2 and shaped.metrics["teacher_kl"] == pytest.approx(1.0)
    # 2 * (1.0 - kl) on the sampled tokens.
    np.testing.assert_allclose(loss_input(shaped.batch.data_D[0], "advantages"), [0.0, 0.0, 1.0, -2.0])
    np.testing.assert_allclose(loss_input(shaped.batch.data_D[1], "advantages"), [0.0, 0.0, 1.0])
    assert shaped.metrics["completion_tokens"] == 1.5
    with pytest.raises(ConfigurationError, match="Every completion of the batch was empty"):
        _shape(TeacherScorer(_FakeTeacher()), _batch(([], [])))


def test_forward_kl_topk_is_an_extra_cross_entropy_loss_and_alone_without_the_reverse_kl() -> None:
    batch = _batch(([20, 21], [-0.25, -1.0]))
    shaped = _shape(TeacherScorer(_FakeTeacher(), kl_penalty_coef=0.0, forward_kl_topk=2, forward_kl_coef=2.0), batch)
    assert not shaped.policy_loss  # every advantage is 0: the importance-sampling pass is left out
    (extra,) = shaped.extra_losses
    assert extra.loss_fn == "cross_entropy" and len(extra.data_D) == 2
    expected = forward_kl_data(Completion([10, 11, 12], [20, 21], [-0.25, -1.0]), TOPK, coef=2.0)
    for datum, old in zip(extra.data_D, expected, strict=True):
        for key in ("target_tokens", "weights"):
            np.testing.assert_array_equal(datum.loss_fn_inputs[key].to_numpy(), old.loss_fn_inputs[key].to_numpy())
    # The trainer's log-probs of the targets: student p = 0.5, 0.5 (rank 1) and 0.1, 0.25 (rank 2).
    student = [np.array([0, 0, np.log(0.5), np.log(0.5)]), np.array([0, 0, np.log(0.1), np.log(0.25)])]
    output = SimpleNamespace(loss_fn_outputs=[{"logprobs": tinker.types.TensorData.from_numpy(s.astype(np.float32))}
                                              for s in student], metrics={"loss:sum": 3.5})
    assert extra.metrics is not None
    metrics = extra.metrics(output)  # type: ignore[arg-type]
    hand = (0.6 * np.log(0.6 / 0.5) + 0.5 * np.log(0.5 / 0.5) + 0.3 * np.log(0.3 / 0.1)) / 2
    assert metrics == {"forward_kl_topk": pytest.approx(hand, rel=1e-5), "optim/forward_kl_loss_sum": 3.5}
    with_reverse = _shape(TeacherScorer(_FakeTeacher(), kl_penalty_coef=1.0, forward_kl_topk=2), batch)
    assert with_reverse.policy_loss and len(with_reverse.extra_losses) == 1


def test_completion_from_datum_reads_a_single_turn_answer_and_refuses_two_turns() -> None:
    batch = _batch(([20, 21], [-0.25, -1.0]))
    completion = completion_from_datum(batch.data_D[0], batch.masks_D[0])
    assert completion == Completion([10, 11, 12], [20, 21], [-0.25, -1.0])
    with pytest.raises(DataFormatError, match="single-turn"):
        completion_from_datum(batch.data_D[0], np.array([0.0, 1.0, 0.0, 1.0]))


def test_prompts_become_groups_of_single_turn_envs_with_reward_0() -> None:
    renderer = renderer_for("recipes/tiny-llama")
    prompts = [[{"role": "user", "content": f"Write {n} in words."}] for n in (1, 2, 3, 4)]
    dataset = PromptEnvDataset(PromptDataset(prompts, batch_size=2), renderer, group_size=3)  # type: ignore[arg-type]
    assert len(dataset) == 2
    groups = dataset.get_batch(1)
    envs = asyncio.run(groups[0].make_envs())
    assert len(groups) == 2 and len(envs) == 3 and all(isinstance(env, PromptEnv) for env in envs)
    observation, stop = asyncio.run(envs[0].initial_observation())
    assert observation.to_ints() == renderer.build_generation_prompt(prompts[2]).to_ints()  # type: ignore[arg-type]
    assert stop == renderer.get_stop_sequences()
    result = asyncio.run(envs[0].step([5, 6]))
    assert result.reward == 0.0 and result.episode_done
