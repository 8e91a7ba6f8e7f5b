"""Completers: policies to sample from, at the token level (RL) or the message level (evals, judges).

`TokenCompleter` maps a prompt and a stop condition to sampled tokens with their log-probs;
`MessageCompleter` maps a conversation to the next assistant message. The Tinker implementations
work over any sampling client whose `sample(prompt, num_samples, sampling_params)` returns an
awaitable of `tinker.types.SampleResponse`: the hosted SDK's and the local engine's alike.
"""

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

import tinker

from recipes_lib.exceptions import ConfigurationError
from renderers import Message, Renderer

logger = logging.getLogger(__name__)

StopCondition = list[str] | list[int]


class SamplingClientLike(Protocol):
    """What the completers need of a sampling client (tinker.SamplingClient or the local engine's)."""

    def sample(
        self, prompt: tinker.types.ModelInput, num_samples: int, sampling_params: tinker.types.SamplingParams
    ) -> Awaitable[tinker.types.SampleResponse]: ...


@dataclass
class TokensWithLogprobs:
    """Sampled tokens, their log-probs (shape (T,) like tokens) when returned, and why sampling stopped."""

    tokens: list[int]
    maybe_logprobs: list[float] | None
    stop_reason: tinker.types.StopReason = "stop"

    @property
    def logprobs(self) -> list[float]:
        """The log-probs; raises ValueError when the sampler returned none."""
        if self.maybe_logprobs is None:
            raise ValueError("These tokens were sampled without log-probs.")
        return self.maybe_logprobs


class TokenCompleter(Protocol):
    """A token-level policy, as RL rollouts use it."""

    async def __call__(
        self, model_input: tinker.types.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        """Sample one completion of `model_input` that ends at `stop` or after `max_tokens`."""
        ...


class MessageCompleter(Protocol):
    """A message-level policy: the next assistant message of a conversation."""

    async def __call__(self, messages: list[Message]) -> Message: ...


@dataclass
class TinkerTokenCompleter:
    """A TokenCompleter over a sampling client.

    Attributes:
        max_tokens: the most tokens to sample; a per-call `max_tokens` can only lower it.
        context_window: if set, also caps the sample so prompt + sample fit in it.
    """

    sampling_client: SamplingClientLike
    max_tokens: int
    temperature: float = 1.0
    context_window: int | None = None

    async def __call__(
        self, model_input: tinker.types.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        params = tinker.types.SamplingParams(
            max_tokens=self._token_budget(model_input, max_tokens), temperature=self.temperature, stop=stop
        )
        response = await self.sampling_client.sample(
            prompt=model_input, num_samples=1, sampling_params=params
        )
        sequence = response.sequences[0]
        return TokensWithLogprobs(list(sequence.tokens), sequence.logprobs, sequence.stop_reason)

    def _token_budget(self, model_input: tinker.types.ModelInput, max_tokens: int | None) -> int:
        """min(self.max_tokens, max_tokens, room left in the context window)."""
        budget = self.max_tokens if max_tokens is None else min(self.max_tokens, max_tokens)
        if self.context_window is None:
            return budget
        room = self.context_window - model_input.length
        if room <= 0:
            raise ConfigurationError(
                f"The prompt has {model_input.length} tokens, which fills the context window of "
                f"{self.context_window}; shorten the prompt or raise context_window."
            )
        return min(budget, room)


class TinkerMessageCompleter:
    """A MessageCompleter: render the conversation, sample with the renderer's stops, parse."""

    def __init__(
        self,
        sampling_client: SamplingClientLike,
        renderer: Renderer,
        max_tokens: int,
        stop_condition: StopCondition | None = None,
        temperature: float = 1.0,
    ) -> None:
        self.sampling_client = sampling_client
        self.renderer = renderer
        self.max_tokens = max_tokens
        self.stop_condition = stop_condition if stop_condition is not None else renderer.get_stop_sequences()
        self.temperature = temperature

    async def __call__(self, messages: list[Message]) -> Message:
        """The sampled assistant message (best effort when it is truncated or malformed)."""
        prompt = self.renderer.build_generation_prompt(messages)
        params = tinker.types.SamplingParams(
            max_tokens=self.max_tokens, temperature=self.temperature, stop=self.stop_condition
        )
        response = await self.sampling_client.sample(prompt=prompt, num_samples=1, sampling_params=params)
        message, ok = self.renderer.parse_response(response.sequences[0].tokens)
        if not ok:
            logger.warning(
                "Sampled message did not parse cleanly (truncated or malformed): %r", message["content"]
            )
        return message
