"""Our engine's timed steps: training on a `TokenBatch`, sampling, and the RL-shaped sampling batch.

Each builder does its set-up (clients, prompts, data) once and returns the step to time.
"""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinker import types

from local_tinker.bench.data import (
    SAMPLING_PROMPTS,
    TokenBatch,
    bench_numbers,
    end_of_turn_token,
    number_words_batch,
    number_words_prompt,
)
from local_tinker.tokenizers import get_tokenizer


def training_step(service: Any, model: str, batch: TokenBatch, train_unembed: bool = True) -> Callable[[], None]:
    """One `forward_backward` + `optim_step` of a fresh rank-32 LoRA on `batch`."""
    client = service.create_lora_training_client(model, rank=32, seed=0, train_unembed=train_unembed).result()
    datums = batch.datums()

    def step() -> None:
        client.forward_backward(datums, "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-5)).result()

    return step


SAMPLING_TOKENS = 64  # new tokens a sampling run draws per prompt


def sampling_positions(model: str) -> int:
    """Keys a decode step of `sampling_run` attends to, on average: a prompt's tokens and half the
    new ones (the steps after the first token attend to 1, 2, ... of them)."""
    tokenizer = get_tokenizer(model)
    return round(statistics.mean(len(tokenizer.encode(text)) for text in SAMPLING_PROMPTS)) + SAMPLING_TOKENS // 2


def sampling_run(service: Any, model: str, shared_prompt: bool, lora: bool = False,
                 max_tokens: int = SAMPLING_TOKENS) -> Callable[[], None]:
    """8 prompts x `max_tokens` new tokens (or 1 prompt x 8 samples), from the base model or a LoRA snapshot."""
    if lora:  # a rank-32 adapter snapshot, as RL samples from (bf16 keeps it beside the weights)
        trainer = service.create_lora_training_client(model, rank=32, seed=0).result()
        sampler = trainer.save_weights_and_get_sampling_client().result()  # in memory, nothing written
    else:
        sampler = service.create_sampling_client(base_model=model).result()
    tokenizer = get_tokenizer(model)  # the SDK's SamplingClient.get_tokenizer() asks the hub
    prompts = [types.ModelInput.from_ints(tokenizer.encode(text)) for text in SAMPLING_PROMPTS]
    params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=0)

    def run() -> None:
        if shared_prompt:
            sampler.sample(prompts[0], 8, params).result()
        else:
            for future in [sampler.sample(p, 1, params) for p in prompts]:
                future.result()

    return run


@dataclass(frozen=True)
class RlBatchFigures:
    """Medians over iterations of the RL-shaped batch (snapshot switch plus sampling)."""

    seconds_per_batch: float
    tokens_per_batch: float  # generated tokens actually produced (stops end samples early)
    tok_s: float  # median over iterations of tokens / seconds
    matmul_seconds_per_batch: float | None = None  # of its matmuls alone, in iterations of their own


def rl_batch(service: Any, model: str, iterations: int, prompts: int = 8, num_samples: int = 4,
             max_tokens: int = 32, matmul_seconds: Callable[[Callable[[], object]], float] | None = None) -> RlBatchFigures:
    """`prompts` x `num_samples` number-words answers of up to `max_tokens`, stopping at end-of-turn,
    each iteration from a fresh snapshot taken after an optim step that changed the LoRA weights.

    Timed: `save_weights_and_get_sampling_client` and the sampling. Not timed: the training step
    before it. One untimed warm-up iteration comes first. With `matmul_seconds` (the seconds a call's
    matmuls take, `machine.matmul_seconds_of`), as many further iterations (at most 3) give the batch's
    matmuls alone: timing each op slows the batch, so those iterations' wall time is not counted.
    """
    tokenizer = get_tokenizer(model)
    trainer = service.create_lora_training_client(model, rank=32, seed=0).result()
    numbers = bench_numbers(prompts, seed=1)
    train_datums = number_words_batch(tokenizer, numbers).datums()
    inputs = [types.ModelInput.from_ints(tokenizer.encode(number_words_prompt(n), add_special_tokens=False))
              for n in numbers]

    def fresh_batch(iteration: int) -> Callable[[], list[Any]]:
        """Train a step (B moves off 0: new weights); the call that snapshots and samples the batch."""
        trainer.forward_backward(train_datums, "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result()
        params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=iteration,
                                      stop=[end_of_turn_token(tokenizer)])

        def snapshot_and_sample() -> list[Any]:
            sampler = trainer.save_weights_and_get_sampling_client().result()
            return [f.result() for f in [sampler.sample(p, num_samples, params) for p in inputs]]

        return snapshot_and_sample

    seconds, tokens = [], []
    for iteration in range(iterations + 1):
        batch = fresh_batch(iteration)
        start = time.perf_counter()
        responses = batch()
        elapsed = time.perf_counter() - start
        if iteration:  # the first is the warm-up
            seconds.append(elapsed)
            tokens.append(sum(len(seq.tokens) for r in responses for seq in r.sequences))
    matmuls = ([matmul_seconds(fresh_batch(iterations + 1 + i)) for i in range(min(3, iterations))]
               if matmul_seconds is not None else [])
    return RlBatchFigures(statistics.median(seconds), statistics.median(tokens),
                          statistics.median(t / s for t, s in zip(tokens, seconds, strict=True)),
                          statistics.median(matmuls) if matmuls else None)
