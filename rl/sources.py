"""Where a training step's groups come from: rolled out now (on-policy) or in the background (off-by-K).

Both sources yield `GroupOutcome`s in the order rollouts finish, so the loop can start training on
the first groups while others still sample (streaming minibatches).

- `OnPolicySource`: at step `i`, rolls out every group of `dataset.get_batch(i)` with the weights
  of step `i`.
- `OffPolicySource` (async RL): workers keep rolling out groups with the newest weights they have,
  while the loop trains; a step takes the next `groups_per_batch` finished groups, and a group
  sampled more than `max_steps_off_policy` steps before the step that would train on it is
  discarded and its problem sampled again.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from recipes_lib.backends.protocols import SamplingClient
from recipes_lib.completers import TokenCompleter
from rl.rollouts import RolloutError, do_group_rollout
from rl.types import EnvGroupBuilder, RLDataset, TrajectoryGroup

logger = logging.getLogger(__name__)

PolicyFactory = Callable[[SamplingClient], TokenCompleter]


@dataclass(frozen=True)
class GroupOutcome:
    """One group's rollout: the group, or (when errors are tolerated) the error that stopped it.

    Attributes:
        index: the group's position in its batch (on-policy), for a stable training order.
        tags: the builder's logging tags.
        sampler_step: the step whose weights sampled the group.
    """

    index: int
    builder: EnvGroupBuilder
    tags: list[str]
    group: TrajectoryGroup | None
    error: RolloutError | None
    sampler_step: int


async def roll_out(
    index: int, builder: EnvGroupBuilder, policy: TokenCompleter, sampler_step: int, tolerate_errors: bool
) -> GroupOutcome:
    """Roll out one group; an env error is raised, or, if tolerated, logged and returned."""
    try:
        group = await do_group_rollout(builder, policy)
    except RolloutError as exc:
        if not tolerate_errors:
            raise
        logger.warning("Dropping a group of %s: %s", type(builder).__name__, exc, exc_info=exc)
        return GroupOutcome(index, builder, builder.logging_tags(), None, exc, sampler_step)
    return GroupOutcome(index, builder, builder.logging_tags(), group, None, sampler_step)


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

    def __init__(self, dataset: RLDataset, make_policy: PolicyFactory, tolerate_errors: bool):
        self.dataset = dataset
        self.make_policy = make_policy
        self.tolerate_errors = tolerate_errors
        self._policy: TokenCompleter | None = None
        self._step = 0

    def set_policy(self, step: int, sampling_client: SamplingClient) -> None:
        self._policy, self._step = self.make_policy(sampling_client), step

    def expected_groups(self, step: int) -> int:
        return len(self.dataset.get_batch(step))

    async def groups(self, step: int) -> AsyncIterator[GroupOutcome]:
        assert self._policy is not None and self._step == step, "set_policy(step, ...) must come first"
        builders = self.dataset.get_batch(step)
        tasks = [asyncio.ensure_future(roll_out(i, b, self._policy, step, self.tolerate_errors))
                 for i, b in enumerate(builders)]
        try:
            for finished in asyncio.as_completed(tasks):
                yield await finished
        finally:
            for task in tasks:
                task.cancel()

    def take_metrics(self) -> dict[str, float]:
        return {}

    async def close(self) -> None:
        return None


class OffPolicySource:
    """Samples groups in the background with the newest weights, at most `max_steps_off_policy` stale.

    `groups_per_batch` workers sample concurrently, and at most `groups_per_batch *
    max(max_steps_off_policy, 1)` groups are in flight or waiting: a group then waits at most that
    many steps, so few are discarded as stale (the first version, with one batch more, discarded
    a quarter of its groups).
    """

    def __init__(self, builders: Sequence[EnvGroupBuilder], make_policy: PolicyFactory, groups_per_batch: int,
                 max_steps_off_policy: int, tolerate_errors: bool):
        self.make_policy = make_policy
        self.groups_per_batch = groups_per_batch
        self.max_steps_off_policy = max_steps_off_policy
        self.tolerate_errors = tolerate_errors
        self._pending: asyncio.Queue[EnvGroupBuilder] = asyncio.Queue()
        for builder in builders:
            self._pending.put_nowait(builder)
        self._finished: asyncio.Queue[GroupOutcome | BaseException] = asyncio.Queue()
        self._room = asyncio.Semaphore(groups_per_batch * max(max_steps_off_policy, 1))
        self._workers: list[asyncio.Task[None]] = []
        self._policy: TokenCompleter | None = None
        self._step = 0
        self._discarded = 0

    def set_policy(self, step: int, sampling_client: SamplingClient) -> None:
        self._policy, self._step = self.make_policy(sampling_client), step
        if not self._workers:
            self._workers = [asyncio.ensure_future(self._work()) for _ in range(self.groups_per_batch)]

    def expected_groups(self, step: int) -> int:
        return self.groups_per_batch

    async def _work(self) -> None:
        try:
            while True:
                builder = await self._pending.get()
                await self._room.acquire()
                assert self._policy is not None
                outcome = await roll_out(-1, builder, self._policy, self._step, self.tolerate_errors)
                self._finished.put_nowait(outcome)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the training loop, which re-raises it
            self._finished.put_nowait(exc)

    async def groups(self, step: int) -> AsyncIterator[GroupOutcome]:
        taken = 0
        while taken < self.groups_per_batch:
            item = await self._finished.get()
            if isinstance(item, BaseException):
                raise item
            self._room.release()
            if step - item.sampler_step > self.max_steps_off_policy:
                self._discarded += 1
                self._pending.put_nowait(item.builder)
                continue
            taken += 1
            yield item

    def take_metrics(self) -> dict[str, float]:
        metrics = {"async/stale_groups_discarded": float(self._discarded)}
        self._discarded = 0
        return metrics

    async def close(self) -> None:
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
