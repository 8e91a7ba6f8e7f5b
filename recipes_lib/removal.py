"""Deleting a folder a user named (a run folder, an export folder): the project's one guarded delete.

Never deleted, whatever the caller asks: an empty path, the working directory or a folder above it,
the home folder or a folder above it, the root of a file system, `$RECIPES_HOME` or a folder above
it, and a symbolic link's target (the link is refused, named with where it points). Nor a folder
that is not ours: each kind of folder says how its own entries are told (`Ownership.foreign` lists
the entries we did not write), and a folder holding anything else is refused with those entries
named, so a user's file is never deleted along with ours. Folders the engine makes for itself
under `$RECIPES_HOME` (checkpoints, caches, temporary folders) are removed by their own code,
which builds and validates those paths itself.
"""

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from recipes_lib.exceptions import ConfigurationError
from recipes_lib.paths import recipes_home_path
from recipes_lib.run_lock import LOCK_FILE


@dataclass(frozen=True)
class Ownership:
    """How a kind of folder is told to be ours."""

    # What such a folder is called in messages: "a run folder", "an export folder".
    kind: str
    # The entries of a folder that are not ours ([] when it holds only what we write); None when the
    # folder is not of this kind at all (say, no sign that we wrote it).
    foreign: Callable[[Path], list[str] | None]


# What our runs and tools write into a log folder; anything else in it is the user's.
RUN_FOLDER_ENTRIES = frozenset({
    "config.json", "config.json.tmp", "config_changes.jsonl", "metrics.jsonl", "metrics.jsonl.tmp",
    "checkpoints.jsonl", "rollouts", "metrics.png", "comparison.png", "wandb", LOCK_FILE,
    "samples.jsonl", "samples.jsonl.tmp", "report.html",
    ".metrics.tmp.png", ".comparison.tmp.png", ".report.html.tmp",  # a drawing cut short (by a full disk, say)
})
RUN_FOLDER_EVIDENCE = ("config.json", "metrics.jsonl", "checkpoints.jsonl")
# Written last into every export folder: what was exported and the files it wrote.
EXPORT_MARKER = ".recipes-export.json"


def _run_foreign(path: Path) -> list[str] | None:
    """The entries of `path` our runs did not write; None when nothing in it shows a run wrote it.

    A non-empty subfolder that is itself a run folder (a pipeline's stage: rlhf_pipeline writes
    sft/, rm/, rl/) or an export folder of ours (the end-of-run hint's `out=<log_path>/export`) is ours.
    """
    entries = sorted(path.iterdir())
    foreign, evidence = [], any(e.name in RUN_FOLDER_EVIDENCE for e in entries)
    for entry in entries:
        if entry.name in RUN_FOLDER_ENTRIES:
            continue
        if entry.is_dir() and not entry.is_symlink() and any(entry.iterdir()):
            if _run_foreign(entry) == []:
                evidence = True
                continue
            if _export_foreign(entry) == []:
                continue
        foreign.append(entry.name + ("/" if entry.is_dir() else ""))
    return foreign if evidence or foreign else None


def _export_foreign(path: Path) -> list[str] | None:
    """The entries of `path` an export did not write (its marker lists them); None without a marker."""
    try:
        written = set(json.loads((path / EXPORT_MARKER).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [e.name + ("/" if e.is_dir() else "") for e in sorted(path.iterdir())
            if e.name != EXPORT_MARKER and e.name not in written]


def write_export_marker(folder: Path, model_path: str, kind: str) -> None:
    """Mark `folder` as an export of ours, listing the files it holds now."""
    files = sorted(e.name for e in folder.iterdir() if e.name != EXPORT_MARKER)
    record = {"model_path": model_path, "kind": kind, "files": files}
    (folder / EXPORT_MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def protected_reason(path: Path) -> str | None:
    """Why `path` must never be deleted, or None. `path` is taken as given (resolve it first)."""
    cwd, home = Path.cwd().resolve(), Path.home().resolve()
    if path == Path(path.anchor):
        return "the root folder"
    if path == home:
        return "your home folder"
    if path in home.parents:
        return "a parent of your home folder"
    if path == cwd:
        return "the working directory"
    if path in cwd.parents:
        return "a parent of the working directory"
    recipes_home = recipes_home_path().resolve()
    if path == recipes_home or path in recipes_home.parents:
        return "$RECIPES_HOME (where checkpoints and caches live)" if path == recipes_home else \
            "a parent of $RECIPES_HOME (where checkpoints and caches live)"
    return None


RUN_FOLDER = Ownership("a run folder", _run_foreign)
EXPORT_FOLDER = Ownership("an export folder", _export_foreign)


def check_removable(path: str | Path, key: str, ownership: Ownership) -> Path:
    """The folder `key=path` names, once it is shown safe to delete; raises ConfigurationError otherwise."""
    if not str(path).strip():
        raise ConfigurationError(f"{key} is empty; pass the folder itself, e.g. {key}=runs/my-run.")
    given = Path(path).expanduser()
    if given.is_symlink():
        raise ConfigurationError(f"Refusing to delete {key}={path}: it is a symbolic link (to {given.resolve()}). "
                                 "Pass the folder it points to, or a new folder.")
    resolved = given.resolve()
    reason = protected_reason(resolved)
    if reason is not None:
        raise ConfigurationError(f"Refusing to delete {key}={path} ({resolved}): it is {reason}. "
                                 f"Pass a folder of its own for this.")
    if not resolved.is_dir():
        raise ConfigurationError(f"Refusing to delete {key}={path}: it is not a folder.")
    foreign = ownership.foreign(resolved)
    if foreign is None or foreign:
        listed = foreign or [e.name + ("/" if e.is_dir() else "") for e in sorted(resolved.iterdir())]
        held = ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "") \
            if listed else "nothing"
        raise ConfigurationError(f"Refusing to delete {key}={path}: it is not {ownership.kind} of ours (it holds "
                                 f"{held}). Pass a new or empty folder, or move those files away first.")
    return resolved


def remove_folder(path: str | Path, key: str, ownership: Ownership, keep: frozenset[str] = frozenset()) -> None:
    """Delete the folder `key=path` (after `check_removable`), keeping the entries named in `keep`
    (a run folder's lock, which the deleting run itself holds). Says what it deletes on stderr."""
    folder = check_removable(path, key, ownership)
    doomed = sorted(entry for entry in folder.iterdir() if entry.name not in keep)
    print(f"Deleting {ownership.kind} {path} ({', '.join(e.name for e in doomed)}).", file=sys.stderr)
    try:
        for entry in doomed:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        if not keep:
            folder.rmdir()
    except OSError as exc:
        raise ConfigurationError(f"Could not delete {path}: {exc.strerror} ({exc.filename}).") from None
