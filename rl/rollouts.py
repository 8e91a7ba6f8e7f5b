"""Running envs through a policy: one episode (`do_single_rollout`) or a whole group, concurrently.

All envs of a group sample at once, and so do all groups of a batch when the caller gathers them:
the local engine batches concurrent `sample` calls into one decode, and identical prompts share
their prefill.

An exception inside an env (`make_envs`, `initial_observation`, `step`, `compute_group_rewards`)
becomes a `RolloutError` naming the env class and method, chained to the original exception, so
its traceback is printed with it. Errors of the policy (the sampler) pass through unchanged.

Given a `seed`, a group's rollouts are reproducible: env `i` of the group samples with its own
copy of the policy seeded from `derive_seed(seed, i)`, whatever order the envs finish in.
"""

import asyncio
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

from recipes_lib.completers import SeedableTokenCompleter, TokenCompleter, derive_seed
from recipes_lib.exceptions import RecipesError
from rl.types import Env, EnvGroupBuilder, Trajectory, TrajectoryGroup, Transition

T = TypeVar("T")


class RolloutError(RecipesError):
    """An environment raised during a rollout; `__cause__` is the original exception."""

    def __init__(self, message: str, env_name: str, error_type: str):
        super().__init__(message)
        self.env_name = env_name
        self.error_type = error_type


async def env_call(owner: object, method: str, call: Awaitable[T]) -> T:
    """Await an env's `method`; an exception from it becomes a RolloutError naming the env."""
    try:
        return await call
    except RolloutError:
        raise
    except Exception as exc:  # re-raised with the env's name; the original stays chained as __cause__
        name = type(owner).__name__
        raise RolloutError(
            f"{name}.{method} raised {type(exc).__name__}: {exc}", env_name=name, error_type=type(exc).__name__
        ) from exc


async def do_single_rollout(policy: TokenCompleter, env: Env) -> Trajectory:
    """Run one episode: sample an action for each observation until the env says it is done."""
    ob, stop = await env_call(env, "initial_observation", env.initial_observation())
    transitions = []
    while True:
        action = await policy(ob, stop)
        result = await env_call(env, "step", env.step(action.tokens))
        transitions.append(Transition(ob, action, result.reward, result.episode_done, dict(result.metrics)))
        if result.episode_done:
            return Trajectory(transitions, final_ob=result.next_observation)
        ob, stop = result.next_observation, result.next_stop_condition


async def do_group_rollout(builder: EnvGroupBuilder, policy: TokenCompleter, seed: int | None = None
                           ) -> TrajectoryGroup:
    """Run every env of a group concurrently, then add the group's own rewards.

    With a `seed`, `policy` must be a `SeedableTokenCompleter`; env `i` samples from
    `derive_seed(seed, i)`.
    """
    envs = await env_call(builder, "make_envs", builder.make_envs())
    policies = [policy] * len(envs)
    if seed is not None:
        if not isinstance(policy, SeedableTokenCompleter):
            raise TypeError(f"A seeded rollout needs a policy with seeded(seed); {type(policy).__name__} has none.")
        policies = [policy.seeded(derive_seed(seed, i)) for i in range(len(envs))]
    trajectories_G = await gather_or_cancel(do_single_rollout(p, env) for p, env in zip(policies, envs, strict=True))
    group_rewards = await env_call(builder, "compute_group_rewards", builder.compute_group_rewards(trajectories_G))
    return TrajectoryGroup(
        trajectories_G=trajectories_G,
        final_rewards_G=[reward for reward, _ in group_rewards],
        metrics_G=[dict(metrics) for _, metrics in group_rewards],
    )


async def gather_or_cancel(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """`asyncio.gather`, except that the first failure cancels the others before it propagates."""
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
