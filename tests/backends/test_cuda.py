"""The local engine on a CUDA GPU (`backend.device=cuda`): training computes what it computes on the
CPU, the sampler, the scorer and the trainer agree there as they do on a CPU, and the recipes train,
checkpoint and sample there end to end.

Skipped without a GPU (CI has none). `scripts/cuda_check.sh` runs this file and `make bench
device=cuda` on a GPU machine; docs/testing.md says when that last happened and what it printed.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from tinker import types

from local_tinker.clients import ServiceClient
from local_tinker.models import TINY_MODEL_NAMES
from recipes_lib.tokenizers import get_tokenizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")

SENTENCE = "one two three four five six seven eight nine ten eleven twelve"


def _datum(name: str) -> types.Datum:
    tokens = get_tokenizer(name).encode(SENTENCE)
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)})


def _train(device: str, name: str, steps: int) -> list[np.ndarray]:
    """The target log-probs of each of `steps` fp32 forward_backward calls, an Adam step after each."""
    trainer = ServiceClient(precision="float32", device=device).create_lora_training_client(name, rank=8, seed=0)
    datum, logprobs = _datum(name), []
    for _ in range(steps):
        output = trainer.forward_backward([datum], "cross_entropy").result()
        logprobs.append(np.asarray(output.loss_fn_outputs[0]["logprobs"].data))
        trainer.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    return logprobs


@pytest.mark.parametrize("name", TINY_MODEL_NAMES)
def test_fp32_training_on_the_gpu_follows_the_cpu(name: str) -> None:
    """Same adapter seed, same data: the first step's log-probs agree to 1e-4 (one forward, two
    devices' kernels), and three Adam steps later still to 1e-3."""
    on_cpu, on_gpu = _train("cpu", name, steps=4), _train("cuda", name, steps=4)
    print(f"{name}: max |cpu - cuda| per step", [float(np.abs(a - b).max()) for a, b in zip(on_cpu, on_gpu)])
    np.testing.assert_allclose(on_gpu[0], on_cpu[0], atol=1e-4)
    np.testing.assert_allclose(on_gpu[-1], on_cpu[-1], atol=1e-3)
    assert np.abs(on_cpu[-1] - on_cpu[0]).max() > 1e-2  # the steps moved the model: the check is not vacuous


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", TINY_MODEL_NAMES)
@pytest.mark.parametrize("rank", [8, 32])
def test_sampled_logprobs_equal_scores_and_the_trainers_on_the_gpu(precision: str, name: str, rank: int) -> None:
    """What tests/backends/test_fused_decoder.py asks of a CPU, asked of a GPU: log-probs of the same
    tokens from the sampler, the scorer and the trainer agree to 1e-4 after three training steps."""
    tokenizer = get_tokenizer(name)
    trainer = ServiceClient(precision=precision, device="cuda").create_lora_training_client(name, rank=rank, seed=0)
    datum = _datum(name)
    for _ in range(3):
        trainer.forward_backward([datum], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=1e-2))
    sampler = trainer.save_weights_and_get_sampling_client()
    prompts = [tokenizer.encode(text) for text in ["Hello", "Once upon a time there", "The numbers are"]]
    futures = [sampler.sample(types.ModelInput.from_ints(prompt), 3, types.SamplingParams(max_tokens=24, seed=seed))
               for seed, prompt in enumerate(prompts)]
    worst = {"scorer": 0.0, "trainer": 0.0}
    for prompt, future in zip(prompts, futures):
        for seq in future.result().sequences:
            sequence = prompt + list(seq.tokens)
            scored = sampler.compute_logprobs(types.ModelInput.from_ints(sequence)).result()[len(prompt):]
            forward = types.Datum(model_input=types.ModelInput.from_ints(sequence[:-1]),
                                  loss_fn_inputs={"target_tokens": sequence[1:], "weights": [0.0] * (len(sequence) - 1)})
            trained = trainer.forward([forward], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].data
            worst["scorer"] = max(worst["scorer"], float(np.abs(np.asarray(scored) - seq.logprobs).max()))
            worst["trainer"] = max(worst["trainer"], float(np.abs(np.asarray(trained[len(prompt) - 1:])
                                                                  - seq.logprobs).max()))
    print(f"{name} {precision} rank {rank}: max |sampled - other| {worst}")
    assert worst["scorer"] <= 1e-4 and worst["trainer"] <= 1e-4, worst


def test_sl_basic_trains_checkpoints_and_resumes_on_the_gpu(tmp_path: Path) -> None:
    from recipes import sl_basic
    from recipes_lib.argv import config_from_argv
    from recipes_lib.checkpoints import load_checkpoints
    from recipes_lib.logging import read_metrics

    def run(max_steps: int) -> None:
        sl_basic.main(config_from_argv(sl_basic.build_config(), [
            "model_name=recipes/tiny-llama", "backend.device=cuda", f"max_steps={max_steps}", "save_every=2",
            f"log_path={tmp_path}", "dataset.num_train=64", "dataset.num_heldout=6",
            "evaluator_builders.0.max_tokens=4", "behavior_if_log_dir_exists=resume"]))

    run(2)
    run(4)  # resumes from the step-2 checkpoint
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert "test/exact_match" in rows[0] and rows[-1]["progress"] == 1.0
    assert load_checkpoints(tmp_path)[-1].name == "final"


def test_rl_basic_samples_and_trains_on_the_gpu(tmp_path: Path) -> None:
    from recipes import rl_basic
    from recipes_lib.argv import config_from_argv
    from recipes_lib.logging import read_metrics

    rl_basic.main(config_from_argv(rl_basic.build_config(), [
        "model_name=recipes/tiny-llama", "backend.device=cuda", "max_steps=2", "max_tokens=4",
        "env.batch_size=2", "env.group_size=2", "env.test_size=4", f"log_path={tmp_path}"]))
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert "env/all/correct" in rows[1] and rows[1]["progress/done_frac"] == 1
