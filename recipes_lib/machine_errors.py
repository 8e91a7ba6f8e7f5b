"""Errors of the machine a run writes to, said in one line: a full disk or quota, a folder the user
may not write, a read-only file system.

Python's own file calls raise `OSError` with an errno and usually the path; native libraries
(safetensors, tokenizers) raise a plain `Exception` whose text carries the OS error ("No space
left on device (os error 28)") and no path. Either way the user needs to know which disk, how
much room it has, and that what the run wrote so far is kept.
"""

import errno
import os
import shutil
from pathlib import Path
from typing import Any

from recipes_lib.exceptions import RecipesError
from recipes_lib.paths import recipes_home

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "os error 28", "os error 122")
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def machine_error(exc: BaseException, config: Any = None) -> str | None:
    """The one-line message for `exc` if the machine caused it (see the module docstring), else None."""
    code = exc.errno if isinstance(exc, OSError) else None
    text = str(exc)
    if code in _DISK_FULL or (code is None and any(t in text for t in _DISK_FULL_TEXTS)):
        return _disk_full(exc, config)
    if code in _NOT_WRITABLE:
        target = getattr(exc, "filename", None) or "a file"
        return (f"Cannot write {target}: {os.strerror(code or errno.EACCES)}. Pass a log_path (or RECIPES_HOME) "
                "in a folder you can write.")
    return None


def _disk_full(exc: BaseException, config: Any) -> str:
    writing = getattr(exc, "filename", None)
    places = [p for p in (writing, getattr(config, "log_path", None), _home()) if p]
    rooms = []
    for place in dict.fromkeys(str(Path(p).expanduser()) for p in places):
        free = _free_bytes(Path(place))
        rooms.append(f"{place} ({free / 2**30:.1f} GiB free)" if free is not None else place)
    what = f"writing {writing}" if writing else "writing a file"
    return (f"No space left on the disk ({what}). The run writes to {', '.join(rooms)}. Free some space there, "
            "or point log_path / RECIPES_HOME at a disk with room.")


def _home() -> str | None:
    try:
        return str(recipes_home())
    except RecipesError:
        return None


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None
