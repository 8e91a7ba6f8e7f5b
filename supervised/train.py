"""Supervised fine-tuning: the `Config` and the training loop `main(config)`.

Each step takes one batch, runs the evaluations that are due on the weights *before* the step,
submits `forward_backward` (cross-entropy) and `optim_step`, and logs a line to metrics.jsonl.
The next step is submitted before the current one's results are read (`submit_ahead`), so the
engine never waits for the Python side between steps.

    step s (0-based) of T:   epoch, batch = divmod(s, batches_per_epoch)
                             lr = learning_rate * schedule(s / T)
                             progress = (s + 1) / T

Evaluations run at steps where `s % eval_every == 0` (step 0 gives the starting point) and once more
after the last step; those final results go into the last step's line, so the last line of
metrics.jsonl holds the final train loss and the final test metrics. `time/step` is the wall time
between two steps' results (evaluations included), `time/eval` the evaluations alone.

Checkpoints: every `save_every` steps and at the end (a row named "final"). A rerun on the same
log_path (behavior_if_log_dir_exists=resume) continues from the last checkpoint at the next batch,
with the same data order and learning rates as an uninterrupted run.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import chz
from tinker import types

from eval.nll import NLLEvaluator
from recipes_lib.backends.protocols import Future, TrainingClient
from recipes_lib.checkpoints import CheckpointRecord, save_checkpoint
from recipes_lib.config import check_positive
from recipes_lib.display import print_colorized
from recipes_lib.evaluators import Evaluator, EvaluatorBuilder, run_evaluators, take_samples
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.hyperparams import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, adam_params, get_lr
from recipes_lib.lifecycle import eval_due, open_run, resume_step, save_due, start_run
from recipes_lib.logging import MultiplexLogger, log_samples
from recipes_lib.model_info import resolve_renderer_name
from recipes_lib.run_config import RunConfig
from recipes_lib.schedules import LRSchedule, lr_multiplier
from recipes_lib.tokenizers import get_tokenizer
from supervised.datums import LossReduction, compute_mean_nll, datum_weights, reduced_batch
from supervised.types import DatumListDataset, SupervisedDataset, SupervisedDatasetBuilder

logger = logging.getLogger(__name__)


def _default_lr(config: "Config", value: float | None) -> float:
    return value if value is not None else get_lr(config.model_name)


def _default_renderer(config: "Config", value: str | None) -> str:
    return resolve_renderer_name(config.model_name, value)


@chz.chz
class Config(RunConfig):
    """A supervised run: the shared run settings (`RunConfig`) and these; `python -m recipes.sl_basic
    key=value` sets any of them."""

    # Builds (train, test) datasets; its test split is reported as test/nll.
    dataset_builder: SupervisedDatasetBuilder
    # As RunConfig's, resolved here so the recipes can pass it to the dataset builder.
    renderer_name: str | None = chz.field(default=None, munger=_default_renderer)
    # As RunConfig's; None: recipes_lib.hyperparams.get_lr(model_name), the rate for a LoRA on that model.
    learning_rate: float = chz.field(default=None, munger=_default_lr, x_type=float | None)
    # Multiplier over the run: linear decays to 0 at the end, cosine likewise, constant stays 1.
    lr_schedule: LRSchedule = "linear"
    adam_beta1: float = ADAM_BETA1
    adam_beta2: float = ADAM_BETA2
    adam_eps: float = ADAM_EPS
    # How an example's token losses add up: sum (each trained token once) or example_mean (each example's
    # mean, as tinker-cookbook); learning rates carry over (see supervised.datums.reduced_batch).
    loss_reduction: LossReduction = "sum"
    # Steps submitted ahead of the one being read (request pipelining); 0 waits on every step.
    submit_ahead: int = 1
    # Slower evaluators, every infrequent_eval_every steps; 0: only at the end.
    infrequent_eval_every: int = 100
    infrequent_evaluator_builders: list[EvaluatorBuilder] = chz.field(default_factory=list)

    @chz.validate
    def _check_counts(self) -> None:
        for name in ("infrequent_eval_every", "submit_ahead"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be >= 0, got {getattr(self, name)}.")
        check_positive(adam_eps=self.adam_eps)


@dataclass(frozen=True)
class StepPlan:
    """How global steps map to (epoch, batch) and which steps evaluate or save."""

    batches_per_epoch: int
    total_steps: int

    @classmethod
    def of(cls, batches_per_epoch: int, num_epochs: int, max_steps: int | None) -> "StepPlan":
        if batches_per_epoch < 1:
            raise ConfigurationError("The training set has no full batch; lower the batch size or add data.")
        total = batches_per_epoch * num_epochs
        if max_steps is not None and max_steps > total:
            logger.warning("max_steps=%d exceeds %d epochs x %d batches; training %d steps",
                           max_steps, num_epochs, batches_per_epoch, total)
        return cls(batches_per_epoch, min(total, max_steps) if max_steps is not None else total)

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, batch index within the epoch) of global `step`."""
        return divmod(step, self.batches_per_epoch)

    def start_step(self, resume: CheckpointRecord | None) -> int:
        """The step a run continues at: the checkpoint's next batch, or 0."""
        return resume_step(resume, self.batches_per_epoch)

    def is_due(self, every: int, step: int) -> bool:
        """Whether a pre-step evaluation runs at `step` (the last step is covered by the final one)."""
        return eval_due(every, step, self.total_steps)

    def saves_after(self, save_every: int, step: int) -> bool:
        """Whether a periodic checkpoint follows `step` (the final one is saved separately)."""
        return save_due(save_every, step + 1, self.total_steps)


@dataclass
class Submitted:
    """A step whose requests are in flight, and the metrics known before its results."""

    step: int
    batch: list[types.Datum]
    forward_backward: Future[types.ForwardBackwardOutput]
    optim_step: Future[types.OptimStepResponse]
    metrics: dict[str, float]


@dataclass
class Run:
    """What the loop's helpers share: the config, the client, the data and the loggers."""

    config: Config
    training_client: TrainingClient
    train_set: SupervisedDataset
    plan: StepPlan
    evaluators: list[Evaluator]
    infrequent_evaluators: list[Evaluator]
    metrics_logger: MultiplexLogger
    last_resolved_at: float = field(default_factory=time.monotonic)


def main(config: Config) -> None:
    """Train `config.model_name` on `config.dataset_builder`, logging and checkpointing to log_path."""
    resume = start_run(config)
    train_set, test_set = config.dataset_builder()
    plan = StepPlan.of(len(train_set), config.num_epochs, config.max_steps)
    started = open_run(config, resume, plan.total_steps, plan.batches_per_epoch)
    if started is None:
        return
    run = Run(config, started.training_client, train_set, plan,
              evaluators=_build_evaluators(config.evaluator_builders, test_set),
              infrequent_evaluators=[build() for build in config.infrequent_evaluator_builders],
              metrics_logger=started.metrics_logger)
    try:
        asyncio.run(_train(run, started.start_step))
    finally:
        run.metrics_logger.close()


def _build_evaluators(builders: Sequence[EvaluatorBuilder], test_set: SupervisedDataset | None) -> list[Evaluator]:
    """The configured evaluators, plus test/nll on the test split when the dataset has one."""
    evaluators = [build() for build in builders]
    if isinstance(test_set, DatumListDataset):
        evaluators.insert(0, NLLEvaluator(test_set.all_datums(), name="test"))
    elif test_set is not None:
        test_set.set_epoch(0)
        evaluators.insert(0, NLLEvaluator([d for i in range(len(test_set)) for d in test_set.get_batch(i)]))
    return evaluators


async def _train(run: Run, start_step: int) -> None:
    """The loop: evaluate (if due), submit the step, checkpoint (if due), read finished steps."""
    in_flight: deque[Submitted] = deque()
    for step in range(start_step, run.plan.total_steps):
        batch = _batch_for_step(run, step, first=step == start_step)
        eval_metrics = await _due_evaluations(run, step)
        in_flight.append(_submit(run, step, batch, eval_metrics))
        if run.plan.saves_after(run.config.save_every, step):
            await _resolve_all(run, in_flight)
            _save(run, step + 1, name=f"{step + 1:06d}")
        while len(in_flight) > run.config.submit_ahead:
            await _resolve(run, in_flight.popleft())
    await _resolve_all(run, in_flight)
    _save(run, run.plan.total_steps, name="final", final=True)


def _batch_for_step(run: Run, step: int, first: bool) -> list[types.Datum]:
    """The batch of `step`, reshuffling at each epoch start; the process's first batch is printed."""
    epoch, batch_index = run.plan.position(step)
    if batch_index == 0 or first:
        run.train_set.set_epoch(seed=epoch)
    batch = run.train_set.get_batch(batch_index)
    if first:
        print_colorized(batch[0], get_tokenizer(run.config.model_name))
    return batch


async def _due_evaluations(run: Run, step: int) -> dict[str, float]:
    """Metrics of the evaluators due before `step` (they see the weights after step - 1)."""
    frequent = run.evaluators if run.plan.is_due(run.config.eval_every, step) else []
    infrequent = run.infrequent_evaluators if run.plan.is_due(run.config.infrequent_eval_every, step) else []
    return await _evaluate(run, frequent + infrequent, step)


async def _evaluate(run: Run, evaluators: Sequence[Evaluator], step: int) -> dict[str, float]:
    """Run `evaluators` (their metrics are logged at `step`, their samples written under it now)."""
    if not evaluators:
        return {}
    started = time.monotonic()
    metrics = await run_evaluators(evaluators, run.training_client,
                                   lambda: run.training_client.save_weights_and_get_sampling_client().result())
    log_samples(run.config.log_path, step, take_samples(evaluators))
    return {**metrics, "time/eval": time.monotonic() - started}


def _submit(run: Run, step: int, batch: list[types.Datum], eval_metrics: dict[str, float]) -> Submitted:
    """Queue forward_backward and optim_step for `step`; returns at once."""
    config = run.config
    learning_rate = config.learning_rate * lr_multiplier(config.lr_schedule, step, run.plan.total_steps)
    adam = adam_params(learning_rate, config.adam_beta1, config.adam_beta2, config.adam_eps)
    forward_backward = run.training_client.forward_backward(reduced_batch(batch, config.loss_reduction), "cross_entropy")
    optim_step = run.training_client.optim_step(adam)
    metrics = {
        "epoch": run.plan.position(step)[0],
        "progress": (step + 1) / run.plan.total_steps,
        "learning_rate": learning_rate,
        "num_sequences": len(batch),
        "num_tokens": sum(d.model_input.length for d in batch),
        "num_loss_tokens": int(sum((datum_weights(d) > 0).sum() for d in batch)),
        **eval_metrics,
    }
    return Submitted(step, batch, forward_backward, optim_step, metrics)


async def _resolve(run: Run, submitted: Submitted) -> None:
    """Wait for a step's results and log its metrics line (with the final evaluation after the last step)."""
    output = await submitted.forward_backward
    optim = await submitted.optim_step
    metrics = dict(submitted.metrics)
    metrics["train_mean_nll"] = compute_mean_nll(
        [out["logprobs"].to_numpy() for out in output.loss_fn_outputs], [datum_weights(d) for d in submitted.batch])
    metrics.update(optim.metrics or {})
    now = time.monotonic()
    metrics["time/step"], run.last_resolved_at = now - run.last_resolved_at, now
    if submitted.step == run.plan.total_steps - 1:
        metrics.update(await _evaluate(run, run.evaluators + run.infrequent_evaluators, submitted.step))
    run.metrics_logger.log_metrics(metrics, submitted.step)


async def _resolve_all(run: Run, in_flight: deque[Submitted]) -> None:
    while in_flight:
        await _resolve(run, in_flight.popleft())


def _save(run: Run, next_step: int, name: str, final: bool = False) -> None:
    """Save weights + optimizer (and sampler weights); the row records the next step to run."""
    epoch, batch = run.plan.position(next_step)
    save_checkpoint(run.training_client, run.config.log_path, name, batch=batch, epoch=epoch, final=final)


if __name__ == "__main__":
    from recipes_lib.cli import run_recipe

    run_recipe(main, chz.Blueprint(Config))
