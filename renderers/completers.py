"""Message completers: a conversation in, the next assistant message out (evals, judges, chat envs).

`TinkerMessageCompleter` renders the conversation, samples with the renderer's stop sequences over
any sampling client (`recipes_lib.completers.SamplingClientLike`: the hosted SDK's and the local
engine's alike) and parses the reply. The token-level completers (RL policies) need no renderer and
live below, in `recipes_lib.completers`.
"""

import logging
from typing import Protocol

import tinker

from recipes_lib.completers import SamplingClientLike, StopCondition
from renderers.base import Message, Renderer

logger = logging.getLogger(__name__)


class MessageCompleter(Protocol):
    """A message-level policy: the next assistant message of a conversation."""

    async def __call__(self, messages: list[Message]) -> Message: ...


class TinkerMessageCompleter:
    """A MessageCompleter: render the conversation, sample with the renderer's stops, parse."""

    def __init__(
        self,
        sampling_client: SamplingClientLike,
        renderer: Renderer,
        max_tokens: int,
        stop_condition: StopCondition | None = None,
        temperature: float = 1.0,
        warn_if_unparsed: bool = True,
    ) -> None:
        """`warn_if_unparsed=False` for callers that count truncated or malformed replies themselves."""
        self.sampling_client = sampling_client
        self.renderer = renderer
        self.max_tokens = max_tokens
        self.stop_condition = stop_condition if stop_condition is not None else renderer.get_stop_sequences()
        self.temperature = temperature
        self.warn_if_unparsed = warn_if_unparsed

    async def __call__(self, messages: list[Message]) -> Message:
        """The sampled assistant message (best effort when it is truncated or malformed)."""
        prompt = self.renderer.build_generation_prompt(messages)
        params = tinker.types.SamplingParams(
            max_tokens=self.max_tokens, temperature=self.temperature, stop=self.stop_condition
        )
        response = await self.sampling_client.sample(prompt=prompt, num_samples=1, sampling_params=params)
        message, ok = self.renderer.parse_response(response.sequences[0].tokens)
        if not ok and self.warn_if_unparsed:
            logger.warning(
                "Sampled message did not parse cleanly (truncated or malformed): %r", message["content"]
            )
        return message
