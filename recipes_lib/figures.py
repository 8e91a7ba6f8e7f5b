"""The README's learning figures as a markdown table, read from the runs' `metrics.jsonl`.

    python -m recipes_lib.figures out=docs/figures.md runs=runs/reproduce/sl_basic,runs/reproduce/rl_basic \
        metrics=test/exact_match,test/env/all/correct minutes=7.1,8.3

For each run the table gives a held-out metric's first logged value and its last (the evaluators run
before the first step and after the last), how many steps the file has rows for (a final evaluation
may add one), the wall-clock minutes of the run,
and the date the table was written. `scripts/reproduce.sh` runs the recipes and calls this; the
README quotes its output. A run whose metric was never logged is an error naming the run and the
metrics it did log, never a blank cell.
"""

import datetime
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
    return Figure(run=run_dir.name, metric=metric, first=values[0], last=values[-1], steps=steps, minutes=minutes)


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
        "| run | metric | first | last | steps logged | minutes |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {f.run} | `{f.metric}` | {_number(f.first)} | {_number(f.last)} | {f.steps} | {f.minutes:.1f} |"
              for f in figures]
    return "\n".join(lines) + "\n"


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
    figures = [figure(Path(run), metric, m) for run, metric, m in zip(runs, metrics, durations)]
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown_table(figures, datetime.date.today(), describe_machine()))
    print(out.read_text(), end="")


if __name__ == "__main__":
    run_recipe(main, chz.Blueprint(Config))
