"""A command's config from `key=value` arguments, with one line for each kind of mistake: an unknown
key (with the keys it may have meant), a value that is not of its key's type (with what the key is
for), a bare word, a config's own check; and `one_line_errors` for the mistakes found while it runs.

The engine's commands (`python -m local_tinker.server`, `python -m local_tinker.bench`) use it, and
the cookbook's recipes through `recipes_lib.argv`."""

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import TypeVar

import chz
from chz.blueprint import (
    ConstructionException,
    EntrypointHelpException,
    ExtraneousBlueprintArg,
    InvalidBlueprintArg,
    MissingBlueprintArg,
)

from local_tinker.errors import RecipesError

T = TypeVar("T")


# chz's public names for a bad command line: every exception `Blueprint.make_from_argv` raises for
# one (their common base, EntrypointException, is not exported from `chz.blueprint`).
CHZ_ARGUMENT_ERRORS = (ExtraneousBlueprintArg, InvalidBlueprintArg, MissingBlueprintArg, ConstructionException)


def config_from_argv(blueprint: chz.Blueprint[T], argv: Sequence[str] | None = None) -> T:
    """Build the config from `key=value` arguments; a bad key or value exits with chz's message.

    `--help` prints every key with its type and default and exits 0.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    bare = [arg for arg in args if "=" not in arg and arg not in ("--help", "-h")]
    if bare:
        print(f"error: arguments take the form key=value; got {bare[0]!r} (see --help for the keys)",
              file=sys.stderr)
        raise SystemExit(2)
    try:
        return blueprint.clone().make_from_argv(args)  # a clone: chz applies the arguments to the blueprint
    except EntrypointHelpException as exc:
        print(exc)
        raise SystemExit(0) from None
    except CHZ_ARGUMENT_ERRORS as exc:
        message = (_invalid_value(blueprint, args, str(exc))
                   or _unknown_key(str(exc), _did_you_mean(blueprint, args, str(exc)))
                   or f"{exc}{_did_you_mean(blueprint, args, str(exc))}")
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    except RecipesError as exc:  # a config's own check (@chz.validate) refused a value
        if debug_tracebacks():
            raise
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """A user's mistake (a `RecipesError`) prints `error: <message>` and exits 1; Ctrl-C exits 130.
    Anything else is a bug and keeps its traceback (as does everything with `RECIPES_DEBUG=1`)."""
    if debug_tracebacks():
        yield
        return
    try:
        yield
    except KeyboardInterrupt:
        print("\ninterrupted.", file=sys.stderr)
        raise SystemExit(130) from None
    except RecipesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def debug_tracebacks() -> bool:
    """`RECIPES_DEBUG=1`: a user's mistake shows its traceback instead of one line."""
    return os.environ.get("RECIPES_DEBUG", "").lower() in ("1", "true", "yes")


_EXPECTED = {"int": "a whole number", "int | None": "a whole number (or None)", "float": "a number",
             "float | None": "a number (or None)", "bool": "true or false", "str": "a string"}


def _invalid_value(blueprint: chz.Blueprint[T], args: list[str], message: str) -> str | None:
    """chz's several paragraphs for a value that is not of its key's type, as one line: the key, the
    value, what was expected, and what the key is for (its `--help` text, if it has one)."""
    given = re.search(r"Could not interpret argument '(.*)' provided for param '([^']+)'", message)
    if given is None:
        return None
    value, key = given.groups()
    unknown_name = re.search(r"\S+=\S+ is not one of [^\n]*", message)  # a name table's own message
    if unknown_name is not None:
        return unknown_name.group(0).rstrip(".") + "."
    cast = re.search(r"Could not cast '.*' to (.+)", message)
    wanted = cast.group(1).strip() if cast else ""
    literal = re.fullmatch(r"Literal\[(.*)\]", wanted)
    expected = (f"one of {literal.group(1)}" if literal
                else _EXPECTED.get(wanted, f"a value of type {wanted}" if wanted else "another value"))
    columns = next((re.split(r"\s{2,}", line.strip()) for line in _help_lines(blueprint, args, key)), [])
    doc = columns[3] if len(columns) > 3 else ""  # a help line: key, type, value, then what the key is for
    return f"{key}={value} is not valid: expected {expected}." + (f" {doc}" if doc else "")


def _unknown_key(message: str, our_hint: str) -> str | None:
    """chz's "Extraneous argument 'x' to Blueprint for Config" as what it means to a user, with chz's
    suggestion ("Did you mean 'learning_rate'?") or else ours (`_did_you_mean`)."""
    unknown = re.search(r"Extraneous argument '([^']+)'", message)
    if unknown is None:
        return None
    suggestion = re.search(r"Did you mean (.+?)\?", message)
    hint = f" Did you mean {suggestion.group(1)}?" if suggestion else f" {our_hint.strip()}" if our_hint else ""
    return f"{unknown.group(1)} is not a key of this command.{hint} --help lists every key."


def _help_lines(blueprint: chz.Blueprint[T], args: list[str], key: str) -> list[str]:
    others = [arg for arg in args if arg.split("=", 1)[0] != key]
    try:
        blueprint.make_from_argv([*others, "--help"])
    except EntrypointHelpException as help_text:
        return [line for line in str(help_text).splitlines() if line.split()[:1] == [key]]
    except Exception:  # noqa: BLE001 - only context for the message
        return []
    return []


def _did_you_mean(blueprint: chz.Blueprint[T], args: list[str], message: str) -> str:
    """For an unknown `a.b.leaf` key, the valid keys under `a.b` that end in `.leaf`, as a hint.

    (`dataset_builder.batch_size=4` -> `dataset_builder.common_config.batch_size`.)
    """
    unknown = re.search(r"Extraneous argument '([^']+)'", message)
    if unknown is None:
        return ""
    key = unknown.group(1)
    ancestor, _, leaf = key.rpartition(".")
    others = [arg for arg in args if arg.split("=", 1)[0] != key]
    try:
        blueprint.make_from_argv([*others, "--help"])
    except EntrypointHelpException as help_text:
        keys = [line.split()[0] for line in str(help_text).splitlines() if line.startswith("  ") and line.strip()]
    except Exception:  # noqa: BLE001 - only a hint; the original error is what matters
        return ""
    else:
        return ""
    close = [k for k in keys if k.endswith(f".{leaf}") and k.startswith(ancestor) and k != key]
    return f"\nDid you mean: {', '.join(close)}?" if close else ""
