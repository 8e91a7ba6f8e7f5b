"""Direct Preference Optimization: the `Config` and the training loop.

    python -m preference.train_dpo log_path=/tmp/dpo model_name=HuggingFaceTB/SmolLM2-135M-Instruct \\
        dataset_builder.comparison_builder=preference.datasets:ComparisonBuilderFromJsonl \\
        dataset_builder.comparison_builder.train_path=pairs.jsonl

The reference policy is a frozen snapshot of the starting weights: a sampling client taken before
the first step, whose `compute_logprobs` gives each completion's reference log-likelihood without
gradients. Each step sends a batch of (chosen, rejected) pairs to `forward_backward_custom` with
the DPO loss (mean over pairs of -log sigmoid(beta * (chosen log-ratio - rejected log-ratio))): the
local engine runs it in one autograd pass, the hosted API as a forward plus a surrogate backward.
Metrics per step: dpo_loss, accuracy, margin, chosen_reward, rejected_reward, num_pairs,
num_tokens, learning_rate, progress, and `test/...` from the held-out pairs every `eval_every`.
"""

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chz
import numpy as np
import torch
from tinker import types

from preference.data import DPODatasetBuilder, PreferencePairDataset, pairs_to_datums
from preference.evaluation import DPOEvaluator, pair_logprobs
from preference.losses import dpo_loss, dpo_metrics, sequence_logprobs
from preference.reference import ReferenceScorer
from recipes_lib.backends.protocols import SamplingClient, ServiceClient, TrainingClient
from recipes_lib.checkpoints import CheckpointRecord, save_checkpoint
from recipes_lib.cli import run_recipe
from recipes_lib.config import check_positive
from recipes_lib.evaluators import Evaluator, run_evaluators
from recipes_lib.hyperparams import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, adam_params
from recipes_lib.lifecycle import eval_due, open_run, start_run
from recipes_lib.run_config import RunConfig
from recipes_lib.schedules import LRSchedule, lr_multiplier

logger = logging.getLogger(__name__)


@chz.chz
class Config(RunConfig):
    """A DPO run: the shared run settings (`RunConfig`) and these (`dataset_builder.batch_size=8`)."""

    dataset_builder: DPODatasetBuilder  # comparisons -> (chosen, rejected) pairs, batch_size pairs a step
    # DPO wants a lower rate than SFT (the Tinker docs suggest 1e-5 to 1e-6 for full fine-tuning).
    learning_rate: float = 1e-5
    lr_schedule: LRSchedule = "linear"  # decay of learning_rate over the run
    dpo_beta: float = 0.1  # strength of the pull toward the reference: larger = stay closer
    adam_beta1: float = ADAM_BETA1
    adam_beta2: float = ADAM_BETA2
    adam_eps: float = ADAM_EPS

    @chz.validate
    def _check(self) -> None:
        check_positive(dpo_beta=self.dpo_beta)

    @chz.init_property
    def resolved_dataset_builder(self) -> DPODatasetBuilder:
        """The dataset builder rendering with this run's model (and `renderer_name`, when set)."""
        builder = self.dataset_builder
        if builder.model_name_for_tokenizer is None:
            builder = chz.replace(builder, model_name_for_tokenizer=self.model_name)
        if self.renderer_name is not None:
            builder = chz.replace(builder, renderer_name=self.renderer_name)
        return builder


def dpo_loss_fn(reference_D: np.ndarray, beta: float) -> Any:
    """The custom loss for `forward_backward_custom` on a batch laid out [chosen_0, rejected_0, ...].

    `reference_D` holds the reference log-likelihood of each datum in the same order.
    """

    def loss_fn(data: Sequence[types.Datum], logprobs_D: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        if len(data) != len(reference_D):
            raise ValueError(f"the DPO loss was built for {len(reference_D)} sequences but got {len(data)}")
        weights_D = [datum.loss_fn_inputs["weights"].to_torch() for datum in data]
        policy_D = sequence_logprobs(logprobs_D, weights_D)
        logprobs = pair_logprobs(policy_D, torch.as_tensor(reference_D, dtype=policy_D.dtype))
        return dpo_loss(logprobs, beta), dpo_metrics(logprobs, beta)

    return loss_fn


def reference_client(service: ServiceClient, training_client: TrainingClient, config: Config,
                     resumed: bool) -> SamplingClient:
    """The frozen starting weights: a snapshot before training, or rebuilt from them on resume.

    A resumed client has already moved, so the reference comes from where the run started: the
    `load_checkpoint_path` weights, or the base model (a fresh LoRA adapter is exactly the base).
    """
    if not resumed:
        client: SamplingClient = training_client.save_weights_and_get_sampling_client().result()
        return client
    if config.load_checkpoint_path:
        return service.create_sampling_client(model_path=config.load_checkpoint_path)
    return service.create_sampling_client(base_model=config.model_name)


def train_step(training_client: TrainingClient, train_set: PreferencePairDataset, batch_index: int,
               reference: ReferenceScorer, config: Config, learning_rate: float) -> dict[str, float]:
    """One DPO update on batch `batch_index`; returns its metrics."""
    pairs = train_set.get_batch(batch_index)
    if not pairs:
        logger.warning("batch %d has no usable pairs (all ties or over-long); skipped", batch_index)
        return {"num_pairs": 0.0}
    datums = pairs_to_datums(pairs)
    loss_fn = dpo_loss_fn(reference(datums), config.dpo_beta)
    backward = training_client.forward_backward_custom(datums, loss_fn)
    step = training_client.optim_step(adam_params(learning_rate, config.adam_beta1, config.adam_beta2,
                                                  config.adam_eps))
    metrics = {k: float(v) for k, v in backward.result().metrics.items()}
    step.result()
    return {**metrics, "num_tokens": float(sum(d.model_input.length + 1 for d in datums))}


def build_evaluators(config: Config, test_set: PreferencePairDataset | None,
                     reference: ReferenceScorer) -> list[Evaluator]:
    evaluators = [builder() for builder in config.evaluator_builders]
    if test_set is not None:
        evaluators.insert(0, DPOEvaluator(test_set.all_pairs(), reference, config.dpo_beta))
    return evaluators


def evaluate(evaluators: Sequence[Evaluator], training_client: TrainingClient) -> dict[str, float]:
    if not evaluators:
        return {}
    return asyncio.run(run_evaluators(
        evaluators, training_client, lambda: training_client.save_weights_and_get_sampling_client().result()))


@dataclass
class _Run:
    """What each step needs: the config, the policy client, the data, the reference, the evaluators."""

    config: Config
    training_client: TrainingClient
    train_set: PreferencePairDataset
    reference: ReferenceScorer
    evaluators: list[Evaluator]
    total_steps: int


def main(config: Config) -> None:
    """Train the policy with DPO; resumes from `log_path/checkpoints.jsonl` when it has a state."""
    resume = start_run(config)
    train_set, test_set = config.resolved_dataset_builder()
    total_steps = len(train_set) * config.num_epochs
    total_steps = min(total_steps, config.max_steps) if config.max_steps is not None else total_steps
    started = open_run(config, resume, total_steps, len(train_set))
    if started is None:
        return
    training_client = started.training_client
    reference = ReferenceScorer(reference_client(started.service_client, training_client, config, resume is not None))
    run = _Run(config, training_client, train_set, reference, build_evaluators(config, test_set, reference),
               total_steps)
    try:
        for step in range(started.start_step, total_steps):
            started.metrics_logger.log_metrics(_run_step(run, step, first=step == started.start_step), step)
    finally:
        started.metrics_logger.close()


def _run_step(run: _Run, step: int, first: bool) -> dict[str, float]:
    """Evaluate if due (pre-step weights), train on the step's batch, checkpoint if due."""
    config, n_batches = run.config, len(run.train_set)
    epoch, batch_index = divmod(step, n_batches)
    if batch_index == 0 or first:
        run.train_set.set_epoch(seed=epoch)
    started = time.monotonic()
    metrics: dict[str, float] = {}
    if eval_due(config.eval_every, step, run.total_steps):
        metrics.update(evaluate(run.evaluators, run.training_client))  # pre-step weights
    learning_rate = config.learning_rate * lr_multiplier(config.lr_schedule, step, run.total_steps)
    metrics.update(train_step(run.training_client, run.train_set, batch_index, run.reference, config, learning_rate))
    metrics.update(learning_rate=learning_rate, progress=(step + 1) / run.total_steps, epoch=float(epoch),
                   **{"time/step": time.monotonic() - started})
    if step + 1 == run.total_steps:  # the final weights' results go into the last line
        metrics.update(evaluate(run.evaluators, run.training_client))
        _save(run.training_client, config, run.total_steps, n_batches, name="final", final=True)
    elif config.save_every > 0 and (step + 1) % config.save_every == 0:
        _save(run.training_client, config, step + 1, n_batches, name=f"{step + 1:06d}")
    return metrics


def _save(training_client: TrainingClient, config: Config, next_step: int, n_batches: int, name: str,
          final: bool = False) -> CheckpointRecord:
    epoch, batch = divmod(next_step, n_batches)
    return save_checkpoint(training_client, config.log_path, name, batch=batch, epoch=epoch, final=final)


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
