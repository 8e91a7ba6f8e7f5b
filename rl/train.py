"""The RL training loop: sample groups, centre rewards, train with a policy-gradient loss, repeat.

    python -m recipes.rl_basic                      # a recipe builds a Config and calls main()
    train.main(Config(log_path=..., model_name=..., dataset_builder=..., learning_rate=1e-4, max_tokens=16))

One loop, three ways of feeding it (options of the same loop, sharing every step function):

- default (synchronous, on-policy): each iteration rolls out one dataset batch with the current
  weights, then trains on it in `num_substeps` optimizer steps of whole groups;
- `stream_minibatch_config`: still on-policy, but each minibatch's `forward_backward` is sent as
  soon as its groups have finished sampling, overlapping sampling and training;
- `async_config`: off-by-K; the groups of step `s` are sampled in the background with the weights
  of step `s - max_steps_off_policy` (never older than the last checkpoint) while the loop trains.

Every sample is seeded from (`seed`, step, group, sample), and which weights sample which groups
depends on step numbers only, so a run is reproducible and a resumed run logs exactly the metrics
(timings aside) that the uninterrupted run logged.

Each iteration logs `env/all/...` trajectory metrics, `optim/kl_sample_train_v1|v2`,
`optim/entropy`, `optim/lr`, `progress/done_frac` and `time/...`; writes a few transcripts to
`<log_path>/rollouts/`; runs the evaluators (the dataset's test split among them) every
`eval_every` iterations and after the last; and checkpoints every `save_every` iterations.
Re-running on the same `log_path` with `behavior_if_log_dir_exists=resume` continues from the
last checkpoint.

A pipeline built on this loop passes `make_hooks` (`rl.hooks`): a shaper that turns each
minibatch's datums into per-token advantages from other scores and adds extra losses before the
same `optim_step`, and reference samplers evaluated once at the start.
"""

import asyncio
import importlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import chz
import numpy as np
from tinker import types

from recipes_lib.backends import sampling_client_now
from recipes_lib.backends.protocols import Future, SamplingClient, ServiceClient, TrainingClient
from recipes_lib.checkpoints import CheckpointRecord, save_step_checkpoint
from recipes_lib.completers import TinkerTokenCompleter, TokenCompleter
from recipes_lib.config import check_group_size, check_positive
from recipes_lib.evaluators import (
    Evaluator,
    run_evaluators,
    run_evaluators_timed,
    take_samples,
)
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.hyperparams import adam_params
from recipes_lib.lifecycle import eval_due, open_run, save_due, start_run
from recipes_lib.logging import MultiplexLogger, log_samples
from recipes_lib.run_config import RunConfig
from recipes_lib.schedules import LRSchedule, lr_multiplier
from rl import data as rl_data
from rl.advantages import (
    AdvantageNormalization,
    LossAggregation,
    aggregate_advantages,
    compute_advantages,
    is_constant_reward,
    kl_penalty,
)
from rl.data import TrainingBatch, loss_input, split_minibatches, with_advantages
from rl.evaluators import RLTestSetEvaluator
from rl.hooks import ExtraLoss, HooksFactory, ShapedBatch, TrainingHooks, mean_metrics
from rl.metrics import compute_kl_sample_train, compute_trajectory_metrics
from rl.rollouts import RolloutError, RolloutLimits
from rl.sources import GroupOutcome, GroupSource, OffPolicySource, OnPolicySource
from rl.transcripts import console_summary, write_transcripts
from rl.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder, TrajectoryGroup

logger = logging.getLogger(__name__)

LossFn = Literal["importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce"]


@chz.chz
class AsyncConfig:
    """Off-by-K training: sampling continues in the background while the loop trains."""

    # A group may be trained on at most this many steps after the weights that sampled it (start < 5).
    max_steps_off_policy: int
    # Groups per optimizer step (the dataset's groups are pooled and taken in this size).
    groups_per_batch: int


@chz.chz
class StreamMinibatchConfig:
    """On-policy streaming: send each minibatch to training as soon as its groups finish sampling."""

    # Groups per iteration; must equal the dataset's batch size.
    groups_per_batch: int
    # forward_backward calls per optimizer step (each of groups_per_batch / num_minibatches groups).
    num_minibatches: int


@chz.chz
class Config(RunConfig):
    """An RL run: the shared run settings (`RunConfig`; the seed also seeds every rollout sample, per
    step, group and sample) and these; see the module docstring for how the options combine."""

    # Builds the training dataset of env groups and an optional held-out test dataset.
    dataset_builder: RLDatasetBuilder
    # The most tokens sampled per turn.
    max_tokens: int

    # Sampling temperature of training rollouts; 1.0 samples the policy itself.
    temperature: float = 1.0
    # importance_sampling (REINFORCE with an importance ratio), ppo, cispo, dro, gspo or stable_reinforce
    # (REINFORCE with the importance weight against the sampler's own recorded log-probs, truncated;
    # its samplers record what they sample: local_tinker/losses.py).
    loss_fn: LossFn = "importance_sampling"
    # The loss's settings, e.g. clip_low_threshold / clip_high_threshold for ppo, beta for dro.
    loss_fn_config: dict[str, float] | None = None
    # Rewards to advantages: group_mean (R minus its group's mean), group_std (GRPO: divided by the
    # group's std too) or batch_std (by the std of the batch's centred rewards); rl/advantages.py.
    advantage_normalization: AdvantageNormalization = "group_mean"
    # How token terms add up: token_sum, sequence_mean, token_mean (DAPO) or constant (Dr.GRPO:
    # divided by max_tokens); over the groups of one forward_backward. rl/advantages.py.
    loss_aggregation: LossAggregation = "token_sum"
    # How the learning rate moves over the run: constant (RL's usual), or a linear/cosine decay to 0.
    lr_schedule: LRSchedule = "constant"
    # Optimizer steps per iteration; the batch is split into this many parts of whole groups.
    num_substeps: int = 1
    # Weight of a penalty on the sampled tokens' log-ratio to the base model, folded into advantages.
    kl_penalty_coef: float = 0.0
    # The reference of that penalty: None for the base model, or sampler weights (a tinker:// or
    # local:// path, e.g. an SFT checkpoint the policy started from).
    kl_reference_path: str | None = None
    # A token's penalty also counts the later tokens' penalties of its datum, discounted by this (0: none).
    kl_discount_factor: float = 0.0
    # Skip groups whose rewards are all equal: their advantages are zero, so they only cost compute.
    remove_constant_reward_groups: bool = False
    # An env error drops its group (counted in rollout_errors/<type>) instead of stopping the run.
    rollout_error_tolerance: bool = False
    # Turns and seconds an episode may take (past either: a rollout error of type TurnLimit / Timeout),
    # retries of a failed rollout on a fresh env, and how many must succeed for a group to train.
    rollout_limits: RolloutLimits = chz.field(default_factory=RolloutLimits)
    # Stop after this many steps in a row that train on nothing (every group failed, had non-finite
    # rewards, or had equal rewards and no KL penalty): such a run would only spend time. 0: never.
    max_steps_without_signal: int = 5
    async_config: AsyncConfig | None = None
    stream_minibatch_config: StreamMinibatchConfig | None = None

    # RL evaluates less often than RunConfig's default, and 0 means never (not even after the last).
    eval_every: int = chz.field(default=20, doc="Evaluate every this many iterations (before training on it; "
                                "not before the last, which the evaluation after it covers) and after the "
                                "last; 0: never.")
    # Temperature of the test-set evaluator; 0 is greedy.
    eval_temperature: float = 0.0
    # Groups per iteration written to rollouts/iteration_<n>.txt (two summarised on the console at
    # the first iteration and at each evaluation).
    num_groups_to_log: int = 4

    @chz.validate
    def _check(self) -> None:
        check_positive(max_tokens=self.max_tokens, num_substeps=self.num_substeps)
        for key, value in {"kl_penalty_coef": self.kl_penalty_coef, "temperature": self.temperature}.items():
            if value < 0:
                raise ConfigurationError(f"{key} must be >= 0, got {value}.")
        if self.async_config is not None and self.stream_minibatch_config is not None:
            raise ConfigurationError("Set async_config or stream_minibatch_config, not both.")
        if self.async_config is not None and (self.async_config.groups_per_batch < 1
                                              or self.async_config.max_steps_off_policy < 0):
            raise ConfigurationError(f"async_config needs groups_per_batch >= 1 and max_steps_off_policy >= 0; "
                                     f"got {self.async_config}.")
        if self.stream_minibatch_config is not None and self.stream_minibatch_config.num_minibatches < 1:
            raise ConfigurationError(f"stream_minibatch_config.num_minibatches must be >= 1; "
                                     f"got {self.stream_minibatch_config}.")
        if not 0 <= self.kl_discount_factor < 1:
            raise ConfigurationError(f"kl_discount_factor must be in [0, 1), got {self.kl_discount_factor}.")
        if (self.kl_reference_path or self.kl_discount_factor) and self.kl_penalty_coef == 0:
            raise ConfigurationError("kl_reference_path and kl_discount_factor shape the KL penalty, which "
                                     "kl_penalty_coef=0 turns off; set kl_penalty_coef > 0 or leave them unset.")
        if self.max_steps_without_signal < 0:
            raise ConfigurationError(f"max_steps_without_signal must be >= 0 (0: never stop), got "
                                     f"{self.max_steps_without_signal}.")


@dataclass
class _Run:
    """What the loop holds while it runs."""

    config: Config
    training_client: TrainingClient
    service_client: ServiceClient
    source: GroupSource
    evaluators: list[Evaluator]
    logger: MultiplexLogger
    tokenizer: Any
    start_step: int
    total_steps: int
    base_sampler: SamplingClient | None = None
    steps_without_signal: int = 0  # in a row, up to the last step
    hooks: TrainingHooks = field(default_factory=TrainingHooks)


@dataclass
class _Minibatch:
    """A submitted forward_backward and the batch it trains on."""

    batch: TrainingBatch
    forward_backward: Future[types.ForwardBackwardOutput] | None  # None: a shaper left it out
    kl_policy_base: float | None = None
    extra: list[tuple[ExtraLoss, Future[types.ForwardBackwardOutput]]] = field(default_factory=list)
    hook_metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _StepWork:
    """A step's rollouts and the training requests submitted for them."""

    outcomes: list[GroupOutcome] = field(default_factory=list)
    minibatches: list[_Minibatch] = field(default_factory=list)
    optim_steps: list[Future[types.OptimStepResponse]] = field(default_factory=list)
    sampling_seconds: float = 0.0


def main(config: Config) -> None:
    """Run RL training to the end (blocking)."""
    asyncio.run(main_async(config))


async def main_async(config: Config, make_hooks: HooksFactory | None = None) -> None:
    """Run RL training to the end, inside an existing event loop (with the hooks `make_hooks` builds)."""
    run = await _start(config, start_run(config), make_hooks)
    if run is None:
        return
    try:
        await _loop(run)
    finally:
        await run.source.close()
        run.logger.close()


async def _start(config: Config, resume: CheckpointRecord | None, make_hooks: HooksFactory | None = None
                 ) -> _Run | None:
    """Resume or create the training client, build the datasets, evaluators, source and loggers
    (None when the run in `log_path` is already finished)."""
    train_dataset, test_dataset = await config.dataset_builder()
    _check_dataset(train_dataset)
    if config.num_epochs > 1:
        train_dataset = EpochsDataset(train_dataset, config.num_epochs)
    total = _total_steps(config, train_dataset)
    started = open_run(config, resume, total)
    if started is None:
        return None
    service, client, start = started.service_client, started.training_client, started.start_step
    evaluators = [build() for build in config.evaluator_builders]
    if test_dataset is not None:
        evaluators.append(RLTestSetEvaluator(test_dataset, config.max_tokens, config.eval_temperature))
    run = _Run(config, client, service, _make_source(config, train_dataset, start, total), evaluators,
               started.metrics_logger, client.get_tokenizer(), start, total)
    if config.kl_penalty_coef > 0:
        run.base_sampler = (service.create_sampling_client(model_path=config.kl_reference_path)
                            if config.kl_reference_path else service.create_sampling_client(base_model=config.model_name))
    if make_hooks is not None:
        run.hooks = make_hooks(service)
    return run


class EpochsDataset(RLDataset):
    """`num_epochs` passes over a dataset: batch `i` is the dataset's batch `i mod len(dataset)`."""

    def __init__(self, dataset: RLDataset, num_epochs: int):
        self.dataset, self.num_epochs = dataset, num_epochs

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range; {self.num_epochs} epochs hold {len(self)} batches.")
        return self.dataset.get_batch(index % len(self.dataset))

    def __len__(self) -> int:
        return len(self.dataset) * self.num_epochs


def _check_dataset(dataset: RLDataset) -> None:
    """Refuse, before any work, a dataset that would train on nothing."""
    if len(dataset) == 0:
        raise ConfigurationError(f"The training dataset ({type(dataset).__name__}) holds no batches; check its data "
                                 "and batch size.")
    if len(dataset.get_batch(0)) == 0:
        raise ConfigurationError(f"Batch 0 of the training dataset ({type(dataset).__name__}) holds no groups; "
                                 "its batch size (groups per batch) must be >= 1.")


def _total_steps(config: Config, dataset: RLDataset) -> int:
    steps = len(dataset)
    if config.async_config is not None:
        steps = len(dataset) * len(dataset.get_batch(0)) // config.async_config.groups_per_batch
    return min(steps, config.max_steps) if config.max_steps is not None else steps


def _make_source(config: Config, dataset: RLDataset, start_step: int, total_steps: int) -> GroupSource:
    def make_policy(sampling_client: SamplingClient) -> TokenCompleter:
        return TinkerTokenCompleter(sampling_client, max_tokens=config.max_tokens, temperature=config.temperature)

    if config.async_config is None:
        return OnPolicySource(dataset, make_policy, config.rollout_error_tolerance, config.seed, config.rollout_limits)
    per_step = config.async_config.groups_per_batch
    builders = [b for index in range(len(dataset)) for b in dataset.get_batch(index)]
    return OffPolicySource(builders[start_step * per_step:total_steps * per_step], make_policy, per_step,
                           config.async_config.max_steps_off_policy, config.rollout_error_tolerance, config.seed,
                           start_step, config.save_every, config.rollout_limits)


async def _loop(run: _Run) -> None:
    """Evaluate when due, train one step, refresh the sampler, checkpoint when due, log; repeat."""
    config = run.config
    sampler = await _sampler(run)
    run.source.set_policy(run.start_step, sampler)
    if run.start_step == 0 and run.evaluators:
        await _evaluate_references(run)
    for step in range(run.start_step, run.total_steps):
        started = time.monotonic()
        metrics = {"progress/batch": float(step), "progress/done_frac": (step + 1) / run.total_steps,
                   "optim/lr": _learning_rate(run, step)}
        if eval_due(config.eval_every, step, run.total_steps) and run.evaluators:
            metrics.update(await _evaluate(run, sampler, step))
        metrics.update(await _train_step(run, step))
        sampler = await _sampler(run)
        run.source.set_policy(step + 1, sampler)
        if save_due(config.save_every, step + 1, run.total_steps):
            metrics.update(await _save(run, step + 1))
        metrics["time/total"] = time.monotonic() - started
        run.logger.log_metrics(metrics, step)
    if config.eval_every > 0 and run.evaluators:
        run.logger.log_metrics(await _evaluate(run, sampler, run.total_steps), run.total_steps)
    await _save(run, run.total_steps, final=True)


def _learning_rate(run: _Run, step: int) -> float:
    return run.config.learning_rate * lr_multiplier(run.config.lr_schedule, step, run.total_steps)


async def _evaluate_references(run: _Run) -> None:
    """Evaluate each reference sampler once, logged at step 0 as `<name>/<metric>` (samples too)."""
    for name, sampler in run.hooks.reference_samplers.items():
        metrics = await run_evaluators(run.evaluators, run.training_client, lambda: sampler)  # noqa: B023 (awaited here)
        log_samples(run.config.log_path, 0, take_samples(run.evaluators, prefix=f"{name}/"))
        run.logger.log_metrics({f"{name}/{key}": value for key, value in metrics.items()}, 0)


async def _sampler(run: _Run) -> SamplingClient:
    """A sampling client on the current weights (recording its samples where the loss needs them)."""
    return await sampling_client_now(run.training_client, record_stability_info=run.config.loss_fn == "stable_reinforce")


async def _evaluate(run: _Run, sampler: SamplingClient, step: int) -> dict[str, float]:
    """The evaluators' metrics, logged at `step`; their samples are written under it now."""
    metrics = await run_evaluators_timed(run.evaluators, run.training_client, sampler)
    log_samples(run.config.log_path, step, take_samples(run.evaluators))
    return metrics


async def _save(run: _Run, next_step: int, final: bool = False) -> dict[str, float]:
    return await save_step_checkpoint(run.training_client, run.config.log_path, next_step, final)


# -- one training step ---------------------------------------------------------------------------


async def _train_step(run: _Run, step: int) -> dict[str, float]:
    """Roll out the step's groups and train on them; returns the step's metrics."""
    started = time.monotonic()
    stream = run.source.groups(step)
    if run.config.stream_minibatch_config is not None:
        work = await _submit_streaming(run, step, stream)
    else:
        work = await _submit_after_sampling(run, step, stream)
    trained = [m for m in work.minibatches if m.forward_backward is not None]
    outputs = [await m.forward_backward for m in trained if m.forward_backward is not None]
    extra_metrics = [await _extra_loss_metrics(m) for m in work.minibatches]
    for optim in work.optim_steps:
        await optim
    metrics = _rollout_metrics(run, step, work.outcomes)
    _check_signal(run, step, work)
    metrics.update(_training_metrics(trained, outputs))
    metrics.update(_hook_metrics(work.minibatches, extra_metrics))
    metrics.update(run.source.take_metrics())
    metrics["time/sample"] = work.sampling_seconds
    metrics["time/train"] = time.monotonic() - started - work.sampling_seconds
    return metrics


async def _submit_after_sampling(run: _Run, step: int, stream: AsyncIterator[GroupOutcome]) -> _StepWork:
    """Wait for every group, then train in `num_substeps` optimizer steps of whole groups."""
    started = time.monotonic()
    work = _StepWork(outcomes=sorted([outcome async for outcome in stream], key=lambda o: o.index))
    work.sampling_seconds = time.monotonic() - started
    groups = _trainable_groups(run, work.outcomes)
    for part in split_minibatches(groups, run.config.num_substeps):
        work.minibatches.append(await _submit_minibatch(run, part))
        work.optim_steps.append(_submit_optim_step(run, step))
    return work


async def _submit_streaming(run: _Run, step: int, stream: AsyncIterator[GroupOutcome]) -> _StepWork:
    """Send each minibatch to training as soon as its groups finish; one optimizer step per
    `num_minibatches` minibatches (and `num_substeps` optimizer steps per iteration).

    Minibatch k holds the k-th run of consecutive groups of the batch (by index), whatever order
    they finish in, so the updates do not depend on timing and a resumed run repeats them."""
    config = run.config
    assert config.stream_minibatch_config is not None
    expected = run.source.expected_groups(step)
    if expected != config.stream_minibatch_config.groups_per_batch:
        raise ConfigurationError(f"stream_minibatch_config.groups_per_batch is "
                                 f"{config.stream_minibatch_config.groups_per_batch} but batch {step} has "
                                 f"{expected} groups; set it to the dataset's batch size.")
    per_optim = config.stream_minibatch_config.num_minibatches
    parts = [list(part) for part in split_minibatches(range(expected), config.num_substeps * per_optim)]
    finished: dict[int, GroupOutcome] = {}
    work, done, pending_gradients, started = _StepWork(), 0, False, time.monotonic()
    async for outcome in stream:
        work.outcomes.append(outcome)
        finished[outcome.index] = outcome
        while done < len(parts) and all(index in finished for index in parts[done]):
            groups, done = _trainable_groups(run, [finished[index] for index in parts[done]]), done + 1
            if groups:
                work.minibatches.append(await _submit_minibatch(run, groups))
                pending_gradients = True
            if pending_gradients and (done % per_optim == 0 or done == len(parts)):
                work.optim_steps.append(_submit_optim_step(run, step))
                pending_gradients = False
    work.outcomes.sort(key=lambda o: o.index)
    work.sampling_seconds = time.monotonic() - started
    return work


def _check_signal(run: _Run, step: int, work: _StepWork) -> None:
    """Stop a run that has trained on nothing for `max_steps_without_signal` steps in a row."""
    advantages = [loss_input(d, "advantages") for m in work.minibatches if m.forward_backward is not None
                  for d in m.batch.data_D]
    if any(m.extra for m in work.minibatches) or any(np.any(np.asarray(a) != 0) for a in advantages):
        run.steps_without_signal = 0
        return
    run.steps_without_signal += 1
    limit = run.config.max_steps_without_signal
    usable = _usable_groups(work.outcomes)
    failed = sum(o.error is not None for o in work.outcomes)
    why = (f"{len(work.outcomes)} groups: {failed} failed, {len(work.outcomes) - failed - len(usable)} had non-finite "
           f"rewards, {len(usable)} had rewards all equal within the group (advantages 0)")
    logger.warning("Step %d trained on nothing (%s).", step, why)
    if limit and run.steps_without_signal >= limit:
        raise RolloutError(
            f"{run.steps_without_signal} steps in a row trained on nothing (last, step {step}: {why}), so the run "
            "stops (max_steps_without_signal). If every group's rewards are equal, the task is too hard or too easy "
            "for the model at this group_size, or the reward function ignores the answer.",
            env_name=type(work.outcomes[0].builder).__name__ if work.outcomes else "?", error_type="NoSignal")


def _usable_groups(outcomes: list[GroupOutcome]) -> list[GroupOutcome]:
    """Outcomes with a group whose rewards are all finite (NaN rewards are reported, not trained on)."""
    return [o for o in outcomes if o.group is not None and o.group.has_finite_rewards()]


def _trainable_groups(run: _Run, outcomes: list[GroupOutcome]) -> list[TrajectoryGroup]:
    config = run.config
    groups = [o.group for o in _usable_groups(outcomes) if o.group is not None]
    if groups and all(len(g.trajectories_G) < 2 for g in groups) and run.hooks.shape_batch is None:
        check_group_size(len(groups[0].trajectories_G))  # an env's group builder made groups of one
    if config.remove_constant_reward_groups:
        groups = [g for g in groups if not is_constant_reward(g)]
    return groups


async def _submit_minibatch(run: _Run, groups_P: list[TrajectoryGroup]) -> _Minibatch:
    """Advantages -> datums (-> KL shaping) (-> the shaper hook) -> forward_backward, and any extra
    losses, submitted without waiting."""
    config = run.config
    batch = rl_data.assemble_training_data(groups_P, compute_advantages(groups_P, config.advantage_normalization))
    kl_policy_base = None
    if run.base_sampler is not None:
        batch, kl_policy_base = await _shape_with_kl(run.base_sampler, batch, config.kl_penalty_coef,
                                                     config.kl_discount_factor)
    shaped = await run.hooks.shape_batch(batch) if run.hooks.shape_batch is not None else ShapedBatch(batch)
    batch = shaped.batch
    if config.loss_aggregation != "token_sum":
        batch = _with_advantages(batch, aggregate_advantages([loss_input(d, "advantages") for d in batch.data_D],
                                                             batch.masks_D, config.loss_aggregation, config.max_tokens))
    client = run.training_client
    future = client.forward_backward(batch.data_D, config.loss_fn, config.loss_fn_config) \
        if shaped.policy_loss and batch.data_D else None
    extra = [(loss, client.forward_backward(loss.data_D, loss.loss_fn)) for loss in shaped.extra_losses if loss.data_D]
    return _Minibatch(batch, future, kl_policy_base, extra, shaped.metrics)


def _submit_optim_step(run: _Run, step: int) -> Future[types.OptimStepResponse]:
    return run.training_client.optim_step(adam_params(_learning_rate(run, step)))


async def _shape_with_kl(base: SamplingClient, batch: TrainingBatch, coef: float,
                         discount: float) -> tuple[TrainingBatch, float]:
    """Fold the KL-to-base penalty into the batch's advantages (base log-probs via compute_logprobs)."""
    sequences = [list(d.model_input.to_ints()) + [int(loss_input(d, "target_tokens")[-1])] for d in batch.data_D]
    scored = await asyncio.gather(*(base.compute_logprobs(types.ModelInput.from_ints(s)) for s in sequences))
    base_D = [np.asarray([0.0 if lp is None else lp for lp in logprobs[1:]]) for logprobs in scored]
    advantages_D, kl_mean = kl_penalty([loss_input(d, "advantages") for d in batch.data_D],
                                       [loss_input(d, "logprobs") for d in batch.data_D], base_D, batch.masks_D, coef,
                                       discount)
    return _with_advantages(batch, advantages_D), kl_mean


def _with_advantages(batch: TrainingBatch, advantages_D: list[np.ndarray]) -> TrainingBatch:
    """The batch with each datum's advantages replaced."""
    data_D = [with_advantages(d, a) for d, a in zip(batch.data_D, advantages_D, strict=True)]
    return TrainingBatch(data_D, batch.masks_D, batch.group_index_D, batch.trajectory_index_D)


# -- metrics and transcripts -------------------------------------------------------------------------


def _rollout_metrics(run: _Run, step: int, outcomes: list[GroupOutcome]) -> dict[str, float]:
    """Trajectory metrics of the usable groups, error counts, and transcripts of a few groups."""
    errors = [o.error for o in outcomes if o.error is not None]
    if outcomes and len(errors) == len(outcomes):
        raise RolloutError(f"Every group of step {step} failed; the first: {errors[0]}",
                           env_name=errors[0].env_name, error_type=errors[0].error_type) from errors[0]
    usable = _usable_groups(outcomes)
    metrics: dict[str, float] = {}
    recovered = [error for o in outcomes for error in o.recovered]
    for error in errors + recovered:  # every failed rollout, in a dropped group or one that went on
        key = f"rollout_errors/{error.error_type}"
        metrics[key] = metrics.get(key, 0.0) + 1.0
    if errors or recovered:
        metrics["rollout_errors/groups_dropped"] = float(len(errors))
        metrics["rollout_errors/recovered"] = float(len(recovered))
    nonfinite = [o for o in outcomes if o.group is not None and not o.group.has_finite_rewards()]
    if nonfinite:
        metrics["rollout_errors/nonfinite_reward"] = float(len(nonfinite))
        for o in nonfinite:
            logger.warning("Step %d: a group of %s has non-finite rewards %s; it is not trained on.", step,
                           type(o.builder).__name__, o.group.get_total_rewards() if o.group else None)
        if not usable:
            name, first = type(nonfinite[0].builder).__name__, nonfinite[0].group
            raise RolloutError(
                f"Every group of step {step} was dropped ({len(nonfinite)} with non-finite rewards, {len(errors)} "
                f"failed), so nothing could be trained; the first non-finite rewards, from {name}: "
                f"{first.get_total_rewards() if first else None}. Check the env's reward function.",
                env_name=name, error_type="NonfiniteReward")
    if usable:
        groups = [o.group for o in usable if o.group is not None]
        metrics.update(compute_trajectory_metrics(groups, [o.tags for o in usable]))
        metrics.update(_sampler_steps(usable))
        _log_transcripts(run, step, usable[: run.config.num_groups_to_log])
    return metrics


def _sampler_steps(outcomes: list[GroupOutcome]) -> dict[str, float]:
    steps = np.asarray([o.sampler_step for o in outcomes], dtype=np.float64)
    return {"sampling_client/step_min": float(steps.min()), "sampling_client/step_max": float(steps.max()),
            "sampling_client/step_mean": float(steps.mean())}


def _log_transcripts(run: _Run, step: int, outcomes: list[GroupOutcome]) -> None:
    pairs = [(o.group, o.tags) for o in outcomes if o.group is not None]
    if pairs and run.config.num_groups_to_log > 0:
        write_transcripts(run.config.log_path, step, pairs, run.tokenizer)
        every = run.config.eval_every
        if step == run.start_step or (every > 0 and step % every == 0):  # a log stays short; files hold every one
            print(console_summary(step, pairs[:2], run.tokenizer), flush=True)


async def _extra_loss_metrics(minibatch: _Minibatch) -> dict[str, float]:
    """The metrics of a minibatch's extra losses, from their outputs."""
    metrics: dict[str, float] = {}
    for loss, future in minibatch.extra:
        output = await future
        if loss.metrics is not None:
            metrics.update(loss.metrics(output))
    return metrics


def _hook_metrics(minibatches: list[_Minibatch], extra_metrics: list[dict[str, float]]) -> dict[str, float]:
    """The shaper's and extra losses' metrics (averaged over minibatches); extra datums join
    `optim/num_datums`, and a minibatch trained by extra losses alone counts in `optim/num_minibatches`."""
    rows = [{**m.hook_metrics, **extra} for m, extra in zip(minibatches, extra_metrics, strict=True)]
    metrics = mean_metrics([row for row in rows if row])
    extra_datums = sum(len(loss.data_D) for m in minibatches for loss, _ in m.extra)
    if extra_datums:
        trained = sum(len(m.batch.data_D) for m in minibatches if m.forward_backward is not None)
        metrics["optim/num_datums"] = float(trained + extra_datums)
        metrics["optim/num_minibatches"] = float(sum(m.forward_backward is not None or bool(m.extra)
                                                     for m in minibatches))
    return metrics


def _training_metrics(minibatches: list[_Minibatch], outputs: list[types.ForwardBackwardOutput]) -> dict[str, float]:
    """KL(sampler || trainer), entropy, loss and sizes over every minibatch of the step."""
    data_D = [d for m in minibatches for d in m.batch.data_D]
    masks_D = [mask for m in minibatches for mask in m.batch.masks_D]
    trainer_D = [np.asarray(o["logprobs"].to_numpy()) for out in outputs for o in out.loss_fn_outputs]
    metrics = compute_kl_sample_train(data_D, masks_D, trainer_D)
    metrics["optim/num_datums"] = float(len(data_D))
    metrics["optim/num_minibatches"] = float(len(minibatches))
    if outputs:
        metrics["optim/loss_sum"] = float(sum(out.metrics.get("loss:sum", 0.0) for out in outputs))
    kls = [m.kl_policy_base for m in minibatches if m.kl_policy_base is not None]
    if kls:
        metrics["kl_policy_base"] = float(np.mean(kls))
    return metrics



if __name__ == "__main__":
    from recipes_lib.cli import run_recipe

    run_recipe(main, chz.Blueprint(Config))


COOKBOOK_NAMES = ("_remove_constant_reward_groups", "_remove_mask", "assemble_training_data")


def __getattr__(name: str) -> Any:
    """The reference cookbook imports its RL-loop steps from `rl.train`; they live in the alias module
    `rl.processing` (the loop above does not use them), imported only when one is asked for."""
    if name in COOKBOOK_NAMES:
        return getattr(importlib.import_module("rl.processing"), name)
    raise AttributeError(f"module 'rl.train' has no attribute {name!r}")
