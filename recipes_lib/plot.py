"""`python -m recipes_lib.plot log_paths=LOG_PATH[,LOG_PATH...]`: PNG charts of runs from their `metrics.jsonl`.

One run writes `LOG_PATH/metrics.png`: a panel per group of metrics the run logged, whatever its
pipeline (metric names as the Tinker docs write them):

    supervised   loss (train_mean_nll, test/nll), held-out exact match (test/exact_match), learning rate
    RL           reward (env/all/reward/total, test/...), correct (env/all/correct, test/env/all/correct),
                 format (env/all/format, if the env reports it), KL(sample || train) (optim/kl_sample_train_v1, _v2)
    DPO          loss (dpo_loss, test/dpo_loss), accuracy, margin, chosen/rejected reward
    distillation KL(student || teacher) (teacher_kl), and the task's held-out evaluation
    evaluators   every other accuracy / exact-match / pass@k metric (e.g. inspect/<task>/accuracy)

Several runs also write `comparison.png` (next to the runs, or `out=PATH`): the same panels with one
line per run, labelled by folder name. Points logged only at eval steps are drawn with markers;
`smooth=0.9` adds an exponential moving average over noisy training curves.
"""

import dataclasses
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

import chz
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure  # not pyplot: no display backend or global figures (servers, notebooks)
from matplotlib.ticker import MaxNLocator

from recipes_lib.argv import config_from_argv
from recipes_lib.exceptions import ConfigurationError, RecipesError
from recipes_lib.logging import METRICS_FILE, read_metrics
from recipes_lib.progress import EVAL_SUFFIXES

RUN_PLOT = "metrics.png"
COMPARISON_PLOT = "comparison.png"
MAX_PANELS = 12
NOT_METRICS = {"step", "epoch", "progress"}


class NoMetricsError(ValueError):
    """A folder has no `metrics.jsonl`, or nothing in it to plot."""


@dataclass(frozen=True)
class Panel:
    """One chart: a title and the metric keys drawn on it (each a line)."""

    title: str
    keys: tuple[str, ...]
    ylabel: str = ""
    smoothable: bool = True  # False for schedules (learning rate), which are exact, not noisy
    log_y: bool = False  # losses fall by orders of magnitude; drawn on a log axis when all positive
    requires: str | None = None  # drawn only for runs that logged this key (e.g. DPO's dpo_loss)
    fraction: bool = False  # a score in [0, 1]: drawn on the whole 0..1 axis, so 0.2 -> 0.3 looks its size


PANELS: tuple[Panel, ...] = (
    Panel("loss (NLL per token)", ("train_mean_nll", "test/nll"), "nats/token", log_y=True),
    Panel("held-out exact match", ("test/exact_match",), "fraction", fraction=True),
    Panel("reward", ("env/all/reward/total", "test/env/all/reward/total"), "mean reward"),
    Panel("correct", ("env/all/correct", "test/env/all/correct"), "fraction", fraction=True),
    Panel("well-formatted answers", ("env/all/format", "test/env/all/format"), "fraction", fraction=True),
    Panel("KL(student || teacher) per token", ("teacher_kl", "test/teacher_kl"), "nats"),
    Panel("KL(sample || train)", ("optim/kl_sample_train_v1", "optim/kl_sample_train_v2"), "nats"),
    Panel("DPO loss", ("dpo_loss", "test/dpo_loss"), "loss", requires="dpo_loss"),
    Panel("DPO accuracy (chosen > rejected)", ("accuracy", "test/accuracy"), "fraction", requires="dpo_loss",
          fraction=True),
    Panel("DPO margin", ("margin", "test/margin"), "beta * log-ratio margin", requires="dpo_loss"),
    Panel("DPO implicit rewards", ("chosen_reward", "rejected_reward", "test/chosen_reward",
                                   "test/rejected_reward"), "beta * log-ratio", requires="dpo_loss"),
    Panel("learning rate", ("learning_rate", "optim/lr"), "lr", smoothable=False),
)


@dataclass
class Run:
    """A run folder's name and its metrics rows."""

    name: str
    rows: list[dict[str, object]] = field(default_factory=list)

    @property
    def keys(self) -> set[str]:
        return {k for row in self.rows for k, v in row.items() if _is_number(v)} - NOT_METRICS

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """(steps, values) of the rows that logged a finite number for `key`."""
        steps, values = [], []
        for row in self.rows:
            step, value = row.get("step"), row.get(key)
            if _is_number(step) and _is_number(value):
                steps.append(float(step))
                values.append(float(value))
        return steps, values


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_run(log_path: Path | str) -> Run:
    """The run in `log_path`; NoMetricsError when it has no metrics."""
    path = Path(log_path)
    if not path.is_dir():
        raise NoMetricsError(f"{path} is not a folder; pass a run's log_path (the folder holding {METRICS_FILE}).")
    rows = read_metrics(path)
    if not rows:
        found = sorted(p.name for p in path.iterdir())[:10]
        raise NoMetricsError(
            f"{path} has no {METRICS_FILE} with any rows (it holds {found}); pass a run's log_path, "
            "written by a training run after its first step."
        )
    return Run(path.resolve().name, rows)


def panels_for(keys: Iterable[str]) -> list[Panel]:
    """The known panels with at least one logged key, then one panel of other evaluator metrics;
    for a run that logged none of those, a panel per metric (at most MAX_PANELS)."""
    keys = set(keys)
    applicable = [p for p in PANELS if p.requires is None or p.requires in keys]
    panels = [dataclasses.replace(p, keys=tuple(k for k in p.keys if k in keys)) for p in applicable]
    panels = [p for p in panels if p.keys]
    covered = {k for p in applicable for k in p.keys}
    evals = sorted(k for k in keys - covered if k.endswith(EVAL_SUFFIXES))
    if evals:
        panels.append(Panel("other evaluations", tuple(evals), "score", fraction=True))
    if not any(p.title != "learning rate" for p in panels):
        panels = [Panel(k, (k,)) for k in sorted(keys)] + [p for p in panels if p.title == "learning rate"]
    return panels[:MAX_PANELS]


def smoothed(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average (`weight` of the previous average), debiased like TensorBoard's."""
    out, average = [], 0.0
    for i, value in enumerate(values):
        average = weight * average + (1 - weight) * value
        out.append(average / (1 - weight ** (i + 1)))
    return out


def thinned(steps: list[float], values: list[float], max_points: int | None) -> tuple[list[float], list[float]]:
    """At most `max_points` evenly spaced points, the last one always kept (None: all of them)."""
    if max_points is None or len(steps) <= max_points:
        return steps, values
    stride = -(-len(steps) // max_points)
    picked = list(range(0, len(steps), stride))
    if picked[-1] != len(steps) - 1:
        picked.append(len(steps) - 1)
    return [steps[i] for i in picked], [values[i] for i in picked]


def draw_line(ax: Axes, run: Run, key: str, label: str, smooth: float = 0.0, max_points: int | None = None) -> None:
    """One metric of a run as a line: markers where it was logged at few steps (evaluations), dashed
    for held-out metrics, with its moving average when `smooth` > 0."""
    steps, values = run.series(key)
    sparse = len(steps) < 0.5 * len(run.rows) or len(steps) <= 20  # eval points: show them
    steps, values = thinned(steps, values, max_points)
    line = ax.plot(steps, values, marker="o" if sparse else None, markersize=3, label=label,
                   linestyle="--" if key.startswith("test/") else "-",  # held-out metrics dashed
                   alpha=0.35 if smooth > 0 and not sparse else 1.0)[0]
    if smooth > 0 and not sparse:
        ax.plot(steps, smoothed(values, smooth), color=line.get_color())


def _figure(panels: Sequence[Panel]) -> tuple[Figure, list[Axes]]:
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(5.2 * cols, 3.6 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    return fig, flat[: len(panels)]


def style_axes(ax: Axes, panel: Panel) -> None:
    """Labels, a log axis for a loss that is all positive, the whole 0..1 axis for a fraction,
    whole-number steps, a grid and the legend."""
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ys = [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]
    if panel.log_y and all((y > 0).all() for y in ys):
        ax.set_yscale("log")
    if panel.fraction and all(((y >= 0) & (y <= 1)).all() for y in ys):
        ax.set_ylim(-0.03, 1.03)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _finish(fig: Figure, axes: Sequence[Axes], panels: Sequence[Panel], title: str, out: Path) -> None:
    for ax, panel in zip(axes, panels):
        ax.set_title(panel.title, fontsize=10)
        style_axes(ax, panel)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    fig.savefig(tmp, dpi=110)  # then renamed: a viewer open on the file never sees half a picture
    tmp.replace(out)


def plot_run(run: Run, out: Path, smooth: float = 0.0) -> list[Panel]:
    """Write one run's panels to `out`; returns the panels drawn."""
    panels = panels_for(run.keys)
    fig, axes = _figure(panels)
    for ax, panel in zip(axes, panels):
        for key in panel.keys:
            draw_line(ax, run, key, key, smooth if panel.smoothable else 0.0)
    _finish(fig, axes, panels, run.name, out)
    return panels


def plot_comparison(runs: Sequence[Run], out: Path, smooth: float = 0.0) -> list[Panel]:
    """Write the panels of several runs to `out`, one line per run and key."""
    panels = panels_for(set().union(*(run.keys for run in runs)))
    fig, axes = _figure(panels)
    for ax, panel in zip(axes, panels):
        for run in runs:
            for key in (k for k in panel.keys if k in run.keys):
                label = run.name if len(panel.keys) == 1 else f"{run.name}: {key}"
                draw_line(ax, run, key, label, smooth if panel.smoothable else 0.0)
    _finish(fig, axes, panels, f"{len(runs)} runs", out)
    return panels


def describe(run: Run, panels: Sequence[Panel]) -> str:
    """One line per panel: each key's first and last logged value."""
    lines = []
    for panel in panels:
        parts = []
        for key in panel.keys:
            steps, values = run.series(key)
            if values:
                parts.append(f"{key} {values[0]:.4g} (step {steps[0]:g}) -> {values[-1]:.4g} (step {steps[-1]:g})")
        lines.append(f"  {panel.title}: " + "; ".join(parts))
    return "\n".join(lines)


@chz.chz
class PlotConfig:
    """`python -m recipes_lib.plot log_paths=RUN[,RUN...] [out=...] [smooth=...]`."""

    # Run folders holding metrics.jsonl, comma-separated; several also draw their comparison.
    log_paths: tuple[str, ...]
    # Where the comparison PNG goes (several runs); None: comparison.png next to the runs.
    out: str | None = None
    # EMA weight in [0, 1) over training curves; 0: no smoothing.
    smooth: float = 0.0

    @chz.validate
    def _check(self) -> None:
        if not 0.0 <= self.smooth < 1.0:
            raise ConfigurationError(f"smooth must be in [0, 1), got {self.smooth}")
        if not self.log_paths:
            raise ConfigurationError("log_paths is empty; pass the run folders, e.g. log_paths=runs/a,runs/b")


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Plot each run of `log_paths` (and their comparison when there are several); returns the PNG paths."""
    config = config_from_argv(chz.Blueprint(PlotConfig), argv)
    runs = [load_run(path) for path in config.log_paths]
    written = []
    for run, path in zip(runs, config.log_paths):
        out = Path(path) / RUN_PLOT
        panels = plot_run(run, out, config.smooth)
        print(f"wrote {out}\n{describe(run, panels)}")
        written.append(out)
    if len(runs) > 1:
        out = Path(config.out) if config.out else _common_parent(config.log_paths) / COMPARISON_PLOT
        plot_comparison(runs, out, config.smooth)
        print(f"wrote {out} (comparison of {', '.join(r.name for r in runs)})")
        written.append(out)
    return written


def _common_parent(paths: Sequence[str]) -> Path:
    resolved = [Path(p).resolve() for p in paths]
    common = resolved[0].parent
    while not all(common in p.parents for p in resolved):
        common = common.parent
    return common


if __name__ == "__main__":
    try:
        main()
    except (NoMetricsError, RecipesError) as exc:  # no metrics, or a corrupt line in them (file and line named)
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
