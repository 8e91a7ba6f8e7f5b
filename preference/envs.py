"""Pairwise-preference RL: each rollout is rewarded by how often a preference model prefers it
over the other rollouts of its group.

A group holds `group_size` single-turn `PreferenceEnv`s on one prompt. After sampling, the group's
`compute_group_rewards` runs a small tournament: every pair of completions is scored by the
`PreferenceModel` (in both orders by default, so a position bias cancels), each comparison splits
one point between its two sides by the score, and a rollout's reward is its share of the points it
played for: its win rate, in [0, 1]. Rewards are relative within a group, as RL's group-centred
advantages want. Plugs into `rl.train` through `PairwisePreferenceRLDatasetBuilder`.
"""

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import chz
from tinker import types

from preference.datasets import ComparisonDatasetBuilder
from preference.reward_model import PreferenceModel, PreferenceModelBuilder
from preference.types import Comparison, LabeledComparison
from recipes_lib.backends import make_service_client
from recipes_lib.backends.protocols import SamplingClient
from recipes_lib.evaluators import SamplingClientEvaluator
from recipes_lib.exceptions import ConfigurationError
from renderers import Message, Renderer
from renderers.completers import TinkerMessageCompleter
from rl.dataset import TaskDatasetBuilder, renderer_for
from rl.types import (
    Action,
    Env,
    EnvGroupBuilder,
    Metrics,
    Observation,
    RLDataset,
    StepResult,
    StopCondition,
    Trajectory,
)

TournamentPattern = Literal["all_pairs_both_ways", "all_pairs_one_way"]


def tournament_pairs(group_size: int, pattern: TournamentPattern) -> list[tuple[int, int]]:
    """The (A, B) index pairs to compare: every pair once, or in both orders."""
    one_way = list(itertools.combinations(range(group_size), 2))
    return one_way + [(b, a) for a, b in one_way] if pattern == "all_pairs_both_ways" else one_way


def win_rates(group_size: int, pairs: Sequence[tuple[int, int]], scores: Sequence[float]) -> list[float]:
    """Each player's share of the points it played for.

    A comparison (a, b) with score s in [-1, 1] (+1: B better) gives a (1 - s) / 2 and b (1 + s) / 2.
    A player in no comparison gets 0.5.
    """
    points, played = [0.0] * group_size, [0] * group_size
    for (a, b), score in zip(pairs, scores, strict=True):
        points[a] += (1 - score) / 2
        points[b] += (1 + score) / 2
        played[a] += 1
        played[b] += 1
    return [p / n if n else 0.5 for p, n in zip(points, played)]


class PreferenceEnv(Env):
    """One reply to a prompt; its reward comes from the group's tournament, not from the env."""

    def __init__(self, prompt_conversation: Sequence[Message], renderer: Renderer):
        self.prompt_conversation = list(prompt_conversation)
        self.renderer = renderer

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        return self.renderer.build_generation_prompt(self.prompt_conversation), self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        _, stopped = self.renderer.parse_response(action)
        return StepResult(reward=0.0, episode_done=True, next_observation=types.ModelInput.empty(),
                          next_stop_condition=self.renderer.get_stop_sequences(),
                          metrics={"truncated": float(not stopped)})


@dataclass(frozen=True)
class PairwisePreferenceGroupBuilder(EnvGroupBuilder):
    """`num_envs` replies to one prompt, rewarded by their win rate under `preference_model`."""

    prompt_conversation: list[Message]
    renderer: Renderer
    preference_model: PreferenceModel
    num_envs: int
    tournament: TournamentPattern = "all_pairs_both_ways"

    async def make_envs(self) -> Sequence[Env]:
        return [PreferenceEnv(self.prompt_conversation, self.renderer) for _ in range(self.num_envs)]

    async def compute_group_rewards(self, trajectories_G: Sequence[Trajectory]) -> list[tuple[float, Metrics]]:
        replies = [self._reply(trajectory) for trajectory in trajectories_G]
        pairs = tournament_pairs(len(replies), self.tournament)
        scores = await asyncio.gather(*(self.preference_model(
            Comparison(self.prompt_conversation, replies[a], replies[b])) for a, b in pairs))
        rates = win_rates(len(replies), pairs, scores)
        # Win rates average 0.5 in every group by construction; how decided the judge was is the signal.
        decided = sum(abs(score) for score in scores) / max(len(scores), 1)
        return [(rate, {"win_rate": rate, "judge_decisiveness": decided}) for rate in rates]

    def _reply(self, trajectory: Trajectory) -> list[Message]:
        message, _ = self.renderer.parse_response(trajectory.transitions[-1].ac.tokens)
        return [Message(role="assistant", content=message["content"])]

    def logging_tags(self) -> list[str]:
        return ["preference"]


class PromptGroupsDataset(RLDataset):
    """Consecutive batches of `batch_size` prompts, each a pairwise-preference group; a last partial
    batch is dropped."""

    def __init__(self, prompts: Sequence[list[Message]], renderer: Renderer, preference_model: PreferenceModel,
                 batch_size: int, group_size: int, tournament: TournamentPattern):
        if not 1 <= batch_size <= len(prompts):
            raise ConfigurationError(f"batch_size must be between 1 and the {len(prompts)} prompts; got {batch_size}.")
        self.prompts, self.batch_size = list(prompts), batch_size
        self._group = lambda prompt: PairwisePreferenceGroupBuilder(
            prompt, renderer, preference_model, group_size, tournament)

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range; the dataset has {len(self)} batches.")
        return [self._group(p) for p in self.prompts[index * self.batch_size : (index + 1) * self.batch_size]]

    def __len__(self) -> int:
        return len(self.prompts) // self.batch_size


def unique_prompts(comparisons: Sequence[LabeledComparison]) -> list[list[Message]]:
    """The distinct prompt conversations of `comparisons`, in first-seen order."""
    seen: dict[str, list[Message]] = {}
    for comparison in comparisons:
        prompt = comparison.comparison.prompt_conversation
        seen.setdefault(repr(prompt), prompt)
    return list(seen.values())


@chz.chz
class PairwisePreferenceRLDatasetBuilder(TaskDatasetBuilder):
    """RL on the prompts of a comparison dataset, rewarded by a trained preference model."""

    comparison_builder: ComparisonDatasetBuilder  # only its prompts are used (train split)
    preference_model_builder: PreferenceModelBuilder
    tournament: TournamentPattern = "all_pairs_both_ways"

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train, _ = self.comparison_builder()
        renderer = self.renderer()
        dataset = PromptGroupsDataset(unique_prompts(train), renderer, self.preference_model_builder(),
                                      self.batch_size, self.group_size, self.tournament)
        return dataset, None


class WinRateEvaluator(SamplingClientEvaluator):
    """`<name>/win_rate`: how often the preference model prefers the current policy's greedy reply
    over a fixed reference policy's (e.g. the SFT starting point), both orders averaged."""

    def __init__(self, prompts: Sequence[list[Message]], renderer: Renderer, reference: SamplingClient,
                 preference_model: PreferenceModel, max_tokens: int, name: str = "test"):
        self.prompts, self.renderer, self.name = list(prompts), renderer, name
        self.preference_model = preference_model
        self._completer = lambda client: TinkerMessageCompleter(client, renderer, max_tokens, temperature=0.0)
        self._reference_replies: list[Message] | None = None
        self._reference = reference

    async def __call__(self, sampling_client: SamplingClient) -> dict[str, float]:
        if self._reference_replies is None:  # the reference is fixed: answer once
            self._reference_replies = await self._replies(self._reference)
        replies = await self._replies(sampling_client)
        scores = await asyncio.gather(*(self._win(p, r, ref) for p, r, ref in
                                        zip(self.prompts, replies, self._reference_replies)))
        return {f"{self.name}/win_rate": sum(scores) / max(len(scores), 1)}

    async def _replies(self, client: SamplingClient) -> list[Message]:
        completer = self._completer(client)
        return list(await asyncio.gather(*(completer(prompt) for prompt in self.prompts)))

    async def _win(self, prompt: list[Message], reply: Message, reference: Message) -> float:
        ours, theirs = [Message(role="assistant", content=reply["content"])], [
            Message(role="assistant", content=reference["content"])]
        as_b, as_a = await asyncio.gather(self.preference_model(Comparison(prompt, theirs, ours)),
                                          self.preference_model(Comparison(prompt, ours, theirs)))
        return win_rates(2, [(1, 0), (0, 1)], [as_b, as_a])[0]


@chz.chz
class WinRateEvaluatorBuilder:
    """A `WinRateEvaluator` on the first `num_prompts` test prompts of a comparison dataset, against
    the policy at `reference_path` (None: the base model)."""

    comparison_builder: ComparisonDatasetBuilder
    preference_model_builder: PreferenceModelBuilder
    model_name: str  # the policy's base model
    reference_path: str | None = None
    renderer_name: str | None = None
    max_tokens: int = 64
    num_prompts: int = 32

    def __call__(self) -> WinRateEvaluator:
        _, test = self.comparison_builder()
        if not test:
            raise ConfigurationError(f"{type(self.comparison_builder).__name__} has no test split for the win rate.")
        service = make_service_client(self.preference_model_builder.backend)
        reference = (service.create_sampling_client(model_path=self.reference_path) if self.reference_path
                     else service.create_sampling_client(base_model=self.model_name))
        return WinRateEvaluator(unique_prompts(test)[: self.num_prompts],
                                renderer_for(self.model_name, self.renderer_name), reference,
                                self.preference_model_builder(), self.max_tokens)
