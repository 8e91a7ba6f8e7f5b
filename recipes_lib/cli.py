"""Command-line helpers shared by every recipe: `key=value` parsing and the existing-log-dir check."""

import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

import chz
from chz.blueprint._entrypoint import EntrypointException, EntrypointHelpException

from recipes_lib.exceptions import ConfigurationError

T = TypeVar("T")
LogdirBehavior = Literal["ask", "resume", "delete", "raise"]


def config_from_argv(blueprint: chz.Blueprint[T], argv: Sequence[str] | None = None) -> T:
    """Build the config from `key=value` arguments; a bad key or value exits with chz's message.

    `--help` prints every key with its type and default and exits 0.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return blueprint.make_from_argv(args)
    except EntrypointHelpException as exc:
        print(exc)
        raise SystemExit(0) from None
    except EntrypointException as exc:
        print(f"error: {exc}{_did_you_mean(blueprint, args, str(exc))}", file=sys.stderr)
        raise SystemExit(2) from None


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


def check_log_dir(log_path: str | Path, behavior: LogdirBehavior) -> None:
    """Decide what to do when `log_path` already holds a run.

    `resume` continues from its last checkpoint, `delete` starts over, `raise` stops with an error,
    `ask` asks on a terminal (and, without one, stops with an error that names the options).
    """
    path = Path(log_path)
    if not path.exists() or not any(path.iterdir()):
        return
    if behavior == "ask":
        behavior = _ask(path)
    if behavior == "delete":
        shutil.rmtree(path)
    elif behavior == "raise":
        raise ConfigurationError(
            f"Log directory {path} already exists. Pass behavior_if_log_dir_exists=resume to continue it, "
            "=delete to start over, or a new log_path."
        )


def _ask(path: Path) -> LogdirBehavior:
    if not sys.stdin.isatty():
        raise ConfigurationError(
            f"Log directory {path} already exists and there is no terminal to ask. Pass "
            "behavior_if_log_dir_exists=resume (continue from its last checkpoint), =delete, or a new log_path."
        )
    while True:
        answer = input(f"Log directory {path} already exists. [resume, delete, exit]: ").strip().lower()
        if answer in ("resume", "delete"):
            return answer  # type: ignore[return-value]
        if answer == "exit":
            raise SystemExit(1)
