"""Tasks written in chat messages (`MessageEnv`), and the adapter that makes them token-level `Env`s.

A `MessageEnv` keeps its own conversation: it returns the messages the policy sees first, then, for
each assistant message, the reward and the whole conversation so far. `EnvFromMessageEnv` renders
those messages into prompts and parses sampled tokens back into messages, handling:

- parse errors (a reply cut off before the stop sequence, or malformed): the episode ends with
  `failed_parse_reward`, or, with `terminate_on_parse_error=False`, the best-effort message is
  passed on; each turn reports `parse_error` 0/1;
- over-long contexts: when the next prompt would exceed `max_trajectory_tokens`, the episode ends
  there, with `context_overflow_reward` added; each turn reports `context_overflow` 0/1;
- stop conditions: the renderer's, unless a step asks for others.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import tinker

from recipes_lib.exceptions import DataFormatError
from renderers import Message, Renderer
from rl.rollouts import env_call
from rl.types import Action, Env, Metrics, Observation, StepResult, StopCondition


@dataclass(frozen=True)
class MessageStepResult:
    """A `MessageEnv`'s answer to one assistant message.

    Attributes:
        next_messages: the whole conversation so far (including the assistant's message and any
            reply to it); the next prompt is rendered from it.
        next_stop_condition: None keeps the renderer's stop sequences.
    """

    reward: float
    episode_done: bool
    next_messages: list[Message]
    metrics: Metrics = field(default_factory=dict)
    next_stop_condition: StopCondition | None = None


class MessageEnv(ABC):
    """One episode of a task that speaks in messages; used once."""

    @abstractmethod
    async def initial_observation(self) -> list[Message]:
        """The conversation the policy answers first."""

    @abstractmethod
    async def step(self, message: Message) -> MessageStepResult:
        """Score the policy's message and say what comes next."""


class EnvFromMessageEnv(Env):
    """A token-level `Env` over a `MessageEnv` (see the module docstring for what it handles)."""

    def __init__(
        self,
        renderer: Renderer,
        message_env: MessageEnv,
        failed_parse_reward: float = -1.0,
        terminate_on_parse_error: bool = True,
        max_trajectory_tokens: int | None = None,
        context_overflow_reward: float = -0.1,
    ):
        self.renderer = renderer
        self.message_env = message_env
        self.failed_parse_reward = failed_parse_reward
        self.terminate_on_parse_error = terminate_on_parse_error
        self.max_trajectory_tokens = max_trajectory_tokens
        self.context_overflow_reward = context_overflow_reward

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        messages = await env_call(self.message_env, "initial_observation", self.message_env.initial_observation())
        prompt = self.renderer.build_generation_prompt(messages)
        if self.max_trajectory_tokens is not None and prompt.length > self.max_trajectory_tokens:
            raise DataFormatError(
                f"{type(self.message_env).__name__}'s first prompt has {prompt.length} tokens, more than "
                f"max_trajectory_tokens={self.max_trajectory_tokens}."
            )
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: Action) -> StepResult:
        message, parsed = self.renderer.parse_response(action)
        if not parsed and self.terminate_on_parse_error:
            return self._end(self.failed_parse_reward, {"parse_error": 1.0, "context_overflow": 0.0})
        result = await env_call(self.message_env, "step", self.message_env.step(message))
        metrics = {**result.metrics, "parse_error": float(not parsed), "context_overflow": 0.0}
        if result.episode_done:
            return self._end(result.reward, metrics)
        prompt = self.renderer.build_generation_prompt(result.next_messages)
        if self.max_trajectory_tokens is not None and prompt.length > self.max_trajectory_tokens:
            return self._end(result.reward + self.context_overflow_reward, {**metrics, "context_overflow": 1.0})
        stop = result.next_stop_condition or self.renderer.get_stop_sequences()
        return StepResult(result.reward, False, prompt, stop, metrics)

    def _end(self, reward: float, metrics: Metrics) -> StepResult:
        return StepResult(reward, True, tinker.types.ModelInput.empty(), self.renderer.get_stop_sequences(), metrics)
