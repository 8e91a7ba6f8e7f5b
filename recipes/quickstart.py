"""The Tinker docs' "Getting started" example on the embedded engine: teach SmolLM2 some Pig Latin.

Run: `python -m recipes.quickstart` (add `backend=tinker model_name=...` to use the hosted API).
It trains a LoRA adapter for 6 steps on 7 examples, printing the loss per token each step, then
samples 8 greedy translations of "coffee break". This is an API demo, not a good way to train.
"""

from typing import Any

import chz
import numpy as np
from tinker import types

from recipes_lib.backends import make_service_client
from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field, check_positive
from recipes_lib.paths import SMOLLM2_NAME

EXAMPLES = [
    {"input": "banana split", "output": "anana-bay plit-say"},
    {"input": "quantum physics", "output": "uantum-qay ysics-phay"},
    {"input": "donut shop", "output": "onut-day op-shay"},
    {"input": "pickle jar", "output": "ickle-pay ar-jay"},
    {"input": "space exploration", "output": "ace-spay exploration-way"},
    {"input": "rubber duck", "output": "ubber-ray uck-day"},
    {"input": "coding wizard", "output": "oding-cay izard-way"},
]


@chz.chz
class Config:
    model_name: str = SMOLLM2_NAME
    steps: int = 6  # updates on the same batch, as in the Tinker docs' example
    learning_rate: float = 1e-4
    seed: int | None = 0  # of the LoRA initialisation, so runs (and backends) are comparable; None: random
    backend: BackendConfig = backend_field()

    @chz.validate
    def _check(self) -> None:
        check_positive(steps=self.steps, learning_rate=self.learning_rate)


def process_example(example: dict[str, str], tokenizer: object) -> types.Datum:
    """Prompt tokens weighted 0, completion tokens weighted 1, targets shifted by one."""
    prompt = f"English: {example['input']}\nPig Latin:"
    prompt_tokens = tokenizer.encode(prompt, add_special_tokens=True)  # type: ignore[attr-defined]
    completion_tokens = tokenizer.encode(f" {example['output']}\n\n", add_special_tokens=False)  # type: ignore[attr-defined]
    tokens = prompt_tokens + completion_tokens
    weights = [0.0] * len(prompt_tokens) + [1.0] * len(completion_tokens)
    # Plain lists are converted to TensorData by Datum (dtype inferred from the key), as in the Tinker docs.
    loss_fn_inputs: dict[str, Any] = {"weights": weights[1:], "target_tokens": tokens[1:]}
    return types.Datum(model_input=types.ModelInput.from_ints(tokens=tokens[:-1]), loss_fn_inputs=loss_fn_inputs)


def main(config: Config) -> list[float]:
    """Train, print the loss per token of each step and the sampled translations; return the losses."""
    service_client = make_service_client(config.backend)
    training_client = service_client.create_lora_training_client(base_model=config.model_name,
                                                                 seed=config.seed).result()
    tokenizer = training_client.get_tokenizer()
    examples = [process_example(ex, tokenizer) for ex in EXAMPLES]
    weights = np.concatenate([ex.loss_fn_inputs["weights"].tolist() for ex in examples])
    losses = []
    for step in range(config.steps):
        fwdbwd_future = training_client.forward_backward(examples, "cross_entropy")
        optim_future = training_client.optim_step(types.AdamParams(learning_rate=config.learning_rate))
        fwdbwd_result, _ = fwdbwd_future.result(), optim_future.result()
        logprobs = np.concatenate([out["logprobs"].tolist() for out in fwdbwd_result.loss_fn_outputs])
        losses.append(float(-np.dot(logprobs, weights) / weights.sum()))
        print(f"step {step}: loss per token {losses[-1]:.4f}")

    sampling_client = training_client.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("English: coffee break\nPig Latin:"))
    params = types.SamplingParams(max_tokens=20, temperature=0.0, stop=["\n"])
    result = sampling_client.sample(prompt=prompt, sampling_params=params, num_samples=8).result()
    print("Responses:")
    for i, seq in enumerate(result.sequences):
        print(f"{i}: {tokenizer.decode(seq.tokens)!r}")
    return losses


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
