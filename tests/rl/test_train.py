"""The RL loop end to end on a tiny random model: metrics, files, resume, options, and env failures."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinker import types

from examples import custom_env
from recipes.arithmetic.env import ArithmeticDatasetBuilder
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.logging import read_metrics
from rl import train
from rl.dataset import ListRLDataset, RepeatedEnvGroupBuilder
from rl.rollouts import RolloutError, RolloutLimits
from rl.types import RLDatasetBuilder
from tests.rl.fakes import EchoEnv, FailingEnv, FakeDatasetBuilder, NanRewardEnv, dataset_of
from tests.rl.resume_envs import EvenTokensDatasetBuilder

TINY = "recipes/tiny-llama"


def _config(log_path: Path, builder: RLDatasetBuilder, **overrides: Any) -> train.Config:
    settings: dict[str, Any] = dict(
        log_path=str(log_path), model_name=TINY, dataset_builder=builder, learning_rate=1e-3, max_tokens=4,
        behavior_if_log_dir_exists="resume", backend=BackendConfig(precision="float32", device="cpu"),
        eval_every=0, save_every=0,
    )
    return train.Config(**{**settings, **overrides})


def _arithmetic(n_batches: int = 2) -> ArithmeticDatasetBuilder:
    return ArithmeticDatasetBuilder(model_name_for_tokenizer=TINY, batch_size=2, group_size=2, n_batches=n_batches,
                                    test_size=4)


def _rows(log_path: Path) -> dict[int, dict[str, Any]]:
    return {row["step"]: row for row in read_metrics(log_path)}


def test_a_run_logs_the_spec_metrics_transcripts_and_checkpoints(tmp_path: Path) -> None:
    train.main(_config(tmp_path, _arithmetic(), eval_every=1, save_every=1))
    rows = _rows(tmp_path)
    assert sorted(rows) == [0, 1, 2]  # two iterations, then the final evaluation
    for key in ("env/all/reward/total", "env/all/correct", "env/all/format", "env/all/ac_tokens_per_turn",
                "env/all/by_group/frac_mixed", "optim/kl_sample_train_v1", "optim/kl_sample_train_v2",
                "optim/entropy", "optim/lr", "progress/done_frac", "time/total", "time/sample",
                "test/env/all/correct", "test/env/all/reward/total"):
        assert key in rows[0], key
    assert abs(rows[0]["optim/kl_sample_train_v1"]) < 1e-3  # same weights, fp32: sampler == trainer
    assert rows[1]["progress/done_frac"] == 1.0 and rows[1]["optim/lr"] == 1e-3
    assert "test/env/all/correct" in rows[2]
    assert [(r.name, r.batch, r.final) for r in load_checkpoints(tmp_path)] == [
        ("000001", 1, False), ("final", 2, True)]  # the last step's checkpoint is the final one, saved once
    transcript = (tmp_path / "rollouts" / "iteration_000001.txt").read_text()
    assert "What is" in transcript and "[policy]" in transcript and "advantage" in transcript


def test_a_rerun_resumes_after_the_last_checkpoint(tmp_path: Path) -> None:
    train.main(_config(tmp_path, _arithmetic(n_batches=3), max_steps=2))
    train.main(_config(tmp_path, _arithmetic(n_batches=3)))
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert [r.batch for r in load_checkpoints(tmp_path)] == [2, 3]


def test_an_env_error_fails_the_run_with_the_env_class_and_original_traceback(tmp_path: Path) -> None:
    with pytest.raises(RolloutError, match=r"FailingEnv\.step raised ValueError: the grader crashed") as info:
        train.main(_config(tmp_path, FakeDatasetBuilder(train=dataset_of(FailingEnv))))
    assert isinstance(info.value.__cause__, ValueError)


def _mixed(bad_env: type, good_groups: int = 3) -> FakeDatasetBuilder:
    builders = [RepeatedEnvGroupBuilder(bad_env, 2)] + [RepeatedEnvGroupBuilder(EchoEnv, 2)] * good_groups
    return FakeDatasetBuilder(train=ListRLDataset(builders, batch_size=len(builders)))


def test_tolerated_env_errors_are_counted_and_their_group_dropped(tmp_path: Path) -> None:
    train.main(_config(tmp_path, _mixed(FailingEnv), rollout_error_tolerance=True))
    row = _rows(tmp_path)[0]
    assert row["rollout_errors/ValueError"] == 1.0
    assert row["env/all/total_episodes"] == 6.0  # the 3 good groups of 2
    assert row["optim/num_datums"] == 6.0  # EchoEnv's two turns extend each other: one datum each


def test_nan_rewards_are_reported_and_not_trained_on(tmp_path: Path) -> None:
    train.main(_config(tmp_path, _mixed(NanRewardEnv)))
    row = _rows(tmp_path)[0]
    assert row["rollout_errors/nonfinite_reward"] == 1.0
    assert row["optim/num_datums"] == 6.0 and row["env/all/total_episodes"] == 6.0


@pytest.mark.parametrize("loss_fn", ["ppo", "dro"])  # the others differ only inside the engine
def test_substeps_split_the_batch_into_optimizer_steps(tmp_path: Path, loss_fn: str) -> None:
    train.main(_config(tmp_path, FakeDatasetBuilder(train=dataset_of(EchoEnv, groups=4, batches=1)),
                       num_substeps=2, loss_fn=loss_fn))
    row = _rows(tmp_path)[0]
    assert row["optim/num_minibatches"] == 2.0 and row["optim/num_datums"] == 8.0


def test_streaming_minibatches(tmp_path: Path) -> None:
    stream = train.StreamMinibatchConfig(groups_per_batch=4, num_minibatches=2)
    train.main(_config(tmp_path, FakeDatasetBuilder(train=dataset_of(EchoEnv, groups=4)),
                       stream_minibatch_config=stream))
    rows = _rows(tmp_path)
    assert [rows[s]["optim/num_minibatches"] for s in (0, 1)] == [2.0, 2.0]
    assert rows[1]["sampling_client/step_max"] == 1.0


def test_streaming_needs_the_datasets_batch_size(tmp_path: Path) -> None:
    stream = train.StreamMinibatchConfig(groups_per_batch=3, num_minibatches=1)
    with pytest.raises(Exception, match="groups_per_batch"):
        train.main(_config(tmp_path, FakeDatasetBuilder(train=dataset_of(EchoEnv, groups=4)),
                           stream_minibatch_config=stream))


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "stable_reinforce"])
def test_async_off_policy_training(tmp_path: Path, loss_fn: str) -> None:
    # 3 batches of 2 groups = 6 groups; 2 per step -> 3 steps, each on groups 1 step stale (step 0: fresh).
    # stable_reinforce trains on what the stale samplers recorded, named by the datums' provenance.
    async_config = train.AsyncConfig(max_steps_off_policy=1, groups_per_batch=2)
    train.main(_config(tmp_path, FakeDatasetBuilder(train=dataset_of(EchoEnv, groups=2, batches=3)),
                       async_config=async_config, loss_fn=loss_fn))
    rows = _rows(tmp_path)
    assert sorted(rows) == [0, 1, 2]
    for step, row in rows.items():
        assert row["sampling_client/step_min"] == row["sampling_client/step_max"] == max(step - 1, 0)
        assert row["env/all/total_episodes"] == 4.0


def test_kl_penalty_against_the_base_model(tmp_path: Path) -> None:
    train.main(_config(tmp_path, _arithmetic(n_batches=1), kl_penalty_coef=0.1))
    row = _rows(tmp_path)[0]
    assert abs(row["kl_policy_base"]) < 1e-3  # the adapter starts as the base model


def test_kl_penalty_against_a_checkpoint(tmp_path: Path, service_client: Any) -> None:
    """Against other weights (three large steps away from the base) the first step's KL is not 0."""
    trainer = service_client.create_lora_training_client(TINY, rank=32, seed=0)
    datum = types.Datum(model_input=types.ModelInput.from_ints([1, 5, 9, 14]),
                        loss_fn_inputs={"target_tokens": [5, 9, 14, 3], "weights": [1.0] * 4})
    for _ in range(3):
        trainer.forward_backward([datum], "cross_entropy").result()
        trainer.optim_step(types.AdamParams(learning_rate=0.1)).result()
    reference = trainer.save_weights_for_sampler("reference").result().path
    train.main(_config(tmp_path, _arithmetic(n_batches=1), kl_penalty_coef=0.1, kl_reference_path=reference,
                       kl_discount_factor=0.9))
    assert abs(_rows(tmp_path)[0]["kl_policy_base"]) > 1e-2
    with pytest.raises(ConfigurationError, match="kl_penalty_coef=0 turns off"):
        _config(tmp_path, _arithmetic(), kl_reference_path=reference)


def test_config_rejects_async_and_streaming_together(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not both"):
        _config(tmp_path, _arithmetic(), async_config=train.AsyncConfig(max_steps_off_policy=1, groups_per_batch=2),
                stream_minibatch_config=train.StreamMinibatchConfig(groups_per_batch=2, num_minibatches=1))


def test_the_readme_custom_env_trains_unchanged(tmp_path: Path) -> None:
    custom_env.main(custom_env.Config(model_name=TINY, log_path=str(tmp_path)))
    rows = _rows(tmp_path)
    assert sorted(rows) == [0, 1] and "env/all/one_word" in rows[0]
    assert load_checkpoints(tmp_path)[-1].final


def test_rerunning_a_finished_run_changes_nothing(tmp_path: Path) -> None:
    train.main(_config(tmp_path, _arithmetic(n_batches=1), eval_every=1))
    before = (tmp_path / "metrics.jsonl").read_text()
    train.main(_config(tmp_path, _arithmetic(n_batches=1), eval_every=1))
    assert (tmp_path / "metrics.jsonl").read_text() == before


def test_grpo_advantages_averaged_per_sequence_reach_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """advantage_normalization=group_std, loss_aggregation=sequence_mean, loss_fn=gspo: each datum's
    action tokens carry A / n (n its action tokens), and each group's A sum to 0 with a sample std of
    std / (std + 1e-4) (the rewards, shares of even token ids, differ within a group)."""
    from local_tinker.clients import TrainingClient

    sent: list[tuple[list[Any], str]] = []
    original = TrainingClient.forward_backward

    def recording(self: Any, data: list[Any], loss_fn: Any, loss_fn_config: Any = None) -> Any:
        sent.append((data, loss_fn))
        return original(self, data, loss_fn, loss_fn_config)

    monkeypatch.setattr(TrainingClient, "forward_backward", recording)
    train.main(_config(tmp_path, EvenTokensDatasetBuilder(n_batches=1, batch_size=2, group_size=3),
                       advantage_normalization="group_std", loss_aggregation="sequence_mean", loss_fn="gspo",
                       max_tokens=6))
    [(data, loss_fn)] = sent
    assert loss_fn == "gspo" and len(data) == 6  # 2 groups of 3 two-turn episodes, one datum each, in group order
    per_trajectory = []
    for datum in data:
        advantages = datum.loss_fn_inputs["advantages"].to_numpy()
        actions = datum.loss_fn_inputs["logprobs"].to_numpy() != 0
        assert len(set(advantages[actions].tolist())) == 1 and not advantages[~actions].any()
        per_trajectory.append(float(advantages[actions][0]) * int(actions.sum()))
    for group in (per_trajectory[:3], per_trajectory[3:]):
        assert float(np.std(group, ddof=1)) == pytest.approx(1.0, abs=1e-3)  # std / (std + 1e-4)
        assert sum(group) == pytest.approx(0.0, abs=1e-5)


class _EveryThirdFails(EchoEnv):
    """Every third env made (the first included) fails in `step`."""

    made = 0

    def __init__(self) -> None:
        super().__init__()
        self.fails = _EveryThirdFails.made % 3 == 0
        _EveryThirdFails.made += 1

    async def step(self, action: Any) -> Any:
        if self.fails:
            raise ValueError("a flaky sandbox")
        return await super().step(action)


def test_failed_rollouts_are_retried_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_EveryThirdFails, "made", 0)
    train.main(_config(tmp_path, FakeDatasetBuilder(train=dataset_of(_EveryThirdFails, groups=2, batches=1)),
                       rollout_limits=RolloutLimits(max_retries=2)))
    row = _rows(tmp_path)[0]
    assert row["rollout_errors/ValueError"] == row["rollout_errors/recovered"] >= 1
    assert row["rollout_errors/groups_dropped"] == 0 and row["optim/num_datums"] == 4.0  # both groups whole


def test_stable_reinforce_trains_two_turn_episodes_on_what_the_sampler_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each two-turn episode is one datum naming both turns' sequences (a prompt and a sampled span
    each); the engine weighs every trained action token with its sampler's recorded log-prob."""
    from local_tinker.clients import TrainingClient

    sent: list[tuple[list[Any], Any]] = []
    original = TrainingClient.forward_backward

    def recording(self: Any, data: list[Any], loss_fn: Any, loss_fn_config: Any = None) -> Any:
        future = original(self, data, loss_fn, loss_fn_config)
        sent.append((data, future.result()))
        return future

    monkeypatch.setattr(TrainingClient, "forward_backward", recording)
    train.main(_config(tmp_path, EvenTokensDatasetBuilder(n_batches=1, batch_size=2, group_size=3),
                       loss_fn="stable_reinforce", max_tokens=6))
    [(data, output)] = sent
    assert len(data) == 6
    for datum in data:
        kinds = [type(span).__name__ for span in datum.loss_fn_input_spans]
        assert kinds == ["PromptProvenanceSpan", "SampledProvenanceSpan"] * 2
    trained = sum(int((d.loss_fn_inputs["advantages"].to_numpy() != 0).sum()) for d in data)
    assert output.metrics["trained_tokens:sum"] == trained > 0
    assert output.metrics["sampler_log_ratio_abs:max"] < 1e-4  # fp32, on-policy: the sampler is the trainer
