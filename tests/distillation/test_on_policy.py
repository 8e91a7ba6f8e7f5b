"""Two-step on-policy distillation runs on the tiny model, through the recipe's command line."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinker import types

from distillation import train
from distillation.advantages import teacher_kl
from distillation.data import completion_from_datum, completion_to_datum, forward_kl_data, teacher_targets_T
from recipes.distillation import on_policy
from recipes.number_words.task import SYSTEM_PROMPT
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints, save_checkpoint
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.logging import read_metrics
from recipes_lib.run_folder import last_sampler_path, read_run_settings
from tests.lora_training import train_on_tokens

TINY = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=2", "max_tokens=4",
        "dataset_builder.batch_size=2", "dataset_builder.num_prompts=8", "dataset_builder.num_heldout=3",
        "group_size=2", "eval_every=1", "evaluator_builders.0.max_tokens=4"]


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory: pytest.TempPathFactory, service_client) -> Path:  # type: ignore[no-untyped-def]
    """A run folder whose last sampler checkpoint is a tiny-llama LoRA trained a few steps on one sequence.

    Trained hard enough to differ clearly from its base where the student samples: after 3 steps at
    1e-2 the forward KL below was 7e-5 to 2.2e-4 from run to run (sampling varies), against a 1e-4
    threshold; after 6 at 3e-2 it is ~4."""
    folder = tmp_path_factory.mktemp("teacher")
    client = service_client.create_lora_training_client("recipes/tiny-llama", rank=4, seed=0)
    train_on_tokens(client, list(range(100, 120)), steps=6, learning_rate=3e-2)
    save_checkpoint(client, folder, "final", batch=3, kind="sampler", final=True)
    return folder


@pytest.mark.parametrize("mode", ["defaults", "reverse_kl"])
def test_two_steps_with_a_checkpoint_teacher(tmp_path: Path, teacher_run: Path, mode: str) -> None:
    # The recipe's defaults (the teacher's top 2 until the divergence) and the cookbook's reverse KL alone.
    extra = [] if mode == "defaults" else ["kl_penalty_coef=1", "forward_kl_topk=0", "center_kl=true"]
    config = config_from_argv(on_policy.build_config(), [*TINY, f"log_path={tmp_path}", *extra,
                                                         f"teacher_log_path={teacher_run}"])
    on_policy.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 0, 1, 2]  # the teacher's eval, two steps, the final eval
    assert set(rows[0]) == {"step", "teacher/test/exact_match"}
    for row in rows[1:3]:
        assert 0 < row["num_tokens"] and row["completion_tokens"] <= 4
        if mode == "defaults":  # two cross-entropy datums per answer, no importance-sampling pass
            assert row["optim/num_datums"] <= 8 and row["optim/num_datums"] % 2 == 0
            assert "forward_kl_topk" in row and "optim/kl_sample_train_v1" not in row
        else:
            assert row["optim/num_datums"] <= 4 and "forward_kl_topk" not in row
            assert abs(row["optim/kl_sample_train_v1"]) < 1e-4  # sampler and trainer agree in fp32
    # A one-sample KL estimate per step may be near 0 by chance (7e-6 seen with center_kl); over both
    # steps the trained teacher must differ from the student.
    assert max(abs(row["teacher_kl"]) for row in rows[1:3]) > 1e-6
    # Evaluated before the first step and after the last (which covers the one before the last step).
    assert "test/exact_match" in rows[1] and "test/exact_match" not in rows[2] and "test/exact_match" in rows[3]
    assert load_checkpoints(tmp_path)[-1].name == "final"
    # `recipes.chat log_path=...` finds the prompts' system prompt in the run's config.json.
    assert read_run_settings(tmp_path).system_prompt == SYSTEM_PROMPT


def test_teacher_equal_to_the_student_gives_zero_kl(tmp_path: Path) -> None:
    """A fresh LoRA starts equal to its base (B = 0): scored by that base, every token's KL is 0."""
    argv = [*TINY, f"log_path={tmp_path}", "teacher_log_path=None", "teacher_model_name=recipes/tiny-llama",
            "max_steps=1", "evaluate_teacher=False", "eval_every=0", "kl_penalty_coef=1"]
    train.main(config_from_argv(on_policy.build_config(), argv))
    (row,) = read_metrics(tmp_path)
    assert abs(row["teacher_kl"]) < 1e-5 and abs(row["optim/loss_sum"]) < 1e-3
    assert abs(row["forward_kl_topk"]) < 1e-5


def test_forward_kl_topk_trains_on_the_teachers_top_tokens(tmp_path: Path, teacher_run: Path) -> None:
    """With forward_kl_topk=3 each answer adds 3 cross-entropy datums; against its own base the term is 0."""
    argv = [*TINY, f"log_path={tmp_path}", "teacher_log_path=None", "teacher_model_name=recipes/tiny-llama",
            "max_steps=1", "evaluate_teacher=False", "eval_every=0", "forward_kl_topk=3", "kl_penalty_coef=1"]
    train.main(config_from_argv(on_policy.build_config(), argv))
    (row,) = read_metrics(tmp_path)
    assert abs(row["forward_kl_topk"]) < 1e-5 and row["optim/forward_kl_loss_sum"] > 0
    assert row["optim/num_datums"] % 4 == 0 and "optim/kl_sample_train_v1" in row  # 1 + 3 datums per answer
    # Against the trained teacher the term is positive. With kl_penalty_coef=0 it trains alone: the
    # importance-sampling pass, all of whose advantages would be 0, is not sent.
    argv = [*TINY, f"log_path={tmp_path / 'trained'}", f"teacher_log_path={teacher_run}", "max_steps=1",
            "evaluate_teacher=False", "eval_every=0", "forward_kl_topk=3", "kl_penalty_coef=0",
            "forward_kl_until_divergence=false"]
    train.main(config_from_argv(on_policy.build_config(), argv))
    (row,) = read_metrics(tmp_path / "trained")
    assert row["forward_kl_topk"] > 1e-4 and row["teacher_kl"] != 0
    assert row["optim/num_datums"] % 3 == 0 and "optim/kl_sample_train_v1" not in row


def test_exactly_one_teacher_is_required(tmp_path: Path) -> None:
    # Naming a teacher replaces the default one (the demo run) ...
    argv = [*TINY, f"log_path={tmp_path}", "teacher_model_name=recipes/tiny-llama"]
    config = config_from_argv(on_policy.build_config(argv), argv)
    assert config.teacher_log_path is None and config.teacher_model_name == "recipes/tiny-llama"
    # ... and naming two is refused.
    argv = [*TINY, f"log_path={tmp_path}", "teacher_model_name=recipes/tiny-llama", f"teacher_log_path={tmp_path}"]
    with pytest.raises(SystemExit):
        config_from_argv(on_policy.build_config(argv), argv)
    with pytest.raises(ConfigurationError, match="make demo"):
        config = config_from_argv(on_policy.build_config(), [*TINY, f"log_path={tmp_path}"])
        if Path(on_policy.DEMO_RUN, "checkpoints.jsonl").exists():
            raise ConfigurationError("make demo (runs/demo exists here, so the hint cannot be shown)")
        on_policy.main(config)


def test_a_resumed_run_logs_what_the_uninterrupted_run_logged(tmp_path: Path) -> None:
    """Seeded samples and the RL loop's checkpoints: stopped after step 0 and resumed, a run logs the
    uninterrupted run's metrics (timings aside; the first part's length shows only in its done_frac)."""
    argv = [*TINY, "teacher_log_path=None", "teacher_model_name=recipes/tiny-llama", "evaluate_teacher=False",
            "eval_every=0", "save_every=1", "kl_penalty_coef=1", "lr_schedule=constant",
            "behavior_if_log_dir_exists=resume"]
    train.main(config_from_argv(on_policy.build_config(), [*argv, f"log_path={tmp_path / 'whole'}"]))
    train.main(config_from_argv(on_policy.build_config(), [*argv, f"log_path={tmp_path / 'parts'}", "max_steps=1"]))
    train.main(config_from_argv(on_policy.build_config(), [*argv, f"log_path={tmp_path / 'parts'}"]))
    whole, parts = (
        [{k: v for k, v in row.items() if not k.startswith("time/") and k != "progress/done_frac"}
         for row in read_metrics(tmp_path / name)]
        for name in ("whole", "parts"))
    assert [row["step"] for row in parts] == [0, 1] and parts == whole
    assert "teacher_kl" in parts[1] and "optim/kl_sample_train_v1" in parts[1]


def test_the_rl_step_trains_on_the_datums_the_old_loop_built(tmp_path: Path, teacher_run: Path, service_client: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """One step on the tiny model: the importance-sampling datums the RL loop sends are the old loop's
    (`completion_to_datum` of the same samples, the teacher's `compute_logprobs` and the batch's mean KL
    with center_kl), and the cross-entropy datums are `forward_kl_data` of the teacher's top 2."""
    from local_tinker.clients import TrainingClient

    sent: list[tuple[str, list[Any]]] = []
    original = TrainingClient.forward_backward

    def recording(self: Any, data: list[Any], loss_fn: Any, loss_fn_config: Any = None) -> Any:
        sent.append((loss_fn, data))
        return original(self, data, loss_fn, loss_fn_config)

    monkeypatch.setattr(TrainingClient, "forward_backward", recording)
    argv = [*TINY, f"log_path={tmp_path}", f"teacher_log_path={teacher_run}", "max_steps=1", "evaluate_teacher=False",
            "eval_every=0", "kl_penalty_coef=0.5", "center_kl=true", "forward_kl_topk=2"]
    train.main(config_from_argv(on_policy.build_config(), argv))
    assert [loss_fn for loss_fn, _ in sent] == ["importance_sampling", "cross_entropy"]
    (_, policy_D), (_, forward_D) = sent
    teacher = service_client.create_sampling_client(model_path=last_sampler_path(teacher_run))
    completions = [completion_from_datum(d, (d.loss_fn_inputs["logprobs"].to_numpy() != 0).astype(float))
                   for d in policy_D]
    teacher_T = [teacher_targets_T(c, teacher.compute_logprobs(types.ModelInput.from_ints(c.sequence)).result())
                 for c in completions]
    targets = [c.targets_T() for c in completions]
    baseline = teacher_kl([t[0] for t in targets], teacher_T, [t[1] for t in targets])
    for datum, completion, teacher_logprobs in zip(policy_D, completions, teacher_T, strict=True):
        old, _ = completion_to_datum(completion, teacher_logprobs, coef=0.5, baseline=baseline)
        assert datum.model_input.to_ints() == old.model_input.to_ints()
        for key in ("target_tokens", "logprobs", "advantages"):
            np.testing.assert_allclose(datum.loss_fn_inputs[key].to_numpy(), old.loss_fn_inputs[key].to_numpy(),
                                       atol=1e-5)
    params = types.SamplingParams(max_tokens=1, temperature=1.0)
    old_forward = [d for c in completions for d in forward_kl_data(c, teacher.sample(
        types.ModelInput.from_ints(c.sequence), 1, params, include_prompt_logprobs=True,
        topk_prompt_logprobs=2).result().topk_prompt_logprobs_np, coef=1.0, until_divergence=True)]
    assert len(forward_D) == len(old_forward) == 2 * len(policy_D)
    for datum, old in zip(forward_D, old_forward, strict=True):
        np.testing.assert_array_equal(datum.loss_fn_inputs["target_tokens"].to_numpy(),
                                      old.loss_fn_inputs["target_tokens"].to_numpy())
        np.testing.assert_allclose(datum.loss_fn_inputs["weights"].to_numpy(), old.loss_fn_inputs["weights"].to_numpy(),
                                   atol=1e-5)
