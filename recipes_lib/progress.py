"""What a training run shows while it runs: a few headline metrics, on a terminal or in a log.

    on a terminal   a progress bar with ETA over the run's steps, and below it a small table of the
                    pipeline's headline metrics (training loss or reward, learning rate, the latest
                    evaluation with the step it was taken at), redrawn in place
    in a log        one line every `log_every` steps (and at every evaluation and the last step):
                    `[ 21/160]  train_mean_nll 0.412  learning_rate 0.00087  test/nll 0.52  <t> s/step  eta 2:10`

`log_every` defaults to about 50 lines per run. Every metric still goes to `metrics.jsonl`; this
is only the view. Which metrics are "headline" is read from the keys the run logs (`headline_keys`:
those of the lists below that it has), so every pipeline gets its own few without configuring
anything; a loop may pass its own list to `setup_logging(headline=...)`.
"""

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

# Per-step training metrics of each pipeline, in the order shown (SL, DPO, RL, distillation).
TRAIN_KEYS = ("train_mean_nll", "dpo_loss", "accuracy", "env/all/reward/total", "env/all/correct", "teacher_kl")
LR_KEYS = ("learning_rate", "optim/lr")
# Held-out metrics the loops' own evaluators log; any other evaluator's score is found by suffix.
EVAL_KEYS = ("test/nll", "test/exact_match", "test/dpo_loss", "test/accuracy", "test/env/all/reward/total",
             "test/env/all/correct", "test/teacher_kl")
EVAL_SUFFIXES = ("accuracy", "/exact_match", "/correct", "/pass_at_1", "/win_rate", "/teacher_agreement",
                 "/valid_label")
MAX_HEADLINE = 8
LOG_LINES_PER_RUN = 50


def headline_keys(keys: Iterable[str]) -> list[str]:
    """The metrics worth showing of a run that logged `keys`: its training keys, its learning rate,
    then its held-out evaluations (known ones first, then any other evaluator's score)."""
    keys = set(keys)
    train = [k for k in TRAIN_KEYS if k in keys]
    if "dpo_loss" not in keys:
        train = [k for k in train if k != "accuracy"]  # a DPO metric; elsewhere an evaluator's
    if "teacher_kl" in keys:  # distillation runs on the RL loop, whose envs then reward nothing
        train = [k for k in train if k != "env/all/reward/total"]
    lr = [k for k in LR_KEYS if k in keys][:1]
    known = [k for k in EVAL_KEYS if k in keys]
    others = sorted(k for k in keys - set(known) - set(train) if k.endswith(EVAL_SUFFIXES) and k != "accuracy")
    return (train + lr + known + others)[:MAX_HEADLINE]


def is_eval_row(metrics: Mapping[str, Any]) -> bool:
    """Whether a metrics row carries evaluation results (the loops add `time/eval` when they evaluate)."""
    return "time/eval" in metrics or any(k.startswith("test/") for k in metrics)


def format_value(value: Any) -> str:
    """A metric as the console shows it: 4 significant digits, integers as they are."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 1e6):
        return str(int(value))
    return f"{value:.4g}"


def format_duration(seconds: float) -> str:
    """`1:02:03` / `2:03`: hours only when needed."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressDisplay:
    """A `MetricsLogger` that shows the run's progress: live bar + table on a terminal, lines in a log.

    Args:
        total_steps: steps of the whole run (the bar's length).
        start_step: the step this process starts at (a resumed run starts part-way).
        console: where to draw; a terminal gets the live view, anything else the lines.
        headline: the metric keys to show; None: `headline_keys` of whatever the run logs.
        log_every: steps between lines in a log; None: about LOG_LINES_PER_RUN lines per run.
    """

    def __init__(self, total_steps: int, start_step: int = 0, console: Console | None = None,
                 headline: Sequence[str] | None = None, log_every: int | None = None):
        self.console = console or Console()
        self.total_steps = max(1, total_steps)
        self.start_step = start_step
        self.log_every = log_every or max(1, math.ceil(self.total_steps / LOG_LINES_PER_RUN))
        self._fixed_headline = list(headline) if headline is not None else None
        self._seen: set[str] = set()
        self._latest: dict[str, tuple[Any, int]] = {}  # key -> (value, step it was logged at)
        self._done = start_step
        self._first_row: tuple[float, int] | None = None  # (time, steps done) at the first row logged
        self._progress: _LiveProgress | None = None
        if self.console.is_terminal:
            self._progress = _LiveProgress(self._table, console=self.console)
            self._task = self._progress.add_task("training", total=self.total_steps, completed=start_step)
            self._progress.start()

    @property
    def headline(self) -> list[str]:
        return self._fixed_headline if self._fixed_headline is not None else headline_keys(self._seen)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        self._seen.update(k for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        for key, value in metrics.items():
            if value is not None:
                self._latest[key] = (value, step)
        self._done = max(self._done, min(step + 1, self.total_steps))
        if self._first_row is None:
            self._first_row = (time.monotonic(), self._done)
        if self._progress is not None:
            self._progress.update(self._task, completed=self._done)
        elif self._line_due(metrics, step):
            self.console.print(self.line(metrics, step), soft_wrap=True, highlight=False, markup=False)

    def _line_due(self, metrics: Mapping[str, Any], step: int) -> bool:
        return (step % self.log_every == 0 or step + 1 >= self.total_steps or step == self.start_step
                or is_eval_row(metrics))

    def line(self, metrics: Mapping[str, Any], step: int) -> str:
        """The log line of `step`: its training metrics, and the evaluations it carries."""
        width = len(str(self.total_steps))
        after_last = step >= self.total_steps  # RL logs its final evaluation as a row of its own
        parts = ["[final evaluation]" if after_last else f"[{step + 1:>{width}}/{self.total_steps}]"]
        for key in self.headline:
            if metrics.get(key) is not None:
                parts.append(f"{key} {format_value(metrics[key])}")
        if not after_last:
            parts.extend(self._pace())
        return "  ".join(parts)

    def _pace(self) -> list[str]:
        """Seconds per step and ETA, timed from the first row (the first step also loads and warms up)."""
        if self._first_row is None or self._done <= self._first_row[1]:
            return []
        started, done_then = self._first_row
        per_step = (time.monotonic() - started) / (self._done - done_then)
        return [f"{per_step:.3g} s/step", f"eta {format_duration(per_step * (self.total_steps - self._done))}"]

    def _table(self) -> Table:
        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False, padding=(0, 2, 0, 0))
        table.add_column("metric")
        table.add_column("latest", justify="right")
        table.add_column("at step", justify="right")
        for key in self.headline:
            if key in self._latest:
                value, step = self._latest[key]
                table.add_row(key, format_value(value), str(step))
        return table

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class _LiveProgress(Progress):
    """rich's progress bar with the metrics table drawn under it, refreshed together."""

    def __init__(self, table: Callable[[], Table], console: Console):
        self._make_table = table  # first: the parent's constructor already renders
        super().__init__(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console)

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        yield self._make_table()
