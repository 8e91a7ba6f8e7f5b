"""Token completers: policies to sample from at the token level (RL).

`TokenCompleter` maps a prompt and a stop condition to sampled tokens with their log-probs. The
message-level completers (conversation in, message out) need a renderer, so they live one layer up,
in `renderers.completers`. The Tinker implementations work over any sampling client whose `sample(prompt, num_samples, sampling_params)` returns an
awaitable of `tinker.types.SampleResponse`: the hosted SDK's and the local engine's alike.
"""

import dataclasses
import hashlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import tinker

from recipes_lib.exceptions import ConfigurationError

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
    sequence_id: str | None = None  # the sampler's id of this sequence (names it in provenance spans)

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


@runtime_checkable
class SeedableTokenCompleter(TokenCompleter, Protocol):
    """A TokenCompleter that can sample reproducibly: `seeded(seed)` is a fresh copy whose n-th
    call (0, 1, ...) samples with `derive_seed(seed, n)`. Give each episode its own copy, so the
    seeds of its turns do not depend on how concurrent episodes interleave."""

    def seeded(self, seed: int) -> TokenCompleter: ...


def derive_seed(*parts: int) -> int:
    """A sampling seed in [0, 2**31) determined by `parts` (e.g. run seed, step, group, sample).

    A hash, not arithmetic, so that neighbouring parts give unrelated seeds; stable across
    processes and Python versions (unlike `hash`).
    """
    digest = hashlib.blake2b(b",".join(str(int(p)).encode() for p in parts), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2**31)


@dataclass
class TinkerTokenCompleter:
    """A TokenCompleter over a sampling client.

    Attributes:
        max_tokens: the most tokens to sample; a per-call `max_tokens` can only lower it.
        context_window: if set, also caps the sample so prompt + sample fit in it.
        seed: if set, call n (0, 1, ...) of this completer samples with `derive_seed(seed, n)`, so
            the same calls in the same order sample the same tokens; None: a fresh seed per call.
    """

    sampling_client: SamplingClientLike
    max_tokens: int
    temperature: float = 1.0
    context_window: int | None = None
    seed: int | None = None
    _calls: int = dataclasses.field(default=0, init=False, repr=False, compare=False)

    def seeded(self, seed: int) -> "TinkerTokenCompleter":
        """A copy that samples from `seed` (its calls numbered from 0)."""
        return dataclasses.replace(self, seed=seed)

    async def __call__(
        self, model_input: tinker.types.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        seed = None if self.seed is None else derive_seed(self.seed, self._calls)
        self._calls += 1
        params = tinker.types.SamplingParams(
            max_tokens=self._token_budget(model_input, max_tokens), temperature=self.temperature, stop=stop,
            seed=seed,
        )
        response = await self.sampling_client.sample(
            prompt=model_input, num_samples=1, sampling_params=params
        )
        sequence = response.sequences[0]
        return TokensWithLogprobs(list(sequence.tokens), sequence.logprobs, sequence.stop_reason, sequence.sequence_id)

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
