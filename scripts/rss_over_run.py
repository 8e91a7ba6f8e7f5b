"""Resident memory of a whole command over its run: does it grow?

    .venv/bin/python scripts/rss_over_run.py -- make demo
    .venv/bin/python scripts/rss_over_run.py window_s=20 -- .venv/bin/python -m recipes.rl_basic

Runs the command, reads the summed resident memory of its process tree (the command and every process
under it) twice a second from /proc, and prints, for each window of `window_s` seconds, the highest
and lowest reading in MiB, then the run's highest. A run that stays flat shows the same highs from
window to window after its first minute; a leak shows lows that climb. Linux only. Exits with the
command's status.
"""

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PERIOD_S = 0.5


@dataclass(frozen=True)
class Window:
    start_s: float
    high_mib: float
    low_mib: float


def tree_rss_mib(pid: int) -> float:
    """The summed VmRSS of `pid` and its descendants (0 for a process that is gone)."""
    return sum(_rss_mib(p) for p in _tree(pid))


def _tree(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid, *(p for child in children for p in _tree(int(child)))]


def _rss_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0  # a zombie has no VmRSS line


def windows(readings: list[tuple[float, float]], window_s: float) -> list[Window]:
    """The readings `(seconds since start, MiB)` grouped into consecutive windows of `window_s`."""
    groups: dict[int, list[float]] = {}
    for seconds, mib in readings:
        groups.setdefault(int(seconds // window_s), []).append(mib)
    return [Window(i * window_s, max(values), min(values)) for i, values in sorted(groups.items())]


def main(argv: list[str]) -> int:
    window_s, command = 15.0, argv
    if "--" in argv:
        options, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
        for option in options:
            key, _, value = option.partition("=")
            if key != "window_s" or not value:
                sys.exit(f"rss_over_run: unknown option {option!r}: expected window_s=SECONDS before --")
            try:
                window_s = float(value)
            except ValueError:
                window_s = 0.0
            if not window_s > 0:
                sys.exit(f"rss_over_run: window_s={value}: expected a number of seconds above 0")
    if not command:
        sys.exit("rss_over_run: no command: python scripts/rss_over_run.py [window_s=15] -- COMMAND ...")
    try:
        process = subprocess.Popen(command)
    except OSError as error:
        sys.exit(f"rss_over_run: cannot run {command[0]!r}: {error.strerror}")
    start, readings = time.monotonic(), []
    while process.poll() is None:
        readings.append((time.monotonic() - start, tree_rss_mib(process.pid)))
        time.sleep(PERIOD_S)
    for window in windows([r for r in readings if r[1] > 0], window_s):
        print(f"{window.start_s:6.0f} s  high {window.high_mib:7.0f} MiB  low {window.low_mib:7.0f} MiB")
    if readings:
        print(f"highest {max(mib for _, mib in readings):.0f} MiB over {len(readings)} readings")
    return process.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
