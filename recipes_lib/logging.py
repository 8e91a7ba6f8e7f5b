"""One metrics path for every pipeline: `log_metrics(metrics, step)` to JSONL, console and W&B
(`recipes_lib.summary.setup_logging` puts the loggers together).

- `metrics.jsonl`: one flat JSON object per step, appended and flushed per line, so a killed run
  loses nothing it wrote; on resume, lines at or after the resumed step are dropped first (they
  will be logged again), as is a line cut short by a kill.
- `config.json`: the resolved config; fields named like secrets (`api_key`) are never written.
- `samples.jsonl`: what the sampling evaluators' model wrote at each evaluation (prompt, answer,
  expected answer), one line per answer, appended like the metrics and cut back the same way on resume.
- the console: a progress bar with ETA and the pipeline's few headline metrics on a terminal, one
  line every few steps in a log (recipes_lib/progress.py).
- `metrics.png` and `report.html`, redrawn at each evaluation, and at the end a summary: first -> last of the
  headline metrics, tokens/s, the final checkpoint and the commands to run next (recipes_lib/summary.py).
- Weights & Biases when `wandb_project` is set (and the package is installed).
"""

import dataclasses
import enum
import json
import logging as std_logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import chz

from recipes_lib.exceptions import DataFormatError
from recipes_lib.jsonl import read_log_jsonl

logger = std_logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
CONFIG_FILE = "config.json"
CONFIG_CHANGES_FILE = "config_changes.jsonl"
SECRET_FIELDS = ("api_key", "token", "password", "secret")

Metrics = Mapping[str, float | int | str | None]


class MetricsLogger(Protocol):
    def log_metrics(self, metrics: Metrics, step: int) -> None: ...

    def close(self) -> None: ...


def dump_config(value: Any) -> Any:
    """A JSON-able view of a config: chz objects and dataclasses become dicts, secrets are dropped."""
    if chz.is_chz(value):
        return {k: _redacted(k, dump_config(v)) for k, v in chz.asdict(value, shallow=True).items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _redacted(f.name, dump_config(getattr(value, f.name))) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _redacted(str(k), dump_config(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [dump_config(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__name__)}"
    return repr(value)


def _redacted(key: str, value: Any) -> Any:
    # Whole words of the key only: "hf_token" and "api_key" are secrets, "max_tokens" and
    # "model_name_for_tokenizer" are not.
    name = key.lower()
    words = set(re.split(r"[^a-z0-9]+", name))
    if value is not None and any(name.endswith(s) if "_" in s else s in words for s in SECRET_FIELDS):
        return "<redacted>"
    return value


class JsonlLogger:
    """Appends one JSON line per `log_metrics` call to `<log_dir>/metrics.jsonl`."""

    def __init__(self, log_dir: Path, resume_from_step: int | None = None):
        self.path = Path(log_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step is not None:
            truncate_log(self.path, resume_from_step)
            truncate_log(self.path.parent / SAMPLES_FILE, resume_from_step)
        self._file = self.path.open("a", encoding="utf-8")

    def log_metrics(self, metrics: Metrics, step: int) -> None:
        row = {"step": step, **{k: _json_number(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; pandas reads null as NaN
    if hasattr(value, "item"):
        return value.item()
    return value


def read_metrics(log_dir: Path | str) -> list[dict[str, Any]]:
    """The lines of `metrics.jsonl`; a torn last line (a kill mid-write) is dropped with a warning.

    Raises:
        DataFormatError: any other line is not a JSON object (naming the file and line).
    """
    path = Path(log_dir) / METRICS_FILE
    return read_log_jsonl(path) if path.exists() else []


def read_samples(log_dir: Path | str) -> list[dict[str, Any]]:
    """The lines of `samples.jsonl` (as `read_metrics` reads its file)."""
    path = Path(log_dir) / SAMPLES_FILE
    return read_log_jsonl(path) if path.exists() else []


def log_samples(log_dir: Path | str, step: int, samples: Sequence[Mapping[str, Any]]) -> None:
    """Append `samples` (an evaluation's prompts and answers) to `samples.jsonl`, each with `step`."""
    if not samples:
        return
    with (Path(log_dir) / SAMPLES_FILE).open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps({"step": step, **sample}) + "\n" for sample in samples))


def truncate_log(path: Path, resume_from_step: int) -> None:
    """Keep a log file's lines with `step < resume_from_step` (rewritten atomically); a corrupt line stops it."""
    if not path.exists():
        return
    rows = read_log_jsonl(path)
    for number, row in enumerate(rows, start=1):
        if not isinstance(row.get("step"), int):
            raise DataFormatError(f"{path} line {number}: has no integer 'step'; cannot resume past it.")
    kept = [row for row in rows if row["step"] < resume_from_step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
    os.replace(tmp, path)


def write_config(log_dir: Path, config: Any, start_step: int = 0) -> None:
    """Write `config.json` (the resolved config, secrets redacted) atomically.

    When a resumed run's settings differ from the ones in the folder (a longer `max_steps`, another
    learning rate), each difference is appended to `config_changes.jsonl` with the step it applies
    from, and a warning names them, so the folder still tells how every step was run.
    """
    path = Path(log_dir) / CONFIG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    dumped = dump_config(config)
    if path.exists():
        changes = config_changes(json.loads(path.read_text(encoding="utf-8")), dumped)
        if changes:
            logger.warning("Resuming %s at step %d with changed settings: %s", log_dir, start_step,
                           "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items()))
            with (Path(log_dir) / CONFIG_CHANGES_FILE).open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": start_step,
                                    "changes": {k: {"before": old, "after": new} for k, (old, new) in changes.items()}})
                        + "\n")
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(dumped, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def config_changes(before: Any, after: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """{dotted key: (before, after)} for every leaf that differs (ignoring behavior_if_log_dir_exists)."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes: dict[str, tuple[Any, Any]] = {}
        for key in sorted(set(before) | set(after)):
            if key == "behavior_if_log_dir_exists":
                continue
            changes.update(config_changes(before.get(key), after.get(key), f"{prefix}{key}."))
        return changes
    return {} if before == after else {prefix.rstrip("."): (before, after)}




class WandbLogger:
    """Logs to Weights & Biases (needs `pip install wandb` and a W&B login)."""

    def __init__(self, project: str, name: str | None, config: Any, log_dir: Path):
        import wandb

        self._run = wandb.init(project=project, name=name, config=dump_config(config), dir=str(log_dir),
                               resume="allow")

    def log_metrics(self, metrics: Metrics, step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class MultiplexLogger:
    """Sends every call to each logger in turn."""

    def __init__(self, loggers: Sequence[MetricsLogger]):
        self.loggers = list(loggers)

    def log_metrics(self, metrics: Metrics, step: int) -> None:
        for target in self.loggers:
            target.log_metrics(metrics, step)

    def close(self) -> None:
        for target in self.loggers:
            target.close()
