"""Seeded rollouts: each sample's seed comes from (seed, group, sample, turn), so a group rolled out
twice samples the same tokens whatever order its envs finish in, and other seeds sample others."""

import asyncio
from collections.abc import Awaitable

import numpy as np
import pytest
import tinker

from recipes_lib.completers import TinkerTokenCompleter, derive_seed
from rl.dataset import RepeatedEnvGroupBuilder
from rl.rollouts import do_group_rollout
from tests.rl.fakes import EchoEnv, ScriptedCompleter
from tests.rl.resume_envs import _Prompt


class SeedRecorder:
    """A sampling client that answers [3] and records every request's seed."""

    def __init__(self) -> None:
        self.seeds: list[int | None] = []

    def sample(self, prompt: tinker.types.ModelInput, num_samples: int,
               sampling_params: tinker.types.SamplingParams) -> Awaitable[tinker.types.SampleResponse]:
        self.seeds.append(sampling_params.seed)
        sequence = tinker.types.SampledSequence(stop_reason="stop", sequence_id="seq-0", tokens_np=np.array([3], dtype=np.int32),
                                                logprobs_np=np.array([-0.5], dtype=np.float32))
        return _resolved(tinker.types.SampleResponse(sequences=[sequence]))


async def _resolved(response: tinker.types.SampleResponse) -> tinker.types.SampleResponse:
    return response


PROMPT = tinker.types.ModelInput.from_ints([1, 2, 3])


def test_derive_seed_is_a_stable_31_bit_hash_of_its_parts() -> None:
    seeds = {derive_seed(0, step, group) for step in range(20) for group in range(20)}
    assert len(seeds) == 400 and all(0 <= s < 2**31 for s in seeds)
    assert derive_seed(0, 1, 2) == derive_seed(0, 1, 2) != derive_seed(0, 2, 1)
    assert derive_seed(7) == 1316523906  # pinned: a resumed run must derive what the first process did


def test_a_seeded_completer_numbers_its_calls_and_an_unseeded_one_sends_no_seed() -> None:
    client = SeedRecorder()
    seeded = TinkerTokenCompleter(client, max_tokens=2).seeded(11)
    for _ in range(3):
        asyncio.run(seeded(PROMPT, [0]))
    asyncio.run(TinkerTokenCompleter(client, max_tokens=2)(PROMPT, [0]))
    assert client.seeds == [derive_seed(11, 0), derive_seed(11, 1), derive_seed(11, 2), None]
    again = seeded.seeded(11)  # a fresh copy starts again at call 0
    asyncio.run(again(PROMPT, [0]))
    assert client.seeds[-1] == derive_seed(11, 0)


def test_a_seeded_group_gives_each_env_its_own_seed_for_each_turn() -> None:
    client = SeedRecorder()
    asyncio.run(do_group_rollout(RepeatedEnvGroupBuilder(EchoEnv, 2), TinkerTokenCompleter(client, 2), seed=5))
    expected = {derive_seed(derive_seed(5, env), turn) for env in range(2) for turn in range(2)}  # EchoEnv: 2 turns
    assert sorted(s for s in client.seeds if s is not None) == sorted(expected) and len(client.seeds) == 4


def test_a_seed_needs_a_policy_that_takes_one() -> None:
    with pytest.raises(TypeError, match="ScriptedCompleter"):
        asyncio.run(do_group_rollout(RepeatedEnvGroupBuilder(EchoEnv, 2), ScriptedCompleter([[1]]), seed=5))


def test_the_local_engine_samples_the_same_group_for_the_same_seed(service_client) -> None:  # type: ignore[no-untyped-def]
    sampler = service_client.create_sampling_client(base_model="recipes/tiny-llama")
    policy = TinkerTokenCompleter(sampler, max_tokens=5)
    builder = RepeatedEnvGroupBuilder(_Prompt(0, 0.0), 3)

    def tokens(seed: int) -> list[list[int]]:
        group = asyncio.run(do_group_rollout(builder, policy, seed=seed))
        return [[t for tr in traj.transitions for t in tr.ac.tokens] for traj in group.trajectories_G]

    first = tokens(1)
    assert tokens(1) == first
    assert len({tuple(sample) for sample in first}) == 3  # each env samples from its own seed
    assert tokens(2) != first
