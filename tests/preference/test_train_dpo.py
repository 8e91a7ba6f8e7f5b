"""The DPO loop on a tiny model: one-pass gradient = two-pass gradient, metrics, resume, odd batches."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tinker import types

from preference.data import DPODatasetBuilder, pairs_to_datums
from preference.reference import ReferenceScorer, full_sequence
from preference.train_dpo import Config, dpo_loss_fn, main
from recipes.arithmetic.comparisons import ArithmeticComparisonBuilder
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.logging import read_metrics

MODEL = "recipes/tiny-llama"
BETA = 0.5
# With eps far above every gradient entry, Adam's first update is lr * g / eps: proportional to the
# gradient itself, so equal updates mean equal gradients (not just equal signs).
SGD_LIKE = types.AdamParams(learning_rate=1.0, beta1=0.9, beta2=0.95, eps=1e3)


@pytest.fixture(scope="module")
def batch():  # type: ignore[no-untyped-def]
    builder = DPODatasetBuilder(comparison_builder=ArithmeticComparisonBuilder(num_train=3, num_test=0),
                                model_name_for_tokenizer=MODEL, batch_size=3)
    train, _ = builder()
    return pairs_to_datums(train.get_batch(0))  # 3 pairs: an odd number of pairs


def two_pass_update(client, datums: list[types.Datum], reference_D: np.ndarray) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The hosted API's method: forward for log-probs, the loss's gradient w.r.t. them on the client,
    then a cross_entropy forward_backward with weights = -d loss / d logprob."""
    forward = client.forward(datums, "cross_entropy").result()
    logprobs = [out["logprobs"].to_torch().clone().requires_grad_(True) for out in forward.loss_fn_outputs]
    loss, metrics = dpo_loss_fn(reference_D, BETA)(datums, logprobs)
    loss.backward()
    surrogate = [
        types.Datum(model_input=d.model_input, loss_fn_inputs={
            "target_tokens": d.loss_fn_inputs["target_tokens"],
            "weights": types.TensorData.from_torch(-lp.grad)})  # type: ignore[operator]
        for d, lp in zip(datums, logprobs)
    ]
    client.forward_backward(surrogate, "cross_entropy").result()
    return {**metrics, **client.optim_step(SGD_LIKE).result().metrics}


def test_one_pass_gradient_equals_two_pass_surrogate(service_client, batch) -> None:  # type: ignore[no-untyped-def]
    one = service_client.create_lora_training_client(MODEL, rank=4, seed=7)
    two = service_client.create_lora_training_client(MODEL, rank=4, seed=7)
    before = [o["logprobs"].to_numpy() for o in one.forward(batch, "cross_entropy").result().loss_fn_outputs]
    # A reference that differs from the policy, so the loss is not at its symmetric point.
    reference_D = np.array([-s for s in range(1, len(batch) + 1)], dtype=np.float64) * 3.0

    out = one.forward_backward_custom(batch, dpo_loss_fn(reference_D, BETA)).result()
    step_one = one.optim_step(SGD_LIKE).result().metrics
    step_two = two_pass_update(two, batch, reference_D)

    assert out.metrics["dpo_loss"] == pytest.approx(step_two["dpo_loss"], rel=1e-6)
    assert step_one["optim/grad_norm"] == pytest.approx(step_two["optim/grad_norm"], rel=1e-4)
    assert step_one["optim/grad_norm"] > 0
    after_one = one.forward(batch, "cross_entropy").result().loss_fn_outputs
    after_two = two.forward(batch, "cross_entropy").result().loss_fn_outputs
    moved = max(float(np.abs(a["logprobs"].to_numpy() - b).max()) for a, b in zip(after_one, before))
    gap = max(float(np.abs(a["logprobs"].to_numpy() - b["logprobs"].to_numpy()).max())
              for a, b in zip(after_one, after_two))
    assert moved > 1e-3  # the update is visible ...
    assert gap < 1e-3 * moved  # ... and the same from both methods


def test_loss_fn_refuses_a_batch_it_was_not_built_for(batch) -> None:  # type: ignore[no-untyped-def]
    loss_fn = dpo_loss_fn(np.zeros(len(batch)), BETA)
    with pytest.raises(ValueError, match="built for 6 sequences but got 5"):
        loss_fn(batch[:5], [torch.zeros(d.model_input.length) for d in batch[:5]])


def test_reference_scores_equal_the_policy_before_training(service_client, batch) -> None:  # type: ignore[no-untyped-def]
    client = service_client.create_lora_training_client(MODEL, rank=4, seed=1)
    reference = ReferenceScorer(client.save_weights_and_get_sampling_client().result())
    forward = client.forward(batch, "cross_entropy").result()
    policy_D = [float(np.dot(o["logprobs"].to_numpy(), d.loss_fn_inputs["weights"].to_numpy()))
                for o, d in zip(forward.loss_fn_outputs, batch)]
    np.testing.assert_allclose(reference(batch), policy_D, rtol=1e-4, atol=1e-4)
    assert full_sequence(batch[0]).length == batch[0].model_input.length + 1


def config(log_path: Path, **overrides: object) -> Config:
    values: dict[str, object] = dict(
        log_path=str(log_path), model_name=MODEL,
        dataset_builder=DPODatasetBuilder(
            comparison_builder=ArithmeticComparisonBuilder(num_train=10, num_test=4, max_operand=9), batch_size=3),
        learning_rate=1e-3, dpo_beta=0.5, lora_rank=4, eval_every=2, save_every=2,
        behavior_if_log_dir_exists="resume", backend=BackendConfig(precision="float32", device="cpu"))
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


def test_main_logs_dpo_metrics_and_checkpoints(tmp_log_dir: Path) -> None:
    main(config(tmp_log_dir))
    rows = read_metrics(tmp_log_dir)
    steps = [r for r in rows if "dpo_loss" in r]
    assert steps == rows
    assert [r["step"] for r in steps] == [0, 1, 2, 3]  # 10 pairs in batches of 3: 3, 3, 3, 1
    assert [r["num_pairs"] for r in steps] == [3, 3, 3, 1]
    for key in ("accuracy", "margin", "chosen_reward", "rejected_reward", "num_tokens", "learning_rate", "progress"):
        assert key in steps[0]
    assert steps[0]["dpo_loss"] == pytest.approx(np.log(2), abs=1e-4)  # policy = reference at the start
    assert "test/accuracy" in rows[0] and "test/accuracy" in rows[2] and "test/accuracy" not in rows[1]
    assert rows[-1]["step"] == 3 and "test/margin" in rows[-1]  # final results in the last line
    records = [json.loads(line) for line in (tmp_log_dir / "checkpoints.jsonl").read_text().splitlines()]
    assert [(r["name"], r["epoch"], r["batch"]) for r in records] == [("000002", 0, 2), ("final", 1, 0)]


def test_resume_continues_at_the_next_batch_with_the_same_reference(tmp_path: Path) -> None:
    full, part = tmp_path / "full", tmp_path / "part"
    # A constant rate, so a shorter run's schedule equals the longer one's; evaluated at the end only.
    main(config(full, num_epochs=2, lr_schedule="constant", eval_every=0))
    main(config(part, num_epochs=2, lr_schedule="constant", eval_every=0, max_steps=4))  # a checkpoint at step 4
    main(config(part, num_epochs=2, lr_schedule="constant", eval_every=0))  # continues at step 4
    full_rows = {r["step"]: r for r in read_metrics(full) if "dpo_loss" in r}
    part_rows = {r["step"]: r for r in read_metrics(part) if "dpo_loss" in r}
    assert sorted(part_rows) == sorted(full_rows) == list(range(8))
    for step in range(8):
        assert part_rows[step]["dpo_loss"] == pytest.approx(full_rows[step]["dpo_loss"], abs=1e-4), step


def test_tinker_backend_stops_at_the_missing_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_CREDENTIAL_CMD", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="TINKER_API_KEY"):
        main(config(tmp_path / "run", backend=BackendConfig(kind="tinker")))
