"""The evaluator interfaces (the cookbook's `evaluators`) and how the training loops run them on a
schedule (`evaluator_builders` / `eval_every`); `eval/` holds the evaluators themselves.

An evaluator is built once by its builder and called at each due step; it returns metrics whose
keys carry its own prefix (`test/nll`, `test/exact_match`, ...), logged as they are.

- `TrainingClientEvaluator` reads the training client (e.g. NLL on a held-out set via `forward`);
- `SamplingClientEvaluator` samples from a snapshot of the current weights (e.g. accuracy); one
  that keeps what the model wrote hands it over with `take_samples`, and the loops append it to
  the run's `samples.jsonl` (shown in `report.html`).
"""

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from recipes_lib.backends.protocols import SamplingClient, TrainingClient


class TrainingClientEvaluator(ABC):
    """Evaluates the weights of a training client without changing them."""

    @abstractmethod
    async def __call__(self, training_client: TrainingClient) -> dict[str, float]: ...


class SamplingClientEvaluator(ABC):
    """Evaluates a sampling client (an immutable snapshot of weights)."""

    @abstractmethod
    async def __call__(self, sampling_client: SamplingClient) -> dict[str, float]: ...

    def take_samples(self) -> list[dict[str, Any]]:
        """What the model wrote in the last call (`prompt`, `answer`, `reference`, `correct`, `evaluator`),
        handed over once; [] for an evaluator that keeps none."""
        return []


Evaluator = TrainingClientEvaluator | SamplingClientEvaluator
EvaluatorBuilder = Callable[[], Evaluator]
SamplingClientEvaluatorBuilder = Callable[[], SamplingClientEvaluator]


async def run_evaluators(
    evaluators: Sequence[Evaluator],
    training_client: TrainingClient,
    sampling_client: Callable[[], SamplingClient],
) -> dict[str, float]:
    """Run each evaluator on the current weights and merge their metrics.

    `sampling_client` is called at most once, only if a sampling evaluator needs a snapshot.
    """
    metrics: dict[str, float] = {}
    snapshot: SamplingClient | None = None
    for evaluator in evaluators:
        if isinstance(evaluator, SamplingClientEvaluator):
            snapshot = snapshot if snapshot is not None else sampling_client()
            metrics.update(await evaluator(snapshot))
        else:
            metrics.update(await evaluator(training_client))
    return metrics


async def run_evaluators_timed(
    evaluators: Sequence[Evaluator],
    training_client: TrainingClient,
    sampling_client: SamplingClient,
) -> dict[str, float]:
    """`run_evaluators` on one sampling snapshot, with its wall time as `time/eval`."""
    started = time.monotonic()
    metrics = await run_evaluators(evaluators, training_client, lambda: sampling_client)
    return {**metrics, "time/eval": time.monotonic() - started}


def take_samples(evaluators: Sequence[Evaluator], prefix: str = "") -> list[dict[str, Any]]:
    """The samples every sampling evaluator kept from its last call, their evaluator names prefixed."""
    samples = [sample for evaluator in evaluators if isinstance(evaluator, SamplingClientEvaluator)
               for sample in evaluator.take_samples()]
    return [{**sample, "evaluator": prefix + str(sample.get("evaluator", ""))} for sample in samples]
