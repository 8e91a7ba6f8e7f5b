"""`python -m recipes_lib.sweep sweep_dir=DIR`: compare the runs of a learning-rate sweep.

Each subfolder of DIR that holds a run (`config.json` + `metrics.jsonl`, as `scripts/sweep_lr.sh`
writes them) becomes one row: its learning rate, final train loss (`train_mean_nll` of the last
step), final test loss (`test/nll`), held-out accuracy (the last `*/exact_match` or `*/accuracy`)
and progress. The best finished run is marked: lowest final test loss when every finished run has
one, else lowest final train loss (as in the Tinker docs' "Sweep case study"). A PNG of final loss
against learning rate (log scale) is written to `DIR/lr_sweep.png`.

Nothing is left out silently: a run whose loss went to NaN shows `nan` and "diverged" (it is never
the best), and a folder whose config.json or metrics.jsonl cannot be read is listed with the reason.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chz
from rich.console import Console
from rich.table import Table

from recipes_lib.argv import config_from_argv
from recipes_lib.cli import user_errors
from recipes_lib.exceptions import ConfigurationError, DataFormatError
from recipes_lib.logging import CONFIG_FILE, METRICS_FILE, read_metrics

SWEEP_PLOT = "lr_sweep.png"
FINISHED_PROGRESS = 0.98  # the Tinker docs' threshold for "the experiment is completed"
ACCURACY_SUFFIXES = ("/exact_match", "/accuracy")


@dataclass(frozen=True)
class RunSummary:
    """The final numbers of one run of a sweep (None where the run did not log them)."""

    name: str
    learning_rate: float
    final_train_loss: float | None
    final_test_loss: float | None
    accuracy: float | None
    progress: float
    problem: str | None = None  # why the run could not be read; its numbers are then None

    @property
    def finished(self) -> bool:
        return self.progress >= FINISHED_PROGRESS and self.problem is None

    @property
    def diverged(self) -> bool:
        return any(v is not None and not math.isfinite(v) for v in (self.final_train_loss, self.final_test_loss))


def _last(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    """The value of `key` in the last row that logged it; NaN when that value is null or not finite
    (metrics.jsonl writes NaN as null), None when no row has the key."""
    logged = [row[key] for row in rows if key in row]
    if not logged:
        return None
    value = logged[-1]
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def _last_accuracy(rows: Sequence[dict[str, Any]]) -> float | None:
    keys = sorted({k for row in rows for k in row if k.endswith(ACCURACY_SUFFIXES)})
    return _last(rows, keys[0]) if keys else None


def summarize_run(run_dir: Path) -> RunSummary | None:
    """The summary of the run in `run_dir`, or None when it has no metrics yet; a run that cannot
    be read gets a summary with `problem` set."""
    config_path = run_dir / CONFIG_FILE
    try:
        rows = read_metrics(run_dir)
        if not rows:
            return None
        if not config_path.exists():
            raise DataFormatError(f"{config_path} is missing")
        config = json.loads(config_path.read_text(encoding="utf-8"))
        learning_rate = float(config["learning_rate"])
    except (DataFormatError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        problem = f"{config_path} has no learning_rate" if isinstance(exc, KeyError) else str(exc)
        return RunSummary(run_dir.name, math.nan, None, None, None, 0.0, problem=problem)
    return RunSummary(
        name=run_dir.name,
        learning_rate=learning_rate,
        final_train_loss=_last(rows, "train_mean_nll"),
        final_test_loss=_last(rows, "test/nll"),
        accuracy=_last_accuracy(rows),
        progress=_last(rows, "progress") or 0.0,
    )


def summarize_sweep(sweep_dir: Path | str) -> list[RunSummary]:
    """Every run under `sweep_dir`, sorted by learning rate."""
    folders = sorted(p for p in Path(sweep_dir).iterdir() if (p / METRICS_FILE).exists())
    summaries = [s for s in (summarize_run(folder) for folder in folders) if s is not None]
    return sorted(summaries, key=lambda s: (s.problem is not None, 0.0 if s.problem else s.learning_rate, s.name))


def selection_metric(runs: Sequence[RunSummary]) -> str:
    """'final_test_loss' when every finished run has one, else 'final_train_loss'."""
    finished = [r for r in runs if r.finished]
    return "final_test_loss" if finished and all(r.final_test_loss is not None for r in finished) else "final_train_loss"


def best_run(runs: Sequence[RunSummary]) -> RunSummary | None:
    """The finished run with the lowest selection metric (None if no run finished)."""
    metric = selection_metric(runs)
    candidates = [r for r in runs if r.finished and not r.diverged and getattr(r, metric) is not None]
    return min(candidates, key=lambda r: getattr(r, metric)) if candidates else None


def sweep_table(runs: Sequence[RunSummary], best: RunSummary | None) -> Table:
    """A rich table, one row per run, the best marked with a star."""
    table = Table(title=f"learning-rate sweep (best by {selection_metric(runs)})")
    for column in ("", "run", "learning rate", "final train loss", "final test loss", "held-out acc", "progress"):
        table.add_column(column, justify="left" if column in ("", "run") else "right")
    for run in runs:
        progress = "unreadable" if run.problem else f"{run.progress:.0%}" + (" diverged" if run.diverged else "")
        table.add_row("*" if run is best else "", run.name, f"{run.learning_rate:.3g}", _cell(run.final_train_loss),
                      _cell(run.final_test_loss), _cell(run.accuracy, "{:.1%}"), progress)
    return table


def _cell(value: float | None, fmt: str = "{:.4f}") -> str:
    return "-" if value is None else fmt.format(value)


def plot_sweep(runs: Sequence[RunSummary], best: RunSummary | None, path: Path) -> Path:
    """Final train and test loss against learning rate (log x), the best run circled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for attribute, label in (("final_train_loss", "final train loss"), ("final_test_loss", "final test loss")):
        points = [(r.learning_rate, getattr(r, attribute)) for r in runs if getattr(r, attribute) is not None]
        if points:
            axes.plot(*zip(*points), marker="o", label=label)
    if best is not None:
        axes.plot([best.learning_rate], [getattr(best, selection_metric(runs))], "o", markersize=14,
                  fillstyle="none", color="green", label=f"best: {best.learning_rate:.3g}")
    axes.set(xscale="log", xlabel="learning rate (log scale)", ylabel="final loss (NLL per token)",
             title="final loss vs learning rate")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


@chz.chz
class SweepConfig:
    """`python -m recipes_lib.sweep sweep_dir=DIR`."""

    # The folder whose subfolders are the sweep's runs (the log_path of each).
    sweep_dir: str

    @chz.validate
    def _check(self) -> None:
        if not Path(self.sweep_dir).is_dir():
            raise ConfigurationError(f"sweep_dir={self.sweep_dir} is not a folder")


def main(argv: Sequence[str] | None = None) -> int:
    config = config_from_argv(chz.Blueprint(SweepConfig), argv)
    sweep_dir = Path(config.sweep_dir)
    runs = summarize_sweep(sweep_dir)
    if not runs:
        raise ConfigurationError(f"no runs (config.json + metrics.jsonl) under {sweep_dir}")
    best = best_run(runs)
    console = Console()
    console.print(sweep_table(runs, best))
    for run in runs:
        if run.problem:
            console.print(f"[yellow]{run.name} could not be read: {run.problem}[/yellow]")
    console.print(f"best learning rate: {best.learning_rate:.3g} ({best.name})" if best else "no run has finished yet")
    console.print(f"wrote {plot_sweep(runs, best, sweep_dir / SWEEP_PLOT)}")
    return 0


if __name__ == "__main__":
    with user_errors():
        raise SystemExit(main())
