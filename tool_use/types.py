"""The records of tool use: what a tool receives (`ToolInput`), what it answers (`ToolResult`), what
every tool offers (`Tool`), and the limits every call runs under (`ToolLimits`).

A tool's answer is one or more `tool` messages for the model to read, plus numbers and notes for
us. Failures are answers too: an error result says what went wrong in its text and names the kind
of failure in `metadata["error"]` (a `ToolErrorKind`), which the tool env counts.
"""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import chz

from recipes_lib.exceptions import ConfigurationError, RecipesError
from renderers import Message, ToolSpec

__all__ = ["Tool", "ToolDefinitionError", "ToolErrorKind", "ToolInput", "ToolLimits", "ToolResult", "ToolSpec"]


class ToolDefinitionError(RecipesError, TypeError):
    """A function cannot be a tool as written (a parameter without a type, `*args`, a docstring that
    describes a parameter the function lacks), or a tool set is inconsistent (two tools, one name)."""


class ToolErrorKind(StrEnum):
    """Why a call produced an error result; stored as `ToolResult.metadata["error"]`."""

    UNKNOWN_TOOL = "unknown_tool"  # the model named a tool that is not offered
    BAD_ARGUMENTS = "bad_arguments"  # not a JSON object, or failed the tool's schema
    FAILED = "failed"  # the tool raised, or reported a failure itself
    TIMEOUT = "timeout"  # the tool ran past `ToolLimits.timeout_s`


@dataclass
class ToolInput:
    """One call's arguments, already parsed from JSON, and the id of the call they answer.

    `arguments` holds whatever JSON the model wrote (hence `Any`); a tool validates it before use.
    """

    arguments: dict[str, Any]
    call_id: str | None = None


@dataclass
class ToolResult:
    """A tool's answer.

    Attributes:
        messages: `tool` messages the model reads next (usually one).
        should_stop: True ends the episode after this turn.
        metrics: numbers the tool env averages into the step's metrics as `tool/<tool name>/<key>`.
        metadata: free-form notes for debugging (hence `Any`); `"error"` marks an error result.
    """

    messages: list[Message]
    should_stop: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def error(self) -> str | None:
        """The `ToolErrorKind` value of an error result; None for a success."""
        kind = self.metadata.get("error")
        return None if kind is None else str(kind)


@runtime_checkable
class Tool(Protocol):
    """Anything the model can call: a name, a description and a JSON schema of its arguments, and
    `run`. `@tool` makes one from a typed function; implement the protocol for anything else."""

    @property
    def name(self) -> str:
        """The name the model calls the tool by."""
        ...

    @property
    def description(self) -> str:
        """What the tool does, for the model."""
        ...

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema (an object schema) of the arguments."""
        ...

    async def run(self, input: ToolInput) -> ToolResult:
        """Answer one call; report bad arguments and failures as error results."""
        ...

    def to_spec(self) -> ToolSpec:
        """The tool as the renderers declare it to the model."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters_schema)


@chz.chz
class ToolLimits:
    """Bounds on every tool call; `handle_tool_call` enforces them for any `Tool`."""

    # Seconds a call may take before its answer is a timeout error: room for a network request,
    # while one hung tool cannot hold up a whole group of rollouts. 0: no limit.
    timeout_s: float = 30.0
    # Characters of a result message the model gets; the rest is cut with a note saying so. A runaway
    # output (a whole file, a long traceback) would otherwise fill the context window. 0: no cap.
    max_output_chars: int = 8000

    @chz.validate
    def _check(self) -> None:
        if not self.timeout_s >= 0 or self.max_output_chars < 0:
            raise ConfigurationError(
                f"ToolLimits needs timeout_s >= 0 and max_output_chars >= 0 (0: no limit); got "
                f"timeout_s={self.timeout_s}, max_output_chars={self.max_output_chars}."
            )
