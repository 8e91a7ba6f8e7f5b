"""A recipe's command line: `run_recipe` builds the config from `key=value` arguments
(`recipes_lib.argv`) and runs the recipe's `main` on it, turning each user mistake into one message
and a non-zero exit, with where the run can be continued from."""

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import chz
import tinker

from recipes_lib.argv import config_from_argv, debug_tracebacks
from recipes_lib.backends import run_with_engine_on_main_thread
from recipes_lib.backends.hosted import server_gone_raises
from recipes_lib.checkpoints import last_resumable
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import BackendUnavailable, RecipesError
from recipes_lib.machine_errors import machine_error
from recipes_lib.run_lock import release_all

T = TypeVar("T")


def run_recipe(main: Callable[[T], Any], blueprint: chz.Blueprint[T], argv: Sequence[str] | None = None) -> None:
    """A recipe's `__main__`: build the config from `key=value` arguments and run `main` on it.

    A user's mistake (a `RecipesError`: bad value, missing file, wrong combination) prints one
    line, `error: <message>`, and exits 1; Ctrl-C prints where the run can be resumed from and
    exits 130. Set `RECIPES_DEBUG=1` to see the traceback instead. Any other exception is a bug
    and keeps its traceback.
    """
    config = config_from_argv(blueprint, argv)
    with user_errors(config):
        if getattr(config, "backend", BackendConfig()).kind == "local":
            run_with_engine_on_main_thread(lambda: main(config))  # the local engine computes on this (main) thread
        else:
            main(config)  # a remote API: no engine here, and Ctrl-C reaches the recipe directly


@contextlib.contextmanager
def user_errors(config: Any = None) -> Iterator[None]:
    """Turn a user's mistake into one message and a non-zero exit (see `run_recipe`)."""
    if debug_tracebacks():
        yield
        return
    try:
        try:
            with server_gone_raises():
                yield
        except BaseException:
            release_all()  # a run stopped before it wrote anything leaves no folder
            raise
    except KeyboardInterrupt:
        print(f"\ninterrupted. {_resume_hint(config)}", file=sys.stderr)
        raise SystemExit(130) from None
    except BackendUnavailable as exc:
        print(f"error: {exc} {_resume_hint(config)}", file=sys.stderr)
        raise SystemExit(1) from None
    except RecipesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except tinker.APIConnectionError as exc:
        print(f"error: cannot reach the Tinker API ({exc}); check backend.base_url / TINKER_BASE_URL.",
              file=sys.stderr)
        raise SystemExit(1) from None
    except tinker.APIStatusError as exc:
        if exc.status_code >= 500:
            raise
        print(f"error: the Tinker API refused the request ({exc.status_code}): {exc.message}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as exc:  # noqa: BLE001 - re-raised unless the machine caused it (a full disk, ...)
        message = machine_error(exc, config)
        if message is None:
            raise
        print(f"error: {message} {_resume_hint(config)}", file=sys.stderr)
        raise SystemExit(1) from None


def _resume_hint(config: Any) -> str:
    log_path = getattr(config, "log_path", None)
    if not log_path:
        return "Nothing was saved."
    try:
        last = last_resumable(log_path)
    except RecipesError as exc:
        return f"{log_path} cannot be resumed as it is: {exc}"
    saved = f"The last checkpoint saved in {log_path} is {last.name!r}" if last else \
        f"No checkpoint was saved yet in {log_path}; metrics written so far are kept"
    module = getattr(sys.modules.get("__main__"), "__spec__", None)
    command = f"python -m {module.name}" if module is not None else "the same command"
    args = " ".join(a for a in sys.argv[1:] if not a.startswith("behavior_if_log_dir_exists="))
    return f"{saved}. Continue with: {command} {args} behavior_if_log_dir_exists=resume".replace("  ", " ")
