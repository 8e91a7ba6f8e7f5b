"""A tool's argument schema, read from its Python signature and docstring.

Each parameter (a leading `self` aside) becomes a field of a pydantic model: its type hint is the
field's type, its default the field's default, and its description comes from, in this order,
`Annotated[T, "text"]`, `Annotated[T, Field(description=...)]`, or the docstring's Google-style
`Args:` section. The docstring's text before its first section is the tool's description. The model
validates the arguments a call brings, and its JSON schema (without pydantic's generated titles)
is what the model is shown:

    def add(a: int, b: Annotated[int, "the second term"] = 0) -> ToolResult:
        '''Add two integers.

        Args:
            a: the first term.
        '''
    -> description "Add two integers.", parameters {"type": "object", "properties": {
       "a": {"type": "integer", "description": "the first term."},
       "b": {"type": "integer", "description": "the second term", "default": 0}},
       "required": ["a"], "additionalProperties": false}
"""

import inspect
import re
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from tool_use.types import ToolDefinitionError

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns?|Yields?|Raises|Examples?|Notes?|Warnings?):\s*$")
_ARGUMENT = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_ARGUMENT_HEADINGS = ("Args:", "Arguments:", "Parameters:")


class _WithoutTitles(GenerateJsonSchema):
    """pydantic's schema without the titles it makes up from field names ("A", "Query")."""

    def field_title_should_be_set(self, schema: object) -> bool:
        return False


def parameters_model(fn: Callable[..., object], name: str) -> type[BaseModel]:
    """A pydantic model with one field per parameter of `fn`; extra arguments are refused.

    Raises:
        ToolDefinitionError: a parameter without a type hint, a `*args`/`**kwargs` parameter, a hint
            that cannot be resolved, or a docstring describing a parameter `fn` does not have.
    """
    parameters = [p for i, p in enumerate(inspect.signature(fn).parameters.values()) if i or p.name != "self"]
    hints = _type_hints(fn, name)
    described = docstring_arguments(inspect.getdoc(fn) or "")
    unknown = sorted(set(described) - {p.name for p in parameters})
    if unknown:
        raise ToolDefinitionError(f"The docstring of tool {name!r} describes {unknown}, which are not parameters.")
    fields: dict[str, Any] = {p.name: _field(p, hints, described.get(p.name), name) for p in parameters}
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of `model` for the model to read: an object schema without generated titles."""
    schema = model.model_json_schema(schema_generator=_WithoutTitles)
    schema.pop("title", None)
    return schema


def _type_hints(fn: Callable[..., object], name: str) -> dict[str, Any]:
    try:
        return get_type_hints(fn, include_extras=True)
    except NameError as exc:
        raise ToolDefinitionError(f"Tool {name!r} has a type hint that cannot be resolved: {exc}.") from None


def _field(parameter: inspect.Parameter, hints: dict[str, Any], docstring_text: str | None,
           name: str) -> tuple[Any, FieldInfo]:
    """(type, FieldInfo) of one parameter: its hint, default and description."""
    if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        raise ToolDefinitionError(f"Tool {name!r} has the parameter {parameter}; tools take named arguments only.")
    if parameter.name not in hints:
        raise ToolDefinitionError(
            f"Parameter {parameter.name!r} of tool {name!r} has no type hint; the argument schema is built "
            "from the hints."
        )
    hint, annotated_text = _split_description(hints[parameter.name])
    default = ... if parameter.default is inspect.Parameter.empty else parameter.default
    description = annotated_text or docstring_text
    return hint, Field(default, description=description) if description else Field(default)


def _split_description(hint: Any) -> tuple[Any, str | None]:
    """`Annotated[T, "text", *rest]` -> (`Annotated[T, *rest]`, "text"), else the description of a
    `Field(...)` in the metadata (which stays: pydantic merges it); other hints pass through."""
    if get_origin(hint) is not Annotated:
        return hint, None
    base, *metadata = get_args(hint)
    texts = [item for item in metadata if isinstance(item, str)]
    texts += [item.description for item in metadata if isinstance(item, FieldInfo) and item.description]
    kept = [item for item in metadata if not isinstance(item, str)]
    stripped = Annotated[(base, *kept)] if kept else base
    return stripped, texts[0] if texts else None


def docstring_description(docstring: str) -> str:
    """The text of a (cleaned) docstring before its first Google-style section (`Args:`, `Returns:`)."""
    lines = docstring.splitlines()
    end = next((i for i, line in enumerate(lines) if _SECTION.match(line.strip())), len(lines))
    return "\n".join(lines[:end]).strip()


def docstring_arguments(docstring: str) -> dict[str, str]:
    """Parameter name -> description from a (cleaned) docstring's `Args:` section.

    An entry is `name: text` or `name (type): text` at the section's indent; more deeply indented
    lines continue it.
    """
    found: dict[str, str] = {}
    current: str | None = None
    for line in _argument_lines(docstring.splitlines()):
        entry = None if line.startswith((" ", "\t")) else _ARGUMENT.match(line)
        if entry is not None:
            current = entry.group(1).lstrip("*")
            found[current] = entry.group(2).strip()
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def _argument_lines(lines: list[str]) -> list[str]:
    """The non-blank lines of the `Args:` section, its own indent removed ([] without one)."""
    heading = next((i for i, line in enumerate(lines) if line.strip() in _ARGUMENT_HEADINGS), None)
    if heading is None:
        return []
    outer = _indent(lines[heading])
    body: list[str] = []
    for line in lines[heading + 1 :]:
        if line.strip() and _indent(line) <= outer:
            break
        body += [line] if line.strip() else []
    inner = min((_indent(line) for line in body), default=0)
    return [line[inner:] for line in body]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def describe_arguments_error(error: ValidationError, tool_name: str, model: type[BaseModel]) -> str:
    """A failed validation as one clause per argument: which one, and what was expected."""
    expected = sorted(model.model_fields)
    clauses = []
    for item in error.errors():
        argument = ".".join(str(part) for part in item["loc"]) or "arguments"
        if item["type"] == "missing":
            clauses.append(f"'{argument}' is missing")
        elif item["type"] == "extra_forbidden":
            clauses.append(f"'{argument}' is not an argument of {tool_name} (its arguments: {expected})")
        else:
            clauses.append(f"'{argument}': {item['msg'].lower()}, got {item['input']!r}")
    return f"invalid arguments for {tool_name}: " + "; ".join(clauses)
