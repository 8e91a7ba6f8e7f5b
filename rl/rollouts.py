"""Running envs through a policy: one episode (`do_single_rollout`) or a whole group, concurrently.

All envs of a group sample at once, and so do all groups of a batch when the caller gathers them:
the local engine batches concurrent `sample` calls into one decode, and identical prompts share
their prefill.

An exception inside an env (`make_envs`, `initial_observation`, `step`, `compute_group_rewards`)
becomes a `RolloutError` naming the env class and method, chained to the original exception, so
its traceback is printed with it. Errors of the policy (the sampler) pass through unchanged.

Given a `seed`, a group's rollouts are reproducible: env `i` of the group samples with its own
copy of the policy seeded from `derive_seed(seed, i)`, whatever order the envs finish in.

An episode is bounded (`RolloutLimits`): an env that never sets `episode_done` within `max_turns`
turns, an episode that runs past `timeout_s`, or a `step` that returns something other than a
`StepResult` is a `RolloutError` too (types `TurnLimit`, `Timeout`, `BadStepResult`), so it is
counted or stops the run with that message, and never hangs it. A failed rollout can rerun on a
fresh env (`max_retries`), and a group can be kept without its failed rollouts (`min_successful`).
"""

import asyncio
import numbers
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

import chz

from recipes_lib.completers import SeedableTokenCompleter, TokenCompleter, derive_seed
from recipes_lib.exceptions import RecipesError
from rl.types import Env, EnvGroupBuilder, StepResult, Trajectory, TrajectoryGroup, Transition

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


@chz.chz
class RolloutLimits:
    """Bounds on one episode, and what a failed one costs its group."""

    # Env steps an episode may take; one more without `episode_done` is a TurnLimit error.
    max_turns: int = 100
    # Seconds an episode may take, sampling included; 0: no limit.
    timeout_s: float = 1800.0
    # Failed rollouts of a group (an env error, an episode past a limit) rerun on a fresh env (the same
    # index of a new `make_envs()`), at most this many times per group; 0: none.
    max_retries: int = 0
    # Keep a group once this many of its rollouts succeeded, without the failed ones (None: every one
    # must; fewer than 2 would leave nothing to compare).
    min_successful: int | None = None

    @chz.validate
    def _check(self) -> None:
        if self.max_turns < 1 or not self.timeout_s >= 0:
            raise RecipesError(f"rollout_limits needs max_turns >= 1 and timeout_s >= 0 (0: none); got "
                               f"max_turns={self.max_turns}, timeout_s={self.timeout_s}.")
        if self.max_retries < 0 or (self.min_successful is not None and self.min_successful < 2):
            raise RecipesError(f"rollout_limits needs max_retries >= 0 and min_successful >= 2 (or None); got "
                               f"max_retries={self.max_retries}, min_successful={self.min_successful}.")


async def do_single_rollout(policy: TokenCompleter, env: Env, limits: RolloutLimits | None = None) -> Trajectory:
    """Run one episode: sample an action for each observation until the env says it is done."""
    limits = limits or RolloutLimits()
    if not limits.timeout_s:
        return await _episode(policy, env, limits.max_turns)
    try:
        async with asyncio.timeout(limits.timeout_s):  # in this task (wait_for would add one: other timing)
            return await _episode(policy, env, limits.max_turns)
    except TimeoutError:
        name = type(env).__name__
        raise RolloutError(f"{name}: the episode ran past rollout_limits.timeout_s={limits.timeout_s:g} s "
                           "(sampling included); raise it, or find where the env waits.",
                           env_name=name, error_type="Timeout") from None


async def _episode(policy: TokenCompleter, env: Env, max_turns: int) -> Trajectory:
    ob, stop = await env_call(env, "initial_observation", env.initial_observation())
    transitions = []
    for _ in range(max_turns):
        action = await policy(ob, stop)
        result = _checked_step_result(env, await env_call(env, "step", env.step(action.tokens)))
        transitions.append(Transition(ob, action, float(result.reward), result.episode_done, dict(result.metrics)))
        if result.episode_done:
            return Trajectory(transitions, final_ob=result.next_observation)
        ob, stop = result.next_observation, result.next_stop_condition
    name = type(env).__name__
    raise RolloutError(f"{name}.step did not end the episode (episode_done=True) within rollout_limits.max_turns="
                       f"{max_turns} turns; raise it if the env needs more, or check its stopping condition.",
                       env_name=name, error_type="TurnLimit")


def _checked_step_result(env: Env, result: object) -> StepResult:
    """`result` if it is a `StepResult` with a numeric reward and a bool `episode_done`, else a RolloutError."""
    name = type(env).__name__
    problem = None
    if not isinstance(result, StepResult):
        problem = f"returned {type(result).__name__} {result!r:.80}"
    elif isinstance(result.reward, bool) or not isinstance(result.reward, numbers.Real):
        problem = f"returned a reward of type {type(result.reward).__name__} ({result.reward!r:.40})"
    elif not isinstance(result.episode_done, bool):
        problem = f"returned episode_done of type {type(result.episode_done).__name__}"
    if problem is not None:
        raise RolloutError(f"{name}.step {problem}; it must return rl.types.StepResult(reward: float, "
                           "episode_done: bool, next_observation, next_stop_condition, metrics).",
                           env_name=name, error_type="BadStepResult")
    assert isinstance(result, StepResult)
    return result


async def do_group_rollout(builder: EnvGroupBuilder, policy: TokenCompleter, seed: int | None = None,
                           limits: RolloutLimits | None = None) -> TrajectoryGroup:
    """Run every env of a group concurrently, then add the group's own rewards.

    With a `seed`, `policy` must be a `SeedableTokenCompleter`; env `i` samples from
    `derive_seed(seed, i)` (its retry `k` from `derive_seed(seed, i, k)`).
    """
    group, _ = await rollout_group(builder, policy, seed, limits)
    return group


async def rollout_group(builder: EnvGroupBuilder, policy: TokenCompleter, seed: int | None = None,
                        limits: RolloutLimits | None = None) -> tuple[TrajectoryGroup, list[RolloutError]]:
    """`do_group_rollout`, also returning the rollout errors the group recovered from.

    A failed rollout reruns on a fresh env while `limits.max_retries` allows; once every env has
    succeeded or failed for good, the group is kept if at least `limits.min_successful` (default:
    all) succeeded, its rewards computed on those; otherwise the last error is raised. An error of
    the policy (the sampler) is never retried: it stops the group at once.
    """
    limits = limits or RolloutLimits()
    envs = list(await env_call(builder, "make_envs", builder.make_envs()))
    if seed is not None and not isinstance(policy, SeedableTokenCompleter):
        raise TypeError(f"A seeded rollout needs a policy with seeded(seed); {type(policy).__name__} has none.")

    def policy_for(index: int, attempt: int) -> TokenCompleter:
        if seed is None:
            return policy
        assert isinstance(policy, SeedableTokenCompleter)
        return policy.seeded(derive_seed(seed, index) if attempt == 0 else derive_seed(seed, index, attempt))

    if limits.max_retries == 0 and limits.min_successful is None:  # fail fast: the first error stops the group
        trajectories_G = await gather_or_cancel(do_single_rollout(policy_for(i, 0), env, limits)
                                                for i, env in enumerate(envs))
        return await _with_group_rewards(builder, trajectories_G), []
    finished, errors = await _rollouts_with_retries(builder, envs, policy_for, limits)
    needed = len(envs) if limits.min_successful is None else min(limits.min_successful, len(envs))
    if len(finished) < needed:
        last = errors[-1]
        raise RolloutError(f"{len(envs) - len(finished)} of {len(envs)} rollouts of the group failed after "
                           f"{limits.max_retries} retries (it needs {needed}); the last: {last}",
                           env_name=last.env_name, error_type=last.error_type) from last
    return await _with_group_rewards(builder, [finished[i] for i in sorted(finished)]), errors


async def _rollouts_with_retries(
    builder: EnvGroupBuilder, envs: list[Env], policy_for: Callable[[int, int], TokenCompleter], limits: RolloutLimits
) -> tuple[dict[int, Trajectory], list[RolloutError]]:
    """Each env's trajectory (by index) once it succeeds, rerunning failures on fresh envs while the
    group's retries last; and every error met."""
    running: dict[asyncio.Task[Trajectory], tuple[int, int]] = {}

    def launch(index: int, attempt: int, env: Env) -> None:
        running[asyncio.ensure_future(do_single_rollout(policy_for(index, attempt), env, limits))] = (index, attempt)

    for index, env in enumerate(envs):
        launch(index, 0, env)
    finished: dict[int, Trajectory] = {}
    errors: list[RolloutError] = []
    retries = limits.max_retries
    try:
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                index, attempt = running.pop(task)
                error = task.exception()
                if error is None:
                    finished[index] = task.result()
                elif not isinstance(error, RolloutError):
                    raise error
                else:
                    errors.append(error)
                    if retries > 0:
                        retries -= 1
                        fresh = await env_call(builder, "make_envs", builder.make_envs())
                        launch(index, attempt + 1, fresh[index])
    finally:
        for task in running:
            task.cancel()
    return finished, errors


async def _with_group_rewards(builder: EnvGroupBuilder, trajectories_G: list[Trajectory]) -> TrajectoryGroup:
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
