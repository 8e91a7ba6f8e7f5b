"""The tool env: a conversation in which the policy may call tools before it answers.

`AgentToolMessageEnv` is a `MessageEnv`; `build_agent_tool_env` wraps it in `EnvFromMessageEnv`, which
renders the conversation into tokens and parses each sampled turn, tool calls included (a renderer
with `supports_tool_calls`, such as `qwen3_instruct`). A turn goes:

    assistant message with tool calls -> every call runs at once, each under `ToolLimits`
                                      -> one `tool` message per call, in the order of the calls
    assistant message without calls   -> the episode ends; `reward_fn(conversation)` scores it

The episode also ends after `max_turns` assistant messages (their calls still run, so the reward
function sees their results) or when a result says `should_stop`. Only the end is rewarded. A call
that fails (unknown tool, bad arguments, the tool raised, it timed out) is an error result the policy
reads; the turn's metrics count them:

    tool/calls, tool/errors, tool/timeouts, tool/truncated   per turn
    tool/<tool name>/<key>                                   mean of the tools' own `ToolResult.metrics`
    turns, max_turns_reached                                 at the end of the episode

Tool messages reach the policy only in the next prompt, so in the datums `rl.data` builds they are
observation tokens: weight 0, advantage 0, never trained on.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from recipes_lib.exceptions import ConfigurationError
from renderers import Message, Renderer, ToolCall
from rl.message_env import EnvFromMessageEnv, MessageEnv, MessageStepResult
from rl.types import Metrics
from tool_use.tools import run_tool_calls, tools_by_name
from tool_use.types import Tool, ToolErrorKind, ToolLimits, ToolResult

RewardResult = tuple[float, dict[str, float]]
RewardFn = Callable[[list[Message]], Awaitable[RewardResult]]


@dataclass
class AgentToolMessageEnv(MessageEnv):
    """One episode of a tool-using conversation (see the module docstring); used once.

    Attributes:
        tools: the tools the policy may call (declare them in `initial_messages`, e.g. with
            `renderer.create_conversation_prefix_with_tools([t.to_spec() for t in tools])`).
        initial_messages: the conversation the policy answers first.
        max_turns: assistant messages before the episode ends.
        reward_fn: scores the final conversation: `(reward, metrics)`.
        limits: the time limit and output cap of every call.
    """

    tools: Sequence[Tool]
    initial_messages: list[Message]
    max_turns: int
    reward_fn: RewardFn
    limits: ToolLimits = field(default_factory=ToolLimits)
    history: list[Message] = field(default_factory=list)
    _turns: int = field(default=0, init=False)
    _offered: dict[str, Tool] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ConfigurationError(f"AgentToolMessageEnv needs max_turns >= 1; got {self.max_turns}.")
        self._offered = tools_by_name(self.tools)

    async def initial_observation(self) -> list[Message]:
        self.history = list(self.initial_messages)
        return list(self.history)

    async def step(self, message: Message) -> MessageStepResult:
        self._turns += 1
        self.history.append(message)
        calls = list(message.get("tool_calls") or [])
        results = await self._run(calls)
        for result in results:
            self.history.extend(result.messages)
        metrics = call_metrics(calls, results)
        out_of_turns = self._turns >= self.max_turns
        if calls and not out_of_turns and not any(result.should_stop for result in results):
            return MessageStepResult(0.0, False, list(self.history), metrics)
        reward, reward_metrics = await self.reward_fn(list(self.history))
        ending = {"turns": float(self._turns), "max_turns_reached": float(bool(calls) and out_of_turns)}
        return MessageStepResult(reward, True, list(self.history), {**metrics, **ending, **reward_metrics})

    async def _run(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Every call at once; the results in the order of the calls."""
        return await run_tool_calls(self._offered, calls, self.limits)


def call_metrics(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> Metrics:
    """A turn's counts of calls, errors, timeouts and cut outputs, and the tools' own metrics."""
    metrics: Metrics = {
        "tool/calls": float(len(calls)),
        "tool/errors": float(sum(result.error is not None for result in results)),
        "tool/timeouts": float(sum(result.error == ToolErrorKind.TIMEOUT for result in results)),
        "tool/truncated": float(sum(bool(result.metadata.get("truncated")) for result in results)),
    }
    reported: dict[str, list[float]] = {}
    for call, result in zip(calls, results, strict=True):
        for key, value in result.metrics.items():
            reported.setdefault(f"tool/{call.function.name}/{key}", []).append(float(value))
    return {**metrics, **{key: sum(values) / len(values) for key, values in reported.items()}}


def build_agent_tool_env(
    renderer: Renderer,
    tools: Sequence[Tool],
    initial_messages: list[Message],
    reward_fn: RewardFn,
    *,
    max_turns: int = 5,
    limits: ToolLimits | None = None,
    failed_parse_reward: float = -0.1,
    terminate_on_parse_error: bool = True,
    max_trajectory_tokens: int | None = None,
    context_overflow_reward: float = -0.1,
) -> EnvFromMessageEnv:
    """A token-level env over an `AgentToolMessageEnv`, ready for `rl.train`.

    Args:
        renderer: renders the conversation and parses tool calls; must support tool calls.
        failed_parse_reward, terminate_on_parse_error: what a turn that does not parse (cut off, or a
            malformed tool call) does; see `rl.message_env`.
        max_trajectory_tokens, context_overflow_reward: the context budget; see `rl.message_env`.

    Raises:
        ConfigurationError: the renderer cannot render tool calls.
        ToolDefinitionError: two tools share a name.
    """
    if not renderer.supports_tool_calls:
        raise ConfigurationError(
            f"The {renderer.name!r} renderer cannot render or parse tool calls, so a tool env cannot use it; "
            "use one whose supports_tool_calls is True (the qwen3, llama3 and chatml families, or "
            "hf_chat_template with a tool_call_format)."
        )
    message_env = AgentToolMessageEnv(tools=tools, initial_messages=initial_messages, max_turns=max_turns,
                                      reward_fn=reward_fn, limits=limits or ToolLimits())
    return EnvFromMessageEnv(renderer, message_env, failed_parse_reward=failed_parse_reward,
                             terminate_on_parse_error=terminate_on_parse_error,
                             max_trajectory_tokens=max_trajectory_tokens,
                             context_overflow_reward=context_overflow_reward)
