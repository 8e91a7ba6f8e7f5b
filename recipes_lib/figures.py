"""The README's learning figures as a markdown table, read from the runs' `metrics.jsonl`.

    python -m recipes_lib.figures out=docs/figures.md runs=runs/reproduce/sl_basic,runs/reproduce/rl_basic \
        metrics=test/exact_match,test/env/all/correct minutes=7.1,8.3 tasks=recipes/number_words,recipes/arithmetic

For each run the table gives a held-out metric's first logged value and its last (the evaluators run
before the first step and after the last), how many steps the file has rows for (a final evaluation
may add one), the wall-clock minutes of the run,
and the date the table was written. `scripts/reproduce.sh` runs the recipes and calls this; the
README quotes its output. A run whose metric was never logged is an error naming the run and the
metrics it did log, never a blank cell.

With `tasks=` (one task folder per run) each folder's README gets the same rows, with the date and
machine, between two markers (`MEASURED_BEGIN`, `MEASURED_END`) that the README must already hold; the
text between them is replaced, the rest of the README is kept. `tool_report=` adds the tool-calculator
recipe's `accuracies.json` to the table, and `tool_task=` to that folder's README the same way.
"""

import datetime
import json
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chz

from recipes_lib.cli import run_recipe
from recipes_lib.exceptions import DataFormatError
from recipes_lib.logging import read_metrics


@dataclass(frozen=True)
class Figure:
    """One run's metric, first logged value to last."""

    run: str
    metric: str
    first: float
    last: float
    steps: int
    minutes: float
    precision: str = "not recorded"  # the run's backend.precision, from its config.json


def figure(run_dir: Path, metric: str, minutes: float) -> Figure:
    """`metric`'s first and last values in `run_dir/metrics.jsonl` (rows without it are skipped)."""
    if not (run_dir / "metrics.jsonl").is_file():
        raise DataFormatError(f"{run_dir / 'metrics.jsonl'} does not exist: is {run_dir} a finished run's log_path?")
    rows = read_metrics(run_dir)
    values = [float(row[metric]) for row in rows if row.get(metric) is not None]
    if not values:
        logged = sorted({key for row in rows for key in row})
        raise DataFormatError(f"{run_dir / 'metrics.jsonl'}: no value of {metric!r} in {len(rows)} rows; "
                              f"logged metrics: {logged}")
    steps = len({row["step"] for row in rows})
    return Figure(run=run_dir.name, metric=metric, first=values[0], last=values[-1], steps=steps, minutes=minutes,
                  precision=run_precision(run_dir))


def run_precision(run_dir: Path) -> str:
    """The engine precision a run asked for (`backend.precision` in its config.json), as written there."""
    try:
        precision = json.loads((run_dir / "config.json").read_text())["backend"]["precision"]
    except (OSError, ValueError, KeyError, TypeError):
        return "not recorded"
    return str(precision)


def _number(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3g}"


def describe_machine(cpuinfo: str | None = None) -> str:
    """The CPU model, its cores, the instruction set that decides the engine's precision, and that
    precision: "AMD EPYC 9R14, 2 cores, AVX512-BF16; `auto` precision: bf16"."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
                 platform.processor() or platform.machine())
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), []))
    isa = next((name for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"),
                                        ("avx512f", "AVX-512 without bf16"), ("avx2", "AVX2")) if flag in flags),
               platform.machine())
    precision = "bf16" if isa in ("AMX", "AVX512-BF16") else "fp32"
    cores = sum(1 for line in cpuinfo.splitlines() if line.startswith("processor")) or os.cpu_count()
    return f"{model}, {cores} cores, {isa}; `auto` precision: {precision}"


def markdown_table(figures: Sequence[Figure], date: datetime.date, machine: str) -> str:
    """The page of learning figures: the command that makes it, the date and machine, the table."""
    lines = [
        "# Learning figures",
        "",
        "```bash",
        "make reproduce",
        "```",
        "",
        f"Produced by `scripts/reproduce.sh` on {date.isoformat()}, on {machine}.",
        "",
        "| run | metric | first | last | steps logged | minutes | precision |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_row(f) for f in figures]
    return "\n".join(lines) + "\n"


MEASURED_BEGIN = "<!-- measured: written by `make reproduce` (recipes_lib/figures.py); edits here are overwritten -->"
MEASURED_END = "<!-- end of measured -->"

def task_section(figures: Sequence[Figure], date: datetime.date, machine: str) -> str:
    """A task README's measured block: the rows of its recipes, with the date and machine."""
    lines = [f"Measured by `make reproduce` on {date.isoformat()}, on {machine}:", "",
             "| recipe | held-out metric | before | after | steps logged | minutes | precision |",
             "|---|---|---|---|---|---|---|"]
    lines += [_row(f) for f in figures]
    return "\n".join(lines)


def _row(f: Figure) -> str:
    return (f"| {f.run} | `{f.metric}` | {_number(f.first)} | {_number(f.last)} | {f.steps} | {f.minutes:.1f} "
            f"| {f.precision} |")


def tool_calculator_section(report: dict[str, Any], minutes: float, date: datetime.date, machine: str,
                            precision: str = "not recorded") -> str:
    """The tool-calculator recipe's measured block, from its `accuracies.json`."""
    greedy, sampled = report["accuracy"], report["sampled_accuracy"]

    def percent(value: float) -> str:
        return f"{100 * value:.1f} %"

    return "\n".join([
        f"Measured by `make reproduce` on {date.isoformat()}, on {machine}; this recipe runs {precision}; "
        f"{minutes:.1f} min for every stage:", "",
        f"| held-out accuracy ({report['held_out_problems']} problems) | greedy | one sample at T=1 |",
        "|---|---|---|",
        f"| base model, no tools | {percent(greedy['without_tools'])} | |",
        f"| base model, calculator offered | {percent(greedy['with_tools'])} | |",
        f"| after the supervised warm-up | {percent(greedy['after_warmup'])} | {percent(sampled['after_warmup'])} |",
        f"| after RL | {percent(greedy['after_rl'])} | {percent(sampled['after_rl'])} |",
    ])


def tool_calculator_line(report: dict[str, Any], minutes: float) -> str:
    """The tool-calculator recipe's line under the figures table."""
    greedy, sampled = report["accuracy"], report["sampled_accuracy"]
    return (f"tool_calculator ({report['held_out_problems']} held-out problems, {minutes:.1f} min), greedy: "
            f"no tools {greedy['without_tools']:.3g}, calculator offered {greedy['with_tools']:.3g}, "
            f"after the warm-up {greedy['after_warmup']:.3g}, after RL {greedy['after_rl']:.3g}; "
            f"sampled at T=1: after the warm-up {sampled['after_warmup']:.3g}, after RL {sampled['after_rl']:.3g}.")


def replace_measured(readme: Path, section: str) -> None:
    """Put `section` between the README's two markers (written whole, then renamed into place)."""
    if not readme.is_file():
        raise DataFormatError(f"{readme} does not exist: tasks= names task folders, each with a README.md.")
    text = readme.read_text()
    begin, end = text.find(MEASURED_BEGIN), text.find(MEASURED_END)
    if begin < 0 or end < begin:
        raise DataFormatError(f"{readme} has no measured block: add the lines {MEASURED_BEGIN!r} and "
                              f"{MEASURED_END!r} where the figures go.")
    updated = text[:begin + len(MEASURED_BEGIN)] + "\n" + section + "\n" + text[end:]
    temporary = readme.with_name(readme.name + ".tmp")
    temporary.write_text(updated)
    temporary.replace(readme)


@chz.chz
class Config:
    # Run folders, comma-separated; each has a metrics.jsonl.
    runs: str
    # One metric per run, comma-separated, in the same order.
    metrics: str
    # Wall-clock minutes of each run, comma-separated, in the same order.
    minutes: str
    # Where the markdown table goes.
    out: str = "docs/figures.md"
    # Task folders, comma-separated, one per run: each README.md gets its runs' rows. Empty: none.
    tasks: str = ""
    # The tool-calculator recipe's accuracies.json, and its minutes. Empty: not reported.
    tool_report: str = ""
    tool_minutes: float = 0.0
    # The tool-calculator task folder whose README.md gets tool_report's block. Empty: none.
    tool_task: str = ""


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(config: Config) -> None:
    runs, metrics, minutes = _split(config.runs), _split(config.metrics), _split(config.minutes)
    if not len(runs) == len(metrics) == len(minutes):
        raise DataFormatError(f"runs, metrics and minutes need one entry per run; got {len(runs)}, "
                              f"{len(metrics)} and {len(minutes)}.")
    try:
        durations = [float(m) for m in minutes]
    except ValueError:
        raise DataFormatError(f"minutes={config.minutes!r}: expected comma-separated numbers.") from None
    tasks = _split(config.tasks)
    if tasks and len(tasks) != len(runs):
        raise DataFormatError(f"tasks= needs one task folder per run; got {len(tasks)} for {len(runs)} runs.")
    figures = [figure(Path(run), metric, m) for run, metric, m in zip(runs, metrics, durations)]
    date, machine = datetime.date.today(), describe_machine()
    table = markdown_table(figures, date, machine)
    report = _tool_report(Path(config.tool_report)) if config.tool_report else None
    if report is not None:
        table += "\n" + tool_calculator_line(report, config.tool_minutes) + "\n"
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)
    for task in dict.fromkeys(tasks):
        replace_measured(Path(task) / "README.md",
                         task_section([f for f, t in zip(figures, tasks) if t == task], date, machine))
    if report is not None and config.tool_task:
        replace_measured(Path(config.tool_task) / "README.md",
                         tool_calculator_section(report, config.tool_minutes, date, machine,
                                                 run_precision(Path(config.tool_report).parent / "rl")))
    print(out.read_text(), end="")


def _tool_report(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text())
        _ = (report["held_out_problems"], report["accuracy"]["after_rl"], report["sampled_accuracy"]["after_rl"])
    except FileNotFoundError:
        raise DataFormatError(f"{path} does not exist: is it a finished tool_calculator run's accuracies.json?") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataFormatError(f"{path}: not a tool_calculator accuracies.json ({type(exc).__name__}: {exc}).") from None
    return dict(report)


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
