"""The log-folder policy: what a run may do with the folder it is pointed at (resume the run in it,
delete it, refuse), checked and locked before any work."""

import os
import sys
import tempfile
from pathlib import Path

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.removal import RUN_FOLDER, check_removable, remove_folder
from recipes_lib.run_config import LogdirBehavior
from recipes_lib.run_lock import LOCK_FILE, lock_run_folder


def check_log_dir(log_path: str | Path, behavior: LogdirBehavior) -> None:
    """Decide what to do when `log_path` already holds a run; lock the folder; check it can be written.

    `resume` continues from its last checkpoint, `delete` starts over, `raise` stops with an error,
    `ask` asks on a terminal (and, without one, stops with an error that names the options).
    Only a folder that is recognisably one of our run folders is ever resumed or deleted
    (`removal.py` says what else is never deleted), and only once this process holds its lock
    (`run_lock.py`: another run in the folder stops this one before anything is touched).
    """
    if not str(log_path).strip():
        raise ConfigurationError("log_path is empty; pass the folder for this run, e.g. log_path=runs/my-run.")
    path = Path(log_path).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"log_path={path} is a file, not a folder; pass a folder for the run.")
    earlier = path.exists() and any(e.name != LOCK_FILE for e in path.iterdir())
    if earlier:
        if behavior == "ask":
            behavior = _ask(path)
        if behavior == "raise":
            raise ConfigurationError(
                f"Log directory {path} already exists. Pass behavior_if_log_dir_exists=resume to continue it, "
                "=delete to start over, or a new log_path."
            )
        if behavior == "delete":
            check_removable(log_path, "log_path", RUN_FOLDER)
        else:
            _check_is_run_folder(path, "resume a run in")
    check_writable(path, "log_path")
    lock_run_folder(path)
    if earlier and behavior == "delete":
        remove_folder(log_path, "log_path", RUN_FOLDER, keep=frozenset({LOCK_FILE}))


def _check_is_run_folder(path: Path, action: str) -> None:
    foreign = RUN_FOLDER.foreign(path)
    if foreign is None or foreign:
        listed = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "") \
            if foreign else "no config.json"
        raise ConfigurationError(
            f"Refusing to {action} {path}: it is not a run folder of ours (it holds {listed}). "
            "Pass a new log_path, or the folder of an earlier run."
        )


def check_writable(path: Path, key: str) -> None:
    """Stop before any work when `path` (or the folder it would be created in) cannot be written."""
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigurationError(f"{key}={path}: {folder} is a file, so the folder cannot be created.")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".recipes-write-check-")
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise ConfigurationError(f"{key}={path}: cannot write in {folder} ({exc.strerror}).") from None


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
