"""Hooks a pipeline built on the RL loop plugs into its training step (by default, none).

    hooks = TrainingHooks(shape_batch=my_shaper, reference_samplers={"reference": sampler})
    await rl.train.main_async(config, make_hooks=lambda service_client: hooks)

- `shape_batch` sees each minibatch once its group advantages are in its datums (a per-token
  `advantages` input, KL-to-base shaping included) and returns what is trained instead: new
  per-token advantages from scores the envs' rewards do not hold (e.g. another model's log-probs of
  the sampled tokens), extra losses, and metrics. With a shaper, groups of one sample are allowed:
  their group advantage is 0, and the shaper supplies the signal.
- `ExtraLoss`: a further `forward_backward` on the same weights, sent after the policy-gradient
  pass and before the same `optim_step`, so its gradient adds to the policy gradient's.
- `reference_samplers` are evaluated with the run's evaluators once, at step 0 of a fresh run,
  their metrics logged as `<name>/<metric>` (the level another model reaches on the same evaluation).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tinker import types

from recipes_lib.backends.protocols import SamplingClient, ServiceClient
from rl.data import TrainingBatch

OutputMetrics = Callable[[types.ForwardBackwardOutput], dict[str, float]]


@dataclass(frozen=True)
class ExtraLoss:
    """One more `forward_backward` before the step's `optim_step`.

    Attributes:
        data_D: its datums, in the format `loss_fn` reads (e.g. `target_tokens` and `weights`).
        loss_fn: the loss, e.g. `cross_entropy`.
        metrics: the step's metrics from the pass's output (e.g. its loss under a name of its own).
    """

    data_D: list[types.Datum]
    loss_fn: types.LossFnType
    metrics: OutputMetrics | None = None


@dataclass(frozen=True)
class ShapedBatch:
    """What a shaper makes of a minibatch.

    Attributes:
        batch: the datums the policy-gradient loss trains on, with their final advantages.
        metrics: numbers to log with the step (averaged over its minibatches).
        extra_losses: further passes before the same `optim_step`.
        policy_loss: False leaves out the policy-gradient pass (its advantages are all 0 by
            construction, so it would cost a pass and carry no gradient); its sampler-vs-trainer
            metrics are then not logged.
    """

    batch: TrainingBatch
    metrics: dict[str, float] = field(default_factory=dict)
    extra_losses: list[ExtraLoss] = field(default_factory=list)
    policy_loss: bool = True


class BatchShaper(Protocol):
    async def __call__(self, batch: TrainingBatch) -> ShapedBatch:
        """The minibatch as it is to be trained (see the module docstring)."""
        ...


@dataclass(frozen=True)
class TrainingHooks:
    """The hooks of one run; the RL loop without any is plain RL."""

    shape_batch: BatchShaper | None = None
    reference_samplers: Mapping[str, SamplingClient] = field(default_factory=dict)


# Builds a run's hooks once its service client exists (they may need clients of their own).
HooksFactory = Callable[[ServiceClient], TrainingHooks]


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over the rows that have it (a step's minibatches)."""
    keys = sorted({key for row in rows for key in row})
    return {key: sum(row[key] for row in rows if key in row) / sum(key in row for row in rows) for key in keys}
