"""One workload group in a process of its own: `python -m recipes_lib.bench.worker OUT.json GROUP key=value...`.

Writes the group's `GroupResult` with this process's peak RSS to OUT.json (`run.run_isolated` reads it).
"""

import dataclasses
import json
import sys
from pathlib import Path

import chz

from recipes_lib.bench.run import BenchConfig, peak_rss_mb, run_group
from recipes_lib.cli import config_from_argv


def main(argv: list[str]) -> None:
    out, name, *config_argv = argv
    result = run_group(config_from_argv(chz.Blueprint(BenchConfig), config_argv), name)
    result.peak_rss_mb = peak_rss_mb()
    Path(out).write_text(json.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    main(sys.argv[1:])
