"""The one way every trainer starts a run (`recipes_lib.lifecycle.open_run`), and the shared helpers its
loops use: `eval_due`, `resume_step`, `adam_params`, `resolve_renderer_name`."""

from pathlib import Path

import pytest

from recipes_lib.checkpoints import CheckpointRecord
from recipes_lib.config import BackendConfig
from recipes_lib.hyperparams import adam_params
from recipes_lib.lifecycle import eval_due, open_run, resume_step, save_due
from recipes_lib.model_info import resolve_renderer_name
from rl import train as rl_train
from tests.rl.fakes import EchoEnv, FakeDatasetBuilder, dataset_of


def test_evaluations_are_due_every_n_steps_but_not_before_the_last() -> None:
    assert [s for s in range(10) if eval_due(4, s, 10)] == [0, 4, 8]
    assert [s for s in range(10) if eval_due(3, s, 10)] == [0, 3, 6]  # 9 is last: the final evaluation covers it
    assert [s for s in range(1) if eval_due(5, s, 1)] == [0]  # a one-step run still evaluates its start
    assert not any(eval_due(0, s, 10) for s in range(10))


def test_periodic_checkpoints_follow_every_nth_step_but_not_the_last() -> None:
    assert [done for done in range(1, 11) if save_due(4, done, 10)] == [4, 8]
    assert [done for done in range(1, 11) if save_due(5, done, 10)] == [5]  # 10 is the final checkpoint's
    assert not any(save_due(0, done, 10) for done in range(1, 11))


def test_a_run_resumes_at_the_checkpoints_next_step() -> None:
    assert resume_step(None, 5) == 0
    assert resume_step(CheckpointRecord(name="000007", batch=2, epoch=1), 5) == 7
    assert resume_step(CheckpointRecord(name="000004", batch=4)) == 4


def test_adam_params_defaults_and_overrides() -> None:
    adam = adam_params(1e-3)
    assert (adam.learning_rate, adam.beta1, adam.beta2, adam.eps) == (1e-3, 0.9, 0.95, 1e-8)
    assert adam_params(2e-4, beta2=0.999, eps=1e-6).beta2 == 0.999


@pytest.mark.parametrize(("model", "asked", "expected"), [
    ("Qwen/Qwen3-8B", None, "qwen3"), ("Qwen/Qwen3-8B", "", "qwen3"), ("Qwen/Qwen3-8B", "role_colon", "role_colon"),
    ("meta-llama/Llama-3.1-8B-Instruct", None, "llama3"), ("recipes/tiny-llama", None, "smollm2")])
def test_the_renderer_is_the_one_asked_for_else_the_models_recommended_one(
        model: str, asked: str | None, expected: str) -> None:
    assert resolve_renderer_name(model, asked) == expected


def _config(log_path: Path) -> rl_train.Config:
    return rl_train.Config(log_path=str(log_path), model_name="recipes/tiny-llama", learning_rate=1e-3, max_tokens=2,
                           dataset_builder=FakeDatasetBuilder(train=dataset_of(EchoEnv)),
                           backend=BackendConfig(precision="float32", device="cpu"))


def test_open_run_starts_fresh_or_at_the_checkpoint_and_refuses_a_finished_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path)
    started = open_run(config, None, total_steps=3)
    assert started is not None and (started.start_step, started.total_steps) == (0, 3)
    assert (tmp_path / "config.json").exists() and started.training_client.get_tokenizer() is not None
    started.metrics_logger.close()

    resumed = open_run(config, CheckpointRecord(name="000004", batch=0, epoch=2), total_steps=10, batches_per_epoch=2)
    assert resumed is not None and resumed.start_step == 4
    resumed.metrics_logger.close()

    assert open_run(config, CheckpointRecord(name="final", batch=3, final=True), total_steps=3) is None
    assert "already holds a finished run (3 steps); nothing to do" in capsys.readouterr().out
