"""A run's loggers (`setup_logging`) and its end: what changed, how fast it went, where the weights
are, what to run next.

`setup_logging` opens `config.json`, `metrics.jsonl` (recipes_lib/logging.py), the progress view
and W&B, and last `RunReport`. It redraws `<log_path>/metrics.png` and `<log_path>/report.html`
(recipes_lib/report.py) after evaluations (no more often than keeps drawing under `DRAW_SHARE` of
the run's time) and at the end, and when the run gets to its end prints:

    Finished runs/demo: 128 steps in m:ss, <n> tokens/s
      train_mean_nll      2.242 -> 0.02185  (best 0.002712 at step 117)
      test/exact_match    0 -> 0.9792
      final checkpoint    local://run-.../sampler_weights/final
      metrics             runs/demo/metrics.jsonl
      curves              runs/demo/metrics.png (loss (NLL per token), held-out exact match, learning rate)
      report              runs/demo/report.html (charts, the model's answers, config)
    Next:
      python -m recipes.chat log_path=runs/demo
      python -m recipes_lib.export model_path=local://run-.../sampler_weights/final out=runs/demo/export
      python -m recipes_lib.plot log_paths=runs/demo

Every number is read back from `metrics.jsonl` (first and last logged value of each headline
metric, and its best: lowest for losses, NLL and KL, highest otherwise); tokens/s counts the
tokens of the steps this process trained (`num_tokens`, or an RL step's prompt and sampled tokens)
over its wall time since `setup_logging`. A run stopped by an error prints one line instead.
"""

import logging
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from recipes_lib.checkpoints import CheckpointRecord, load_checkpoints
from recipes_lib.exceptions import DataFormatError
from recipes_lib.logging import (
    METRICS_FILE,
    JsonlLogger,
    MetricsLogger,
    MultiplexLogger,
    WandbLogger,
    read_metrics,
    write_config,
)
from recipes_lib.progress import (
    LR_KEYS,
    ProgressDisplay,
    format_duration,
    format_value,
    headline_keys,
    is_eval_row,
)
from recipes_lib.report import REPORT_FILE, write_report

logger = logging.getLogger(__name__)

PLOT_FILE = "metrics.png"
HOSTED_SCHEME = "tinker://"
TOKEN_KEYS = ("num_tokens", "env/all/total_ob_tokens", "env/all/total_ac_tokens")
LOWER_IS_BETTER = ("nll", "loss", "kl")
# metrics.png is redrawn at an evaluation only once the run has gone on for 1 / DRAW_SHARE times as
# long as the last drawing took, so drawing holds a run up by at most DRAW_SHARE.
DRAW_SHARE = 0.05
# What a drawing is taken to cost before the first one: a run first draws at its first evaluation past
# FIRST_DRAWING_S / DRAW_SHARE seconds, not at step 0, where one point shows nothing and a run of a few
# seconds would spend most of them drawing. The end always draws.
FIRST_DRAWING_S = 0.5


@dataclass(frozen=True)
class MetricChange:
    """A headline metric's first, last and best logged values, with the steps they were logged at."""

    key: str
    first: float
    first_step: int
    last: float
    last_step: int
    best: float
    best_step: int


@dataclass(frozen=True)
class RunSummary:
    """What the end-of-run summary says, read from the run folder."""

    log_path: str
    steps: int  # steps this process trained
    wall_seconds: float
    tokens: float  # tokens of those steps
    changes: list[MetricChange]
    checkpoint: CheckpointRecord | None
    plot_panels: list[str] | None  # titles of metrics.png's panels; None: not drawn
    report_written: bool = False  # report.html is current

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def model_path(self) -> str | None:
        """The weights to chat with: the sampler weights, else the training state."""
        if self.checkpoint is None:
            return None
        return self.checkpoint.sampler_path or self.checkpoint.state_path

    @property
    def export_path(self) -> str | None:
        """The weights to export: the hosted API downloads training states only, not sampler weights."""
        if self.checkpoint is not None and (self.model_path or "").startswith(HOSTED_SCHEME):
            return self.checkpoint.state_path or self.model_path
        return self.model_path


def lower_is_better(key: str) -> bool:
    return any(word in key.rsplit("/", 1)[-1] for word in LOWER_IS_BETTER)


def metric_changes(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[MetricChange]:
    """First -> last and best of each key over `rows` (rows without a number for a key are skipped)."""
    changes = []
    for key in keys:
        points = [(int(row["step"]), float(row[key])) for row in rows
                  if isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)]
        if not points:
            continue
        pick = min if lower_is_better(key) else max
        best_step, best = pick(points, key=lambda point: point[1])
        changes.append(MetricChange(key, points[0][1], points[0][0], points[-1][1], points[-1][0], best, best_step))
    return changes


def summarize(log_path: Path | str, wall_seconds: float, start_step: int, total_steps: int,
              headline: Sequence[str] | None = None, plot_panels: list[str] | None = None,
              report_written: bool = False) -> RunSummary:
    """The summary of the finished run in `log_path`, whose steps start_step..total_steps-1 took
    `wall_seconds` in this process."""
    rows = read_metrics(log_path)
    keys = {k for row in rows for k in row}
    shown = [k for k in (headline if headline is not None else headline_keys(keys)) if k not in LR_KEYS]
    mine = [row for row in rows if isinstance(row.get("step"), int) and start_step <= row["step"] < total_steps]
    tokens = sum(float(row[k]) for row in mine for k in TOKEN_KEYS if isinstance(row.get(k), (int, float)))
    checkpoints = load_checkpoints(log_path)
    finals = [record for record in checkpoints if record.final] or checkpoints
    return RunSummary(str(log_path), total_steps - start_step, wall_seconds, tokens, metric_changes(rows, shown),
                      finals[-1] if finals else None, plot_panels, report_written)


def next_commands(summary: RunSummary) -> list[str]:
    """Chat with the weights, export them, redraw the curves."""
    folder = shlex.quote(summary.log_path)
    commands = []
    if summary.model_path is not None and summary.export_path is not None:
        out = shlex.quote(str(Path(summary.log_path) / "export"))
        commands += [f"python -m recipes.chat log_path={folder}",
                     f"python -m recipes_lib.export model_path={shlex.quote(summary.export_path)} out={out}"]
    return [*commands, f"python -m recipes_lib.plot log_paths={folder}"]


def render(summary: RunSummary) -> str:
    """The summary as plain text lines (see the module docstring)."""
    lines = [f"Finished {summary.log_path}: {summary.steps} steps in {format_duration(summary.wall_seconds)}, "
             f"{summary.tokens_per_second:,.0f} tokens/s"]
    width = max([len(c.key) for c in summary.changes] + [len("final checkpoint")]) + 2
    for change in summary.changes:
        line = f"  {change.key:<{width}}{format_value(change.first)} -> {format_value(change.last)}"
        if change.best != change.last:
            line += f"  (best {format_value(change.best)} at step {change.best_step})"
        lines.append(line)
    if summary.checkpoint is not None:
        lines.append(f"  {'final checkpoint':<{width}}{summary.model_path}")
        if summary.checkpoint.sampler_path and summary.checkpoint.state_path:
            lines.append(f"  {'':<{width}}(resumable state: {summary.checkpoint.state_path})")
    lines.append(f"  {'metrics':<{width}}{Path(summary.log_path) / METRICS_FILE}")
    if summary.plot_panels:
        lines.append(f"  {'curves':<{width}}{Path(summary.log_path) / PLOT_FILE} ({', '.join(summary.plot_panels)})")
    if summary.report_written:
        lines.append(f"  {'report':<{width}}{Path(summary.log_path) / REPORT_FILE} (charts, the model's answers, config)")
    lines.append("Next:")
    lines.extend(f"  {command}" for command in next_commands(summary))
    return "\n".join(lines)


def write_plot(log_path: Path | str) -> list[str] | None:
    """Draw `<log_path>/metrics.png`; returns its panels' titles, or None (with a warning) on failure."""
    try:
        from recipes_lib import plot  # matplotlib: loaded only when a run draws

        return [panel.title for panel in plot.plot_run(plot.load_run(log_path), Path(log_path) / PLOT_FILE)]
    except Exception as exc:  # noqa: BLE001  the picture is a convenience: it must never stop a run
        logger.warning("Could not draw %s: %s: %s", Path(log_path) / PLOT_FILE, type(exc).__name__, exc)
        return None


def write_report_page(log_path: Path | str) -> bool:
    """Write `<log_path>/report.html`; False (with a warning) on failure."""
    try:
        write_report(log_path)
        return True
    except Exception as exc:  # noqa: BLE001  the page is a convenience: it must never stop a run
        logger.warning("Could not write %s: %s: %s", Path(log_path) / REPORT_FILE, type(exc).__name__, exc)
        return False


class RunReport:
    """A `MetricsLogger` that keeps metrics.png and report.html current and prints the summary when
    the run ends.

    Both are drawn at evaluations (at most `DRAW_SHARE` of the run's time goes to drawing them)
    and at the end, a stopped run's end included.

    Args:
        log_path: the run folder (metrics.jsonl is read back from it).
        total_steps: steps of the whole run.
        start_step: the step this process started at.
        console: where the summary goes; None: nowhere (metrics.png is still drawn).
        headline: the metrics the summary reports; None: `headline_keys` of the logged keys.
    """

    def __init__(self, log_path: Path | str, total_steps: int, start_step: int = 0, console: Console | None = None,
                 headline: Sequence[str] | None = None):
        self.log_path = log_path
        self.total_steps = total_steps
        self.start_step = start_step
        self.console = console
        self.headline = headline
        self.summary: RunSummary | None = None
        self._started = time.monotonic()
        self._panels: list[str] | None = None
        self._report_written = False
        self._undrawn_rows = 0
        self._drawn_at = self._started
        self._drawing_seconds = FIRST_DRAWING_S  # of the last drawing

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        self._undrawn_rows += 1
        if is_eval_row(metrics) and time.monotonic() - self._drawn_at >= self._drawing_seconds / DRAW_SHARE:
            self._draw()

    def _draw(self) -> None:
        started = time.monotonic()
        self._panels = write_plot(self.log_path)
        self._report_written = write_report_page(self.log_path)
        self._drawn_at = time.monotonic()
        self._drawing_seconds = self._drawn_at - started
        self._undrawn_rows = 0

    def close(self) -> None:
        if self._undrawn_rows:  # rows logged since the last drawing (none: the picture is current)
            self._draw()
        else:  # the page also names the final checkpoint, saved after the last row
            self._report_written = write_report_page(self.log_path)
        stopped = sys.exc_info()[1]  # close() runs in the loops' `finally`: set when the run failed
        if stopped is not None:
            if self.console is not None:
                self.console.print(f"Stopped ({type(stopped).__name__}); {self.log_path} keeps the metrics and "
                                   "checkpoints so far: rerun with behavior_if_log_dir_exists=resume to continue.",
                                   soft_wrap=True, highlight=False, markup=False)
            return
        try:
            self.summary = summarize(self.log_path, time.monotonic() - self._started, self.start_step,
                                     self.total_steps, self.headline, self._panels, self._report_written)
        except DataFormatError as exc:  # a hand-edited metrics or checkpoints file: say so, keep the run
            logger.warning("No summary of %s: %s", self.log_path, exc)
            return
        if self.console is not None:
            self.console.print(render(self.summary), soft_wrap=True, highlight=False, markup=False)


def setup_logging(
    log_dir: Path | str,
    config: Any,
    total_steps: int,
    start_step: int = 0,
    wandb_project: str | None = None,
    wandb_name: str | None = None,
    console: bool | Console = True,
    headline: Sequence[str] | None = None,
) -> MultiplexLogger:
    """The run's loggers: `config.json` written, `metrics.jsonl` opened (truncated on resume).

    Args:
        console: True: the progress view and the summary on stdout; a rich Console: on that
            console; False: neither (metrics.png is still drawn).
        headline: the metric keys the progress view and the summary show; None: chosen from the
            keys the run logs (recipes_lib.progress.headline_keys).
    """
    log_dir = Path(log_dir)
    jsonl = JsonlLogger(log_dir, resume_from_step=start_step)  # first: a corrupt metrics line stops it here
    write_config(log_dir, config, start_step)
    loggers: list[MetricsLogger] = [jsonl]
    screen = Console() if console is True else None if console is False else console
    if screen is not None:
        loggers.append(ProgressDisplay(total_steps, start_step, screen, headline))
    if wandb_project:
        loggers.append(WandbLogger(wandb_project, wandb_name, config, log_dir))
    loggers.append(RunReport(log_dir, total_steps, start_step, screen, headline))  # last: reads what the others wrote
    return MultiplexLogger(loggers)
