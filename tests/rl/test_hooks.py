"""The RL loop's hooks (rl.hooks) on a tiny random model: a shaper's per-token advantages and extra
losses reach the trainer as written, before the same optimizer step; reference samplers are
evaluated once; the learning rate follows `lr_schedule`."""

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tinker
from tinker import types

from recipes_lib.backends.protocols import SamplingClient, ServiceClient
from recipes_lib.config import BackendConfig
from recipes_lib.logging import read_metrics
from rl import train
from rl.data import TrainingBatch, loss_input, with_advantages
from rl.hooks import ExtraLoss, ShapedBatch, TrainingHooks, mean_metrics
from rl.types import Action, Env, Observation, StepResult, StopCondition
from tests.rl.fakes import FakeDatasetBuilder, dataset_of

TINY = "recipes/tiny-llama"
PROMPT = [1, 2, 3]


class _SilentEnv(Env):
    """One turn, reward 0: whatever the policy writes, the env has no signal of its own."""

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return tinker.types.ModelInput.from_ints(PROMPT), [0]

    async def step(self, action: Action) -> StepResult:
        return StepResult(0.0, True, tinker.types.ModelInput.empty(), [0])


def _config(log_path: Path, **overrides: Any) -> train.Config:
    # Groups of one: allowed only because a shaper supplies the signal.
    builder = FakeDatasetBuilder(train=dataset_of(_SilentEnv, groups=2, group_size=1, batches=2))
    settings: dict[str, Any] = dict(
        log_path=str(log_path), model_name=TINY, dataset_builder=builder, learning_rate=1e-3, max_tokens=3,
        behavior_if_log_dir_exists="resume", backend=BackendConfig(precision="float32", device="cpu"),
        eval_every=0, save_every=0, max_steps_without_signal=1)
    return train.Config(**{**settings, **overrides})


def _ramp_T(mask_T: np.ndarray) -> np.ndarray:
    """-1, -2, -3, ... on the action tokens (mask 1), 0 elsewhere: values no group advantage could give."""
    return -np.cumsum(mask_T) * mask_T


class _Shaper:
    """Adds `_ramp_T` to the advantages and a `cross_entropy` pass on the same targets (weight 0.5 on
    action tokens); `policy_loss` as given."""

    def __init__(self, policy_loss: bool = True):
        self.policy_loss = policy_loss
        self.batches: list[TrainingBatch] = []

    async def __call__(self, batch: TrainingBatch) -> ShapedBatch:
        self.batches.append(batch)
        data_D = [with_advantages(d, loss_input(d, "advantages") + _ramp_T(m))
                  for d, m in zip(batch.data_D, batch.masks_D, strict=True)]
        extra_D = [types.Datum(model_input=d.model_input, loss_fn_inputs={
            "target_tokens": d.loss_fn_inputs["target_tokens"],
            "weights": types.TensorData.from_numpy((0.5 * m).astype(np.float32))})
            for d, m in zip(batch.data_D, batch.masks_D, strict=True)]

        def metrics(output: types.ForwardBackwardOutput) -> dict[str, float]:
            return {"extra/loss_sum": float(output.metrics["loss:sum"])}

        shaped = TrainingBatch(data_D, batch.masks_D, batch.group_index_D, batch.trajectory_index_D)
        return ShapedBatch(shaped, {"shaper/datums": float(len(data_D))}, [ExtraLoss(extra_D, "cross_entropy", metrics)],
                           policy_loss=self.policy_loss)


def _record(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any]]:
    """Every forward_backward (loss, data, output) and optim_step (learning rate) the local client receives."""
    from local_tinker.clients import TrainingClient

    events: list[tuple[str, Any, Any]] = []
    forward_backward, optim_step = TrainingClient.forward_backward, TrainingClient.optim_step

    def recording_fb(self: Any, data: list[Any], loss_fn: Any, loss_fn_config: Any = None) -> Any:
        future = forward_backward(self, data, loss_fn, loss_fn_config)
        events.append((loss_fn, data, future.result()))
        return future

    def recording_optim(self: Any, params: types.AdamParams) -> Any:
        events.append(("optim_step", params.learning_rate, None))
        return optim_step(self, params)

    monkeypatch.setattr(TrainingClient, "forward_backward", recording_fb)
    monkeypatch.setattr(TrainingClient, "optim_step", recording_optim)
    return events


def _hooks(shaper: _Shaper, references: dict[str, SamplingClient] | None = None) -> Any:
    def make(service: ServiceClient) -> TrainingHooks:
        return TrainingHooks(shape_batch=shaper, reference_samplers=references or {})
    return make


def test_mean_metrics_averages_each_key_over_the_rows_that_have_it() -> None:
    assert mean_metrics([{"a": 1.0, "b": 2.0}, {"a": 3.0}, {}]) == {"a": 2.0, "b": 2.0}
    assert mean_metrics([]) == {}


def test_a_shaper_sets_per_token_advantages_and_an_extra_loss_joins_the_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _record(monkeypatch)
    shaper = _Shaper()
    asyncio.run(train.main_async(_config(tmp_path, lr_schedule="linear"), _hooks(shaper)))
    assert [e[0] for e in events] == ["importance_sampling", "cross_entropy", "optim_step"] * 2
    # Linear decay over 2 steps: 1e-3 * (1 - 0/2), 1e-3 * (1 - 1/2).
    assert [e[1] for e in events if e[0] == "optim_step"] == pytest.approx([1e-3, 5e-4])
    for step in range(2):
        (_, policy_D, _), (_, extra_D, extra_out) = events[3 * step], events[3 * step + 1]
        batch = shaper.batches[step]
        assert len(policy_D) == len(extra_D) == 2  # two groups of one single-turn episode
        for datum, mask in zip(policy_D, batch.masks_D, strict=True):
            # Prompt [1, 2, 3]: targets 2 and 3 are context (0), then -1, -2, ... on the sampled tokens.
            expected = [0.0, 0.0] + [-float(k) for k in range(1, int(mask.sum()) + 1)]
            np.testing.assert_array_equal(loss_input(datum, "advantages"), expected)
        # cross_entropy sums -weight * logprob over tokens: 0.5 * minus the sampled tokens' log-probs.
        logprobs = [o["logprobs"].to_numpy() for o in extra_out.loss_fn_outputs]
        hand = sum(-0.5 * float((lp * m).sum()) for lp, m in zip(logprobs, batch.masks_D, strict=True))
        assert extra_out.metrics["loss:sum"] == pytest.approx(hand, rel=1e-5)
    rows = read_metrics(tmp_path)
    assert [row["optim/lr"] for row in rows] == pytest.approx([1e-3, 5e-4])
    for row in rows:
        assert row["optim/num_datums"] == 4.0 and row["shaper/datums"] == 2.0  # 2 policy + 2 extra
        assert "extra/loss_sum" in row and "optim/kl_sample_train_v1" in row


def test_a_shaper_may_leave_out_the_policy_gradient_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the extra loss is sent; its datums count, the left-out pass's metrics are absent, and a
    step with zero advantages but an extra loss has signal (max_steps_without_signal=1 does not stop it)."""
    events = _record(monkeypatch)
    asyncio.run(train.main_async(_config(tmp_path), _hooks(_Shaper(policy_loss=False))))
    assert [e[0] for e in events] == ["cross_entropy", "optim_step"] * 2
    for row in read_metrics(tmp_path):
        assert row["optim/num_datums"] == 2.0 and row["optim/num_minibatches"] == 1.0 and "extra/loss_sum" in row
        assert "optim/kl_sample_train_v1" not in row and "optim/loss_sum" not in row


class _WhichSampler:
    """A sampling evaluator that reports whether it was handed the reference sampler."""

    reference: SamplingClient | None = None

    async def __call__(self, sampling_client: SamplingClient) -> dict[str, float]:
        return {"test/is_reference": float(sampling_client is _WhichSampler.reference)}

    def take_samples(self) -> list[dict[str, Any]]:
        return []


def test_reference_samplers_are_evaluated_once_at_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  service_client: ServiceClient) -> None:
    from recipes_lib.evaluators import SamplingClientEvaluator

    evaluator = type("WhichSampler", (_WhichSampler, SamplingClientEvaluator), {})
    reference = service_client.create_sampling_client(base_model=TINY)
    monkeypatch.setattr(_WhichSampler, "reference", reference)
    config = _config(tmp_path, evaluator_builders=[evaluator], eval_every=1, save_every=1, max_steps=1)
    asyncio.run(train.main_async(config, _hooks(_Shaper(), {"ref": reference})))
    asyncio.run(train.main_async(_config(tmp_path, evaluator_builders=[evaluator], eval_every=1, save_every=1),
                                  _hooks(_Shaper(), {"ref": reference})))  # resumed at step 1: no second reference eval
    rows = read_metrics(tmp_path)
    assert rows[0] == {"step": 0, "ref/test/is_reference": 1.0}
    assert [row["step"] for row in rows] == [0, 0, 1, 2]
    assert all("ref/test/is_reference" not in row for row in rows[1:])
    assert rows[1]["test/is_reference"] == 0.0  # the run's own evaluation samples the policy


def test_groups_of_one_are_refused_without_a_shaper(tmp_path: Path) -> None:
    from recipes_lib.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="group_size must be >= 2"):
        asyncio.run(train.main_async(_config(tmp_path)))
