"""On-policy RL needs the sampler's log-probs to equal the trainer's for the same weights.

In bf16 a trained LoRA delta must not be rounded into the weights: the sampler's scores then drift
from the trainer's as the adapter grows (optim/kl_sample_train_v1 rose from ~0.005 to 0.02-0.15
over a 60-step SmolLM2 run before the local sampler kept the delta beside the weights).
"""

import numpy as np
import pytest
from tinker import types

from local_tinker.clients import ServiceClient

TOKENS = [int(t) for t in np.random.default_rng(0).integers(100, 5000, size=48)]


def _datum(tokens: list[int]) -> types.Datum:
    """Input `tokens` itself (so both sides run the same shapes), targets shifted by one."""
    targets = tokens[1:] + [0]
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens),
        loss_fn_inputs={"target_tokens": np.asarray(targets, dtype=np.int64),
                        "weights": np.ones(len(tokens), dtype=np.float32)},
    )


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_sampler_scores_equal_trainer_logprobs_after_training(precision: str) -> None:
    client = ServiceClient(precision=precision, device="cpu")  # type: ignore[arg-type]
    trainer = client.create_lora_training_client(base_model="recipes/tiny-llama", rank=8, seed=0)
    for _ in range(3):
        trainer.forward_backward([_datum(TOKENS)], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=1e-3))
    output = trainer.forward([_datum(TOKENS)], "cross_entropy").result()
    trained = output.loss_fn_outputs[0]["logprobs"].to_numpy()[:-1]
    sampler = trainer.save_weights_and_get_sampling_client()
    scored = np.asarray(sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()[1:], dtype=np.float64)
    base_sampler = client.create_sampling_client(base_model="recipes/tiny-llama")
    base = np.asarray(base_sampler.compute_logprobs(types.ModelInput.from_ints(TOKENS)).result()[1:])
    assert np.abs(base - trained).max() > 0.05  # training moved the model
    assert np.abs(scored - trained).max() < 1e-4
