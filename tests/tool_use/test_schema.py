"""Argument schemas from signatures and docstrings: types, defaults, descriptions, and what is refused."""

from typing import Annotated, Literal

import pytest
from pydantic import Field

from tool_use import ToolDefinitionError, ToolResult, simple_tool_result, tool
from tool_use.schema import docstring_arguments, docstring_description


@tool
async def search(
    query: Annotated[str, "what to look for"],
    limit: Annotated[int, Field(ge=1, le=50, description="how many hits")] = 10,
    mode: Literal["exact", "fuzzy"] = "fuzzy",
    tags: list[str] | None = None,
    weight: float = 1.0,
) -> ToolResult:
    """Search the notes.

    Hits come best first.

    Args:
        query: overridden by the Annotated text.
        limit: overridden by the Field's description.
        weight (float): how much the
            title counts.

    Returns:
        the hits as JSON.
    """
    return simple_tool_result(query)


def test_the_spec_has_the_name_and_the_docstring_before_its_sections() -> None:
    spec = search.to_spec()
    assert spec["name"] == "search"
    assert spec["description"] == "Search the notes.\n\nHits come best first."


def test_types_defaults_and_required_arguments_come_from_the_signature() -> None:
    schema = search.parameters_schema
    assert schema["type"] == "object" and schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["query"] == {"type": "string", "description": "what to look for"}
    assert properties["limit"] == {"type": "integer", "default": 10, "minimum": 1, "maximum": 50,
                                   "description": "how many hits"}
    assert properties["mode"] == {"type": "string", "enum": ["exact", "fuzzy"], "default": "fuzzy"}
    assert properties["tags"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert properties["weight"] == {"type": "number", "default": 1.0, "description": "how much the title counts."}


def test_no_generated_titles_reach_the_model() -> None:
    assert "title" not in search.parameters_schema
    assert all("title" not in field for field in search.parameters_schema["properties"].values())


def test_a_method_tool_leaves_self_out_of_the_schema() -> None:
    class Notes:
        @tool
        def read(self, page: int) -> ToolResult:
            """Read a page."""
            return simple_tool_result(str(page))

    assert Notes().read.parameters_schema["properties"] == {"page": {"type": "integer"}}


def test_docstring_sections() -> None:
    doc = "Sum.\n\nArgs:\n    a: first\n    *rest: more\n      numbers\n\nRaises:\n    ValueError: never"
    assert docstring_description(doc) == "Sum."
    assert docstring_arguments(doc) == {"a": "first", "rest": "more numbers"}
    assert docstring_arguments("No sections here.") == {}


def _untyped(x):  # type: ignore[no-untyped-def]
    return simple_tool_result(x)


def _varargs(*numbers: int) -> ToolResult:
    return simple_tool_result("")


def _returns_text(x: int) -> str:
    return str(x)


def _misdocumented(x: int) -> ToolResult:
    """Do it.

    Args:
        y: a parameter that does not exist.
    """
    return simple_tool_result("")


@pytest.mark.parametrize(("fn", "message"), [
    (_untyped, "Parameter 'x' of tool '_untyped' has no type hint"),
    (_varargs, r"Tool '_varargs' has the parameter \*numbers: int; tools take named arguments only"),
    (_returns_text, "Tool '_returns_text' is annotated to return <class 'str'>; a tool returns a ToolResult"),
    (_misdocumented, r"The docstring of tool '_misdocumented' describes \['y'\], which are not parameters"),
], ids=["no type hint", "*args", "wrong return type", "docstring names a missing parameter"])
def test_functions_that_cannot_be_tools_are_refused_when_decorated(fn, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ToolDefinitionError, match=message):
        tool(fn)
