"""Resident memory of the local engine after each training step: does it stay flat over a run?

    .venv/bin/python scripts/memory_over_steps.py                     # 25 steps, SmolLM2, the default precision
    .venv/bin/python scripts/memory_over_steps.py steps=12 sample_every=4
    LRU_CACHE_CAPACITY=1024 ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024 .venv/bin/python scripts/memory_over_steps.py

Each step is a `forward_backward` (cross-entropy, 16 random sequences of 30-60 tokens, the second
half of each weighted) and an `optim_step` on a rank-32 LoRA; with `sample_every=N`, every Nth step
also samples 48 prompts x 24 tokens from a fresh snapshot. After each step the heap is trimmed and
the resident set printed, in MB, with the process's peak so far. The second command above restores
torch's own kernel-cache bounds (see `local_tinker/memory.py`).
"""

import ctypes
import resource
import time

import chz
import torch
from tinker import types

from recipes_lib.argv import config_from_argv
from recipes_lib.backends import make_service_client
from recipes_lib.paths import SMOLLM2_NAME


@chz.chz
class Config:
    steps: int = 25
    # Also sample from a fresh snapshot every this many steps (0: never).
    sample_every: int = 0


def _resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def _batch(generator: torch.Generator) -> list[types.Datum]:
    data = []
    for _ in range(16):
        length = int(torch.randint(30, 60, (1,), generator=generator))
        tokens = torch.randint(0, 49000, (length + 1,), generator=generator)
        weights = torch.cat([torch.zeros(length // 2), torch.ones(length - length // 2)])
        data.append(types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1].tolist()),
                                loss_fn_inputs={"target_tokens": types.TensorData.from_torch(tokens[1:]),
                                                "weights": types.TensorData.from_torch(weights)}))
    return data


def main(config: Config) -> None:
    trim = ctypes.CDLL("libc.so.6").malloc_trim
    generator = torch.Generator().manual_seed(0)
    trainer = make_service_client().create_lora_training_client(base_model=SMOLLM2_NAME, rank=32)
    print("step  resident_MB  peak_MB  seconds")
    for step in range(config.steps):
        start = time.perf_counter()
        trainer.forward_backward(_batch(generator), "cross_entropy").result()
        trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result()
        if config.sample_every and step % config.sample_every == 0:
            sampler = trainer.save_weights_and_get_sampling_client(name=f"step{step}")
            prompts = [torch.randint(0, 49000, (20 + i % 16,), generator=generator).tolist() for i in range(48)]
            params = types.SamplingParams(max_tokens=24, temperature=1.0)
            futures = [sampler.sample(types.ModelInput.from_ints(p), 1, params) for p in prompts]
            for future in futures:
                future.result()
        seconds = time.perf_counter() - start
        trim(0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{step:4d}  {_resident_mb():11.0f}  {peak:7.0f}  {seconds:7.2f}", flush=True)


if __name__ == "__main__":
    main(config_from_argv(chz.Blueprint(Config)))
