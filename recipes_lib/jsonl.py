"""Reading JSONL files loudly: every bad line is an error naming the file and line.

Two readers, for two kinds of file:

- `read_jsonl(path)`: a user's data file (conversations, comparisons, sentences). Blank lines are
  skipped, a UTF-8 byte-order mark on the first line is allowed; a line that is not UTF-8 or not
  JSON stops with `DataFormatError("<file> line N: ...")`.
- `read_log_jsonl(path)`: a file a run appends to (`metrics.jsonl`, `checkpoints.jsonl`). A run
  killed mid-write leaves a *torn last line*: the final line, without its newline, that does not
  parse. That one line is dropped with a warning (the run rewrites it when it resumes); any other
  bad line is an error, because skipping it would silently resume from the wrong place.
"""

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recipes_lib.exceptions import DataFormatError

logger = logging.getLogger(__name__)


def read_jsonl(path: Path | str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for each non-blank line of a user's JSONL file."""
    path = Path(path)
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        text = _decode(raw, path, number)
        if text.strip():
            yield number, _parse(text, path, number)


def read_log_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """The JSON objects of a run's log file; a torn last line is dropped with a warning."""
    path = Path(path)
    data = path.read_bytes()
    lines = data.splitlines()
    rows = []
    for number, raw in enumerate(lines, start=1):
        torn = number == len(lines) and not data.endswith(b"\n")
        try:
            row = _parse(_decode(raw, path, number), path, number)
        except DataFormatError:
            if torn:
                logger.warning("%s line %d was cut short (the run was killed while writing it); ignoring it.",
                               path, number)
                break
            raise
        if not isinstance(row, dict):
            raise DataFormatError(f"{path} line {number}: expected a JSON object, got {type(row).__name__}.")
        rows.append(row)
    return rows


def drop_torn_last_line(path: Path | str) -> None:
    """Cut a torn last line off a log file before appending to it, so the next line starts clean."""
    path = Path(path)
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        logger.warning("%s ended in a line cut short by a kill; removing it before appending.", path)
        with path.open("r+b") as f:
            f.truncate(keep)


def _decode(raw: bytes, path: Path, number: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(
            f"{path} line {number}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
            "save the file as UTF-8."
        ) from None
    return text.removeprefix("\ufeff") if number == 1 else text


def _parse(text: str, path: Path, number: int) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path} line {number}: not valid JSON ({exc.msg} at column {exc.colno}).") from None
