"""The on-policy distillation loop: the student samples, the teacher scores, the student trains.

    python -m recipes.distillation.on_policy            # a recipe builds a Config and calls main()

Each step:

1. sample `group_size` completions of each prompt of the batch from the current student weights;
2. the teacher (a base model, a sampler checkpoint, or the last checkpoint of a run folder) scores
   every `prompt + completion` with `compute_logprobs`;
3. each sampled token's advantage is `-kl_penalty_coef * (student_logprob - teacher_logprob)`, the
   negative per-token reverse KL (optionally plus the batch's mean KL as a baseline, `center_kl`;
   see `distillation.advantages`), and the student trains on it with the `importance_sampling` loss
   (one `forward_backward` + `optim_step`);
4. with `forward_kl_topk=k > 0` the teacher also returns its k likeliest tokens at each position of
   the student's answer, and a second `forward_backward` (`cross_entropy`, before the same
   `optim_step`) trains the student towards them, weighted by the teacher's probability: a top-k
   forward KL on the student's own prefixes. The sampled-token reverse KL alone cannot move a
   student that is already sure of a wrong token (its gradient vanishes as the token's probability
   nears 1); the teacher's distribution names the right one.

Logged per step: `teacher_kl` (the mean per-token reverse KL of the batch, which falls as the
student learns), `forward_kl_topk` (with `forward_kl_topk > 0`), `optim/entropy`, `optim/kl_sample_train_v1|v2`, `completion_tokens`, `optim/lr` (with `lr_schedule`),
`progress/done_frac` and `time/...`. The evaluators (e.g. held-out exact match, `test/exact_match`)
run every `eval_every` steps and after the last; on a fresh run they also score the teacher once
(`teacher/test/exact_match`), the level the student is distilled towards. Checkpoints every
`save_every` steps and at the end; re-running with `behavior_if_log_dir_exists=resume` continues.
"""

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

import chz
import numpy as np
from tinker import types
from tinker.types.topk_logprobs import TopkLogprobs

from distillation.advantages import teacher_kl
from distillation.data import (
    Completion,
    completion_to_datum,
    forward_kl_data,
    forward_kl_topk,
    teacher_targets_T,
)
from distillation.datasets import PromptDataset, PromptDatasetBuilder
from eval.model_source import backend_for, open_model_source
from recipes_lib.backends import sampling_client_now
from recipes_lib.backends.protocols import SamplingClient, ServiceClient, TrainingClient
from recipes_lib.checkpoints import save_step_checkpoint
from recipes_lib.config import BackendConfig, backend_field, check_positive
from recipes_lib.evaluators import (
    Evaluator,
    EvaluatorBuilder,
    run_evaluators,
    run_evaluators_timed,
    take_samples,
)
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.hyperparams import adam_params
from recipes_lib.lifecycle import eval_due, open_run, save_due, start_run
from recipes_lib.logging import MultiplexLogger, log_samples
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.run_config import LogdirBehavior
from recipes_lib.run_folder import last_sampler_path
from recipes_lib.schedules import LRSchedule, lr_multiplier
from recipes_lib.tokenizers import get_tokenizer
from renderers import Renderer, get_renderer
from rl.metrics import compute_kl_sample_train

logger = logging.getLogger(__name__)

LossFn = Literal["importance_sampling", "ppo", "cispo", "dro"]
TEACHER_PREFIX = "teacher/"


@chz.chz
class Config:
    """Everything an on-policy distillation run needs."""

    # Run folder: config.json, metrics.jsonl, checkpoints.jsonl.
    log_path: str
    # The student's base model (a LoRA adapter is trained on it).
    model_name: str
    # The prompts the student answers (see distillation.datasets).
    dataset_builder: PromptDatasetBuilder
    # Adam's peak learning rate.
    learning_rate: float
    # The most tokens the student samples per answer.
    max_tokens: int
    # The teacher, exactly one of: a sampler checkpoint (local://... or tinker://...), a run folder
    # (its last sampler checkpoint), or a base model scored without LoRA. It must share the
    # student's tokenizer, since it scores the student's tokens.
    teacher_model_path: str | None = None
    teacher_log_path: str | None = None
    teacher_model_name: str | None = None
    # The renderer of the prompts (None: the student model's recommended one).
    renderer_name: str | None = None
    # Completions sampled per prompt.
    group_size: int = 4
    # Sampling temperature of the student's completions; 1.0 samples the student itself.
    temperature: float = 1.0
    # Weight of the reverse KL in the advantages (advantage = -coef * (student - teacher) logprob).
    kl_penalty_coef: float = 1.0
    # 0: per-token advantages; in (0, 1]: each token also gets the discounted KL of the tokens after it.
    kl_discount_factor: float = 0.0
    # Subtract the batch's mean KL from each token's (a baseline; see distillation.advantages).
    center_kl: bool = False
    # k > 0: also train on the teacher's k likeliest tokens at each position of the student's answers
    # (cross-entropy weighted by the teacher's probability, i.e. a top-k forward KL on the student's
    # own prefixes; costs k more datums per answer). 0: the sampled-token reverse KL only.
    forward_kl_topk: int = 0
    # Weight of that forward-KL term against the reverse-KL advantages.
    forward_kl_coef: float = 1.0
    # Train the forward-KL term only up to the first sampled token that is not the teacher's likeliest
    # (that token included): after it, the teacher's tokens continue an answer that is already wrong.
    forward_kl_until_divergence: bool = False
    # How the learning rate moves over the run: constant, or a linear/cosine decay to 0.
    lr_schedule: LRSchedule = "constant"
    loss_fn: LossFn = "importance_sampling"
    loss_fn_config: dict[str, float] | None = None
    lora_rank: int = 32
    # Start the student from these weights (fresh optimizer) instead of a new adapter.
    load_checkpoint_path: str | None = None
    backend: BackendConfig = backend_field()

    # Evaluate every this many steps (before training on the step) and after the last; 0: never.
    eval_every: int = 10
    evaluator_builders: list[EvaluatorBuilder] = chz.field(default_factory=list)
    # Also run the evaluators on the teacher once at the start (`teacher/<metric>`).
    evaluate_teacher: bool = True
    # Checkpoint (resumable state + sampler weights) every this many steps; 0: only at the end.
    save_every: int = 20
    max_steps: int | None = None
    behavior_if_log_dir_exists: LogdirBehavior = "ask"
    wandb_project: str | None = None
    wandb_name: str | None = None

    @chz.validate
    def _check(self) -> None:
        check_positive(learning_rate=self.learning_rate, max_tokens=self.max_tokens, group_size=self.group_size,
                       lora_rank=self.lora_rank)
        teachers = {"teacher_model_path": self.teacher_model_path, "teacher_log_path": self.teacher_log_path,
                    "teacher_model_name": self.teacher_model_name}
        given = [key for key, value in teachers.items() if value]
        if len(given) != 1:
            raise ConfigurationError(f"Pass exactly one teacher: teacher_model_path=<sampler checkpoint>, "
                                     f"teacher_log_path=<run folder> or teacher_model_name=<base model>; got "
                                     f"{given or 'none'}.")
        for key, value in {"kl_penalty_coef": self.kl_penalty_coef, "eval_every": self.eval_every,
                           "forward_kl_topk": self.forward_kl_topk, "forward_kl_coef": self.forward_kl_coef,
                           "save_every": self.save_every, "temperature": self.temperature}.items():
            if value < 0:
                raise ConfigurationError(f"{key} must be >= 0, got {value}.")
        if not 0 <= self.kl_discount_factor <= 1:
            raise ConfigurationError(f"kl_discount_factor must be in [0, 1], got {self.kl_discount_factor}.")


@dataclass
class _Run:
    """What the loop holds while it runs."""

    config: Config
    service_client: ServiceClient
    training_client: TrainingClient
    teacher: SamplingClient
    dataset: PromptDataset
    renderer: Renderer
    evaluators: list[Evaluator]
    logger: MultiplexLogger
    start_step: int
    total_steps: int


def main(config: Config) -> None:
    """Run distillation to the end (blocking)."""
    asyncio.run(main_async(config))


async def main_async(config: Config) -> None:
    """Run distillation to the end, inside an existing event loop."""
    resume = start_run(config)
    dataset = config.dataset_builder()
    total = min(len(dataset), config.max_steps) if config.max_steps is not None else len(dataset)
    started = open_run(config, resume, total)
    if started is None:
        return
    service = started.service_client
    teacher = open_teacher(config, service)
    renderer = get_renderer(resolve_renderer_name(config.model_name, config.renderer_name),
                            get_tokenizer(config.model_name))
    run = _Run(config, service, started.training_client, teacher, dataset, renderer,
               [build() for build in config.evaluator_builders], started.metrics_logger, started.start_step, total)
    try:
        await _loop(run)
    finally:
        run.logger.close()


def open_teacher(config: Config, service: ServiceClient) -> SamplingClient:
    """The teacher's sampling client; its tokenizer must be the student's."""
    model_path = config.teacher_model_path
    if config.teacher_log_path:
        model_path = last_sampler_path(config.teacher_log_path)
    same_backend = backend_for(model_path, config.backend) == config.backend
    source = open_model_source(config.backend, model_path, None if model_path else config.teacher_model_name,
                               service_client=service if same_backend else None)
    if source.model_name != config.model_name and \
            get_tokenizer(source.model_name).get_vocab() != get_tokenizer(config.model_name).get_vocab():
        raise ConfigurationError(f"The teacher {model_path or source.model_name} runs {source.model_name}, whose "
                                 f"tokenizer differs from the student's ({config.model_name}); on-policy "
                                 "distillation scores the student's tokens with the teacher, so both need one "
                                 "tokenizer.")
    return source.sampling_client


async def _loop(run: _Run) -> None:
    """Evaluate when due, train one step, refresh the sampler, checkpoint when due, log; repeat."""
    config = run.config
    sampler = await sampling_client_now(run.training_client)
    if config.evaluate_teacher and run.start_step == 0 and run.evaluators:
        teacher_metrics = await run_evaluators(run.evaluators, run.training_client, lambda: run.teacher)
        log_samples(config.log_path, 0, take_samples(run.evaluators, prefix=TEACHER_PREFIX))
        run.logger.log_metrics({TEACHER_PREFIX + key: value for key, value in teacher_metrics.items()}, 0)
    for step in range(run.start_step, run.total_steps):
        started = time.monotonic()
        learning_rate = config.learning_rate * lr_multiplier(config.lr_schedule, step, run.total_steps)
        metrics: dict[str, float] = {"progress/batch": float(step), "progress/done_frac": (step + 1) / run.total_steps,
                                     "optim/lr": learning_rate}
        if eval_due(config.eval_every, step, run.total_steps) and run.evaluators:
            metrics.update(await _evaluate(run, sampler, step))
        metrics.update(await _train_step(run, sampler, run.dataset.get_batch(step), learning_rate))
        sampler = await sampling_client_now(run.training_client)
        if save_due(config.save_every, step + 1, run.total_steps):
            metrics.update(await _save(run, step + 1))
        metrics["time/total"] = time.monotonic() - started
        run.logger.log_metrics(metrics, step)
    if config.eval_every > 0 and run.evaluators:
        run.logger.log_metrics(await _evaluate(run, sampler, run.total_steps), run.total_steps)
    await _save(run, run.total_steps, final=True)


async def _evaluate(run: _Run, sampler: SamplingClient, step: int) -> dict[str, float]:
    """The evaluators' metrics, logged at `step`; their samples are written under it now."""
    metrics = await run_evaluators_timed(run.evaluators, run.training_client, sampler)
    log_samples(run.config.log_path, step, take_samples(run.evaluators))
    return metrics


async def _save(run: _Run, next_step: int, final: bool = False) -> dict[str, float]:
    return await save_step_checkpoint(run.training_client, run.config.log_path, next_step, final)


async def _train_step(run: _Run, sampler: SamplingClient, prompts: list[Any], learning_rate: float) -> dict[str, float]:
    """Sample -> score with the teacher -> datums -> forward_backward + optim_step; the step's metrics."""
    config = run.config
    started = time.monotonic()
    completions = await sample_completions(sampler, run.renderer, prompts, config.group_size, config.max_tokens,
                                           config.temperature)
    sampled = time.monotonic()
    teacher_T, topk_D = await score_with_teacher(run.teacher, completions, config.forward_kl_topk)
    scored = time.monotonic()
    metrics = await _train(run, completions, teacher_T, topk_D, learning_rate)
    metrics.update({
        "completion_tokens": float(np.mean([len(c.tokens) for c in completions])),
        "num_tokens": float(sum(len(c.sequence) for c in completions)),  # prompts + answers, for tokens/s
        "time/sample": sampled - started,
        "time/teacher": scored - sampled,
        "time/train": time.monotonic() - scored,
    })
    return metrics


async def _train(run: _Run, completions: list[Completion], teacher_T: list[np.ndarray], topk_D: list[TopkLogprobs],
                 learning_rate: float) -> dict[str, float]:
    """The reverse-KL `importance_sampling` pass, the top-k forward-KL `cross_entropy` pass if the
    teacher sent top-k, then one `optim_step`. With `kl_penalty_coef=0` and top-k the first pass would
    carry no gradient (every advantage 0), so it is left out."""
    config, client = run.config, run.training_client
    targets = [c.targets_T() for c in completions]
    student_D, masks_D = [t[0] for t in targets], [t[1] for t in targets]
    batch_kl = teacher_kl(student_D, teacher_T, masks_D)
    baseline = batch_kl if config.center_kl else 0.0
    data_D = []
    if config.kl_penalty_coef > 0 or not topk_D:
        data_D = [completion_to_datum(c, t, config.kl_penalty_coef, config.kl_discount_factor, baseline)[0]
                  for c, t in zip(completions, teacher_T, strict=True)]
    forward_kl_D = [datum for completion, topk in zip(completions, topk_D, strict=True)
                    for datum in forward_kl_data(completion, topk, config.forward_kl_coef,
                                                config.forward_kl_until_divergence)] if topk_D else []
    reverse_pass = client.forward_backward(data_D, config.loss_fn, config.loss_fn_config) if data_D else None
    forward_pass = client.forward_backward(forward_kl_D, "cross_entropy") if forward_kl_D else None
    optim = client.optim_step(adam_params(learning_rate))
    metrics = {"teacher_kl": batch_kl, "optim/num_datums": float(len(data_D) + len(forward_kl_D))}
    if reverse_pass is not None:
        output = await reverse_pass
        metrics.update(compute_kl_sample_train(data_D, masks_D, [o["logprobs"].to_numpy() for o in output.loss_fn_outputs]))
        metrics["optim/loss_sum"] = float(output.metrics.get("loss:sum", 0.0))
    if forward_pass is not None:
        output = await forward_pass
        metrics["forward_kl_topk"] = forward_kl_topk(
            [d.loss_fn_inputs["weights"].to_numpy() for d in forward_kl_D],
            [o["logprobs"].to_numpy() for o in output.loss_fn_outputs],
            config.forward_kl_coef, sum(float(m.sum()) for m in masks_D))
        metrics["optim/forward_kl_loss_sum"] = float(output.metrics.get("loss:sum", 0.0))
    await optim
    return metrics


async def sample_completions(
    sampler: SamplingClient, renderer: Renderer, prompts: list[Any], group_size: int, max_tokens: int,
    temperature: float,
) -> list[Completion]:
    """`group_size` completions of each prompt (all sent at once), skipping empty ones."""
    model_inputs = [renderer.build_generation_prompt(messages) for messages in prompts]
    params = types.SamplingParams(max_tokens=max_tokens, temperature=temperature, stop=renderer.get_stop_sequences())
    responses = await asyncio.gather(*(sampler.sample(m, group_size, params) for m in model_inputs))
    completions = []
    for model_input, response in zip(model_inputs, responses, strict=True):
        for sequence in response.sequences:
            if sequence.tokens:
                assert sequence.logprobs is not None, "the sampler returned no log-probs"
                completions.append(Completion(list(model_input.to_ints()), list(sequence.tokens),
                                              list(sequence.logprobs)))
    if not completions:
        raise ConfigurationError("Every completion of the batch was empty; check max_tokens and the stop sequences.")
    return completions


async def score_with_teacher(
    teacher: SamplingClient, completions: list[Completion], topk: int = 0
) -> tuple[list[np.ndarray], list[TopkLogprobs]]:
    """The teacher's log-prob of each target token of each completion, shape (T,) each, and with
    `topk > 0` its top-k at every position of each sequence (else an empty list).

    Top-k comes from `sample(..., include_prompt_logprobs=True, topk_prompt_logprobs=k)` on the
    sequence, which the hosted API and the local engine both serve; the one token it samples is unused.
    """
    if topk == 0:
        scored = await asyncio.gather(*(teacher.compute_logprobs(types.ModelInput.from_ints(c.sequence))
                                        for c in completions))
        return [teacher_targets_T(c, logprobs) for c, logprobs in zip(completions, scored, strict=True)], []
    params = types.SamplingParams(max_tokens=1, temperature=1.0)
    responses = await asyncio.gather(*(
        teacher.sample(types.ModelInput.from_ints(c.sequence), 1, params, include_prompt_logprobs=True,
                       topk_prompt_logprobs=topk)
        for c in completions))
    teacher_T, topk_D = [], []
    for completion, response in zip(completions, responses, strict=True):
        if response.prompt_logprobs is None or response.topk_prompt_logprobs_np is None:
            raise ConfigurationError("The teacher's sampler returned no prompt log-probs; forward_kl_topk needs "
                                     "a backend that serves include_prompt_logprobs and topk_prompt_logprobs.")
        teacher_T.append(teacher_targets_T(completion, response.prompt_logprobs))
        topk_D.append(response.topk_prompt_logprobs_np)
    return teacher_T, topk_D
