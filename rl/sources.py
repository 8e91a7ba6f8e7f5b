"""Where a training step's groups come from: rolled out now (on-policy) or in the background (off-by-K).

Both sources yield `GroupOutcome`s in the order rollouts finish, so the loop can start training on
the first groups while others still sample (streaming minibatches).

- `OnPolicySource`: at step `i`, rolls out every group of `dataset.get_batch(i)` with the weights
  of step `i`.
- `OffPolicySource` (async RL): the groups of step `s` are rolled out in the background with the
  weights of step `s - max_steps_off_policy` (never older than the last checkpoint), while the
  loop trains the steps before `s`.

Every rollout is seeded from (run seed, step, group index, sample index), and which weights sample
which groups is fixed by the step numbers alone, never by timing; so a run is reproducible, and a
run resumed from a checkpoint samples exactly what the uninterrupted run sampled after it.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from recipes_lib.backends.protocols import SamplingClient
from recipes_lib.completers import TokenCompleter, derive_seed
from rl.rollouts import RolloutError, RolloutLimits, rollout_group
from rl.types import EnvGroupBuilder, RLDataset, TrajectoryGroup

logger = logging.getLogger(__name__)

PolicyFactory = Callable[[SamplingClient], TokenCompleter]


@dataclass(frozen=True)
class GroupOutcome:
    """One group's rollout: the group, or (when errors are tolerated) the error that stopped it.

    Attributes:
        index: the group's position in its step's batch, for a stable training order.
        tags: the builder's logging tags.
        sampler_step: the step whose weights sampled the group.
    """

    index: int
    builder: EnvGroupBuilder
    tags: list[str]
    group: TrajectoryGroup | None
    error: RolloutError | None
    sampler_step: int
    # Errors of rollouts the group recovered from (retried, or dropped under `min_successful`).
    recovered: tuple[RolloutError, ...] = ()


async def roll_out(
    index: int, builder: EnvGroupBuilder, policy: TokenCompleter, sampler_step: int, tolerate_errors: bool,
    seed: int | None = None, limits: RolloutLimits | None = None,
) -> GroupOutcome:
    """Roll out one group (sampling from `seed` when given); an env error (or an episode past its
    `limits`) is raised, or, if tolerated, logged and returned."""
    try:
        group, recovered = await rollout_group(builder, policy, seed, limits)
    except RolloutError as exc:
        if not tolerate_errors:
            raise
        logger.warning("Dropping a group of %s: %s", type(builder).__name__, exc, exc_info=exc)
        return GroupOutcome(index, builder, builder.logging_tags(), None, exc, sampler_step)
    for error in recovered:
        logger.warning("A rollout of %s failed and its group went on without it: %s", type(builder).__name__, error)
    return GroupOutcome(index, builder, builder.logging_tags(), group, None, sampler_step, tuple(recovered))


class GroupSource(Protocol):
    def set_policy(self, step: int, sampling_client: SamplingClient) -> None:
        """Sample with these weights from now on; they are the weights of step `step`."""

    def expected_groups(self, step: int) -> int:
        """How many groups `groups(step)` yields."""

    def groups(self, step: int) -> AsyncIterator[GroupOutcome]:
        """The groups to train on at `step`, in the order they finish."""

    def take_metrics(self) -> dict[str, float]:
        """Counters since the last call (e.g. stale groups discarded)."""

    async def close(self) -> None:
        """Stop any background sampling."""


class OnPolicySource:
    """Rolls out batch `i` of the dataset with the weights of step `i`, all groups concurrently."""

    def __init__(self, dataset: RLDataset, make_policy: PolicyFactory, tolerate_errors: bool, seed: int | None,
                 limits: RolloutLimits | None = None):
        self.dataset = dataset
        self.make_policy = make_policy
        self.tolerate_errors = tolerate_errors
        self.seed = seed
        self.limits = limits
        self._policy: TokenCompleter | None = None
        self._step = 0

    def set_policy(self, step: int, sampling_client: SamplingClient) -> None:
        self._policy, self._step = self.make_policy(sampling_client), step

    def expected_groups(self, step: int) -> int:
        return len(self.dataset.get_batch(step))

    def groups(self, step: int) -> AsyncIterator[GroupOutcome]:
        assert self._policy is not None and self._step == step, "set_policy(step, ...) must come first"
        return _as_finished(_start_rollouts(self.dataset.get_batch(step), self._policy, step, step,
                                            self.tolerate_errors, self.seed, self.limits))

    def take_metrics(self) -> dict[str, float]:
        return {}

    async def close(self) -> None:
        return None


class OffPolicySource:
    """Rolls out the groups of step `s` in the background with the weights of step
    `max(s - max_steps_off_policy, b)`, where `b` is the last checkpoint step at or before `s`.

    Step `s` trains on the `groups_per_batch` builders after those of step `s - 1` (in the order
    given). Its rollouts start as soon as the loop hands over the weights they use, so with
    K = `max_steps_off_policy` >= 1 the groups of up to K later steps sample while a step trains,
    each group at most K steps stale (exactly K away from the start and from checkpoints; K = 0 is
    on-policy, without overlap). A checkpoint is a barrier: the steps after it sample with the
    checkpoint's weights or newer, so a run resumed from it (which has no older weights) samples
    exactly what the uninterrupted run did. That costs one pipeline refill per `save_every` steps.
    """

    def __init__(self, builders: Sequence[EnvGroupBuilder], make_policy: PolicyFactory, groups_per_batch: int,
                 max_steps_off_policy: int, tolerate_errors: bool, seed: int | None, start_step: int = 0,
                 save_every: int = 0, limits: RolloutLimits | None = None):
        self.builders = list(builders)
        self.make_policy = make_policy
        self.groups_per_batch = groups_per_batch
        self.max_steps_off_policy = max_steps_off_policy
        self.tolerate_errors = tolerate_errors
        self.seed = seed
        self.start_step = start_step
        self.save_every = save_every
        self.limits = limits
        self.end_step = start_step + len(self.builders) // groups_per_batch
        self._next_launch = start_step
        self._tasks: dict[int, list[asyncio.Task[GroupOutcome]]] = {}

    def policy_step(self, step: int) -> int:
        """The step whose weights sample the groups of `step`."""
        checkpoint = step - step % self.save_every if self.save_every > 0 else 0
        return max(step - self.max_steps_off_policy, checkpoint, self.start_step)

    def set_policy(self, step: int, sampling_client: SamplingClient) -> None:
        policy = self.make_policy(sampling_client)
        while self._next_launch < self.end_step and self.policy_step(self._next_launch) <= step:
            self._launch(self._next_launch, policy, step)
            self._next_launch += 1

    def _launch(self, step: int, policy: TokenCompleter, sampler_step: int) -> None:
        first = (step - self.start_step) * self.groups_per_batch
        builders = self.builders[first:first + self.groups_per_batch]
        self._tasks[step] = _start_rollouts(builders, policy, step, sampler_step, self.tolerate_errors, self.seed,
                                            self.limits)

    def expected_groups(self, step: int) -> int:
        return self.groups_per_batch

    def groups(self, step: int) -> AsyncIterator[GroupOutcome]:
        assert step in self._tasks, f"the rollouts of step {step} were never started (set_policy first)"
        return _as_finished(self._tasks.pop(step))

    def take_metrics(self) -> dict[str, float]:
        return {}

    async def close(self) -> None:
        tasks = [task for step_tasks in self._tasks.values() for task in step_tasks]
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _start_rollouts(builders: Sequence[EnvGroupBuilder], policy: TokenCompleter, step: int, sampler_step: int,
                    tolerate_errors: bool, seed: int | None, limits: RolloutLimits | None
                    ) -> list["asyncio.Task[GroupOutcome]"]:
    """One task per group of `step`, sampled by `policy` (the weights of `sampler_step`)."""
    return [asyncio.ensure_future(roll_out(i, builder, policy, sampler_step, tolerate_errors,
                                           _group_seed(seed, step, i), limits))
            for i, builder in enumerate(builders)]


async def _as_finished(tasks: list["asyncio.Task[GroupOutcome]"]) -> AsyncIterator[GroupOutcome]:
    """The groups in the order they finish; the rest are cancelled when the caller stops early."""
    try:
        for finished in asyncio.as_completed(tasks):
            yield await finished
    finally:
        for task in tasks:
            task.cancel()


def _group_seed(seed: int | None, step: int, index: int) -> int | None:
    """The seed of group `index` of `step` (its samples derive theirs from it); None: unseeded."""
    return None if seed is None else derive_seed(seed, step, index)
