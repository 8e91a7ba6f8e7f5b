"""Tool use: tools the policy can call, and the RL env in which it calls them (tinker-cookbook's names).

    types.py                   ToolInput, ToolResult, the Tool protocol, ToolLimits, ToolErrorKind
    schema.py                  a tool's argument schema from its signature and docstring (pydantic)
    tools.py                   @tool / FunctionTool, simple_tool_result, error_tool_result, handle_tool_call
    agent_tool_message_env.py  AgentToolMessageEnv (a MessageEnv) and build_agent_tool_env
    calculator.py              calculator: exact arithmetic, parsed with `ast`, never `eval`
    search.py                  SearchIndex (SQLite FTS5 over .txt/.md files) and SearchTool, its `search` tool
    python_runner.py           PythonRunner(limits).run_python: Python in a namespace sandbox (no network, no host files)

    @tool
    async def search(query: Annotated[str, "what to look for"]) -> ToolResult:
        '''Search the notes.'''
        return simple_tool_result(json.dumps(find(query)))

    env = build_agent_tool_env(renderer=renderer, tools=[search, calculator],
                               initial_messages=messages, reward_fn=grade, max_turns=5)
"""

from tool_use.agent_tool_message_env import AgentToolMessageEnv, RewardFn, build_agent_tool_env
from tool_use.calculator import calculator
from tool_use.python_runner import PythonRunner, SandboxLimits, run_sandboxed
from tool_use.search import SearchIndex, SearchTool
from tool_use.tools import FunctionTool, error_tool_result, handle_tool_call, simple_tool_result, tool
from tool_use.types import (
    Tool,
    ToolDefinitionError,
    ToolErrorKind,
    ToolInput,
    ToolLimits,
    ToolResult,
    ToolSpec,
)

__all__ = [
    "AgentToolMessageEnv",
    "FunctionTool",
    "PythonRunner",
    "SandboxLimits",
    "RewardFn",
    "SearchIndex",
    "SearchTool",
    "Tool",
    "ToolDefinitionError",
    "ToolErrorKind",
    "ToolInput",
    "ToolLimits",
    "ToolResult",
    "ToolSpec",
    "build_agent_tool_env",
    "calculator",
    "error_tool_result",
    "run_sandboxed",
    "handle_tool_call",
    "simple_tool_result",
    "tool",
]
