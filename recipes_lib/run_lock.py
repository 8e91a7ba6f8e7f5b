"""One run per folder: a run holds an OS lock on `<log_path>/.lock` while its process lives.

The lock is `flock` on a file in the run folder, so the kernel releases it when the process ends,
however it ends (SIGKILL included): a lock file left behind holds no lock. A second run on the
folder, whether it would resume or delete it, stops before touching anything, naming the process
that holds it (the file records its PID and command). Within one process the lock is re-entrant: a
notebook or a test may run on the same folder again.

The lock is taken before the run reads its data, so releasing it (at exit, or when the run stops
on a user's mistake) removes the lock file and any folder it had to create that is still empty: a
run refused for bad input leaves the file system as it found it.
"""

import atexit
import contextlib
import fcntl
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from recipes_lib.exceptions import ConfigurationError

LOCK_FILE = ".lock"


@dataclass
class _Held:
    handle: IO[str]
    made: list[Path]  # the folders created for the lock, the run folder first


_held: dict[Path, _Held] = {}  # resolved run folder -> the lock this process holds on it


def lock_run_folder(path: str | Path) -> None:
    """Hold the lock of the run folder `path` (created if absent) for this process.

    Raises:
        ConfigurationError: another process holds it.
    """
    folder = Path(path).expanduser()
    if folder.resolve() in _held:
        return
    made = [p.absolute() for p in [folder, *folder.parents] if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    lock_path = folder.absolute() / LOCK_FILE
    while True:  # until the file we lock is the one at the path (a releasing run unlinks it)
        handle = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - open while the lock is held
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ConfigurationError(
                f"log_path={path} is in use by another run ({holder}). Wait for it to finish or stop it, "
                "or pass another log_path; two runs in one folder would overwrite each other's files."
            ) from None
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(handle.fileno()).st_ino == os.stat(lock_path).st_ino:
                break
        handle.close()
    handle.seek(0)
    handle.truncate()
    handle.write(f"PID {os.getpid()}: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300]}\n")
    handle.flush()
    _held[folder.resolve()] = _Held(handle, made)


def release_run_folder(path: str | Path) -> None:
    """Let go of the lock on `path` if this process holds it: the lock file goes, and so do the
    folders made for it where they are still empty."""
    held = _held.pop(Path(path).expanduser().resolve(), None)
    if held is None:
        return
    with contextlib.suppress(OSError):
        os.unlink(Path(held.handle.name))  # while still locked, so no other run locks this file
    held.handle.close()  # releases the flock
    for folder in held.made:
        try:
            folder.rmdir()
        except OSError:  # the run wrote into it (or someone else did): it stays, with its parents
            break


@atexit.register
def release_all() -> None:
    """Release every run folder this process holds."""
    for key in list(_held):
        release_run_folder(key)
