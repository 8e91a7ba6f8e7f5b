"""The tool env: turns with tool calls, their metrics, the episode's end, and what trains (never tool output)."""

import asyncio
import json
import time
from typing import Annotated

import numpy as np
import pytest

from recipes_lib.exceptions import ConfigurationError
from renderers import Message, Renderer, ToolCall, get_renderer
from rl.data import trajectory_to_data
from rl.message_env import EnvFromMessageEnv
from rl.rollouts import do_single_rollout
from tests.rl.fakes import ScriptedCompleter
from tool_use import (
    AgentToolMessageEnv,
    ToolLimits,
    ToolResult,
    build_agent_tool_env,
    calculator,
    simple_tool_result,
    tool,
)

NOTES = {"paris": "Paris is the capital of France.", "rome": "Rome is the capital of Italy."}


@tool
async def search(query: Annotated[str, "Search query"]) -> ToolResult:
    """Search the notes."""
    hits = [text for key, text in NOTES.items() if key in query.lower()]
    return simple_tool_result(json.dumps(hits), metrics={"hits": float(len(hits))})


@tool
async def finish(answer: str) -> ToolResult:
    """Submit the final answer."""
    return simple_tool_result("submitted", should_stop=True)


@tool
def slow_lookup(key: str) -> ToolResult:
    """Look a key up, slowly (a plain function, so it runs in a thread)."""
    time.sleep(0.3)
    return simple_tool_result(NOTES.get(key, "unknown"))


async def says_paris(messages: list[Message]) -> tuple[float, dict[str, float]]:
    correct = float("Paris" in messages[-1]["content"])
    return correct, {"correct": correct}


def _assistant(*calls: ToolCall, content: str = "") -> Message:
    message = Message(role="assistant", content=content)
    if calls:
        message["tool_calls"] = list(calls)
    return message


def _env(max_turns: int = 3, limits: ToolLimits | None = None) -> AgentToolMessageEnv:
    tools = [search, finish, slow_lookup, calculator]
    question = [Message(role="user", content="What is the capital of France?")]
    return AgentToolMessageEnv(tools=tools, initial_messages=question, max_turns=max_turns, reward_fn=says_paris,
                               limits=limits or ToolLimits())


def test_the_cookbook_quick_example_runs_under_our_names(qwen3_instruct: Renderer) -> None:
    """`tinker_cookbook.tool_use`'s README example with `tinker_cookbook.` dropped, played by a scripted policy."""
    messages = [Message(role="user", content="What is the capital of France?")]
    env = build_agent_tool_env(renderer=qwen3_instruct, tools=[search], initial_messages=messages,
                               reward_fn=says_paris, max_turns=5)
    policy = ScriptedCompleter([_said(qwen3_instruct, _call_text("search", {"query": "paris"})),
                                _said(qwen3_instruct, "The capital is Paris.")])
    trajectory = asyncio.run(do_single_rollout(policy, env))
    assert [t.reward for t in trajectory.transitions] == [0.0, 1.0]
    assert trajectory.transitions[0].metrics["tool/search/hits"] == 1.0
    assert "Paris is the capital of France." in qwen3_instruct.decode(policy.prompts[1])


def test_a_turn_runs_its_calls_and_counts_them_and_their_errors() -> None:
    env = _env(limits=ToolLimits(timeout_s=0.1))
    asyncio.run(env.initial_observation())
    turn = _assistant(ToolCall.of("search", {"query": "paris"}), ToolCall.of("nope", {}),
                      ToolCall.of("calculator", {"expression": "1/0"}), ToolCall.of("slow_lookup", {"key": "rome"}),
                      ToolCall.of("search", {"q": "rome"}))
    result = asyncio.run(env.step(turn))
    assert not result.episode_done and result.reward == 0.0
    assert result.metrics == {"tool/calls": 5.0, "tool/errors": 4.0, "tool/timeouts": 1.0, "tool/truncated": 0.0,
                              "tool/search/hits": 1.0}
    replies = result.next_messages[-5:]
    assert [m["role"] for m in replies] == ["tool"] * 5
    assert [m["name"] for m in replies] == ["search", "nope", "calculator", "slow_lookup", "search"]


def test_calls_of_a_turn_run_at_once() -> None:
    env = _env()
    asyncio.run(env.initial_observation())
    turn = _assistant(*(ToolCall.of("slow_lookup", {"key": key}) for key in ("paris", "rome", "oslo")))
    start = time.monotonic()
    result = asyncio.run(env.step(turn))
    assert time.monotonic() - start < 0.75  # three 0.3 s calls overlapped
    assert [m["content"] for m in result.next_messages[-3:]] == [NOTES["paris"], NOTES["rome"], "unknown"]


def test_an_answer_without_calls_ends_the_episode_and_is_scored() -> None:
    env = _env()
    asyncio.run(env.initial_observation())
    asyncio.run(env.step(_assistant(ToolCall.of("search", {"query": "paris"}))))
    result = asyncio.run(env.step(_assistant(content="Paris.")))
    assert result.episode_done and result.reward == 1.0
    assert result.metrics["turns"] == 2.0 and result.metrics["max_turns_reached"] == 0.0
    assert result.metrics["correct"] == 1.0 and result.metrics["tool/calls"] == 0.0


def test_max_turns_ends_the_episode_after_running_the_last_calls() -> None:
    env = _env(max_turns=1)
    asyncio.run(env.initial_observation())
    result = asyncio.run(env.step(_assistant(ToolCall.of("search", {"query": "rome"}))))
    assert result.episode_done and result.reward == 0.0  # scored: the last message names Rome
    assert result.metrics["max_turns_reached"] == 1.0
    assert result.next_messages[-1] == {"role": "tool", "content": json.dumps([NOTES["rome"]]), "name": "search"}


def test_a_result_that_says_stop_ends_the_episode() -> None:
    env = _env()
    asyncio.run(env.initial_observation())
    result = asyncio.run(env.step(_assistant(ToolCall.of("finish", {"answer": "Paris"}), content="Paris")))
    assert result.episode_done and result.metrics["turns"] == 1.0


def test_a_renderer_that_cannot_render_tool_calls_is_refused(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match="The 'role_colon' renderer cannot render or parse tool calls"):
        build_agent_tool_env(get_renderer("role_colon", tiny_tokenizer), [search], [], says_paris)


def test_tool_output_tokens_carry_weight_0_and_advantage_0(qwen3_instruct: Renderer) -> None:
    """Both turns share one datum (qwen3_instruct prompts extend each other); only the sampled tokens train."""
    messages = [*qwen3_instruct.create_conversation_prefix_with_tools([calculator.to_spec()]),
                Message(role="user", content="What is 0.1 + 0.2?")]
    env = build_agent_tool_env(qwen3_instruct, [calculator], messages, says_paris)
    turns = [_said(qwen3_instruct, _call_text("calculator", {"expression": "0.1 + 0.2"})),
             _said(qwen3_instruct, "It is 0.3.")]
    trajectory = asyncio.run(do_single_rollout(ScriptedCompleter(turns), env))
    [(datum, mask)] = trajectory_to_data(trajectory, advantage=2.0)
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    advantages = datum.loss_fn_inputs["advantages"].to_numpy()
    assert mask.sum() == sum(len(turn) for turn in turns)
    np.testing.assert_array_equal(advantages, 2.0 * mask)
    response = _between(qwen3_instruct, targets, "<tool_response>", "</tool_response>")
    assert qwen3_instruct.decode(targets[response].tolist()) == "\n0.3\n"
    assert mask[response].sum() == 0 and advantages[response].sum() == 0


def test_build_agent_tool_env_returns_a_token_level_env(qwen3_instruct: Renderer) -> None:
    env = build_agent_tool_env(qwen3_instruct, [calculator], [], says_paris, max_turns=2,
                               limits=ToolLimits(timeout_s=1.0), failed_parse_reward=-0.5)
    assert isinstance(env, EnvFromMessageEnv) and env.failed_parse_reward == -0.5
    assert isinstance(env.message_env, AgentToolMessageEnv) and env.message_env.limits.timeout_s == 1.0


def _call_text(name: str, arguments: dict[str, str]) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def _said(renderer: Renderer, text: str) -> list[int]:
    return renderer.encode(text) + list(renderer.get_stop_sequences())  # type: ignore[arg-type]


def _between(renderer: Renderer, tokens: np.ndarray, open_tag: str, close_tag: str) -> slice:
    """The positions strictly between the (single-token) tags."""
    [open_id], [close_id] = renderer.encode(open_tag), renderer.encode(close_tag)
    start = int(np.flatnonzero(tokens == open_id)[0]) + 1
    return slice(start, int(np.flatnonzero(tokens == close_id)[0]))
