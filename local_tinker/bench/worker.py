"""One workload group in a process of its own: `python -m local_tinker.bench.worker OUT.json GROUP key=value...`.

Writes the group's `GroupResult` with this process's peak RSS to OUT.json (`run.run_isolated` reads it).
"""

import dataclasses
import json
import sys
from pathlib import Path

import chz

from local_tinker.bench.run import BenchConfig, peak_rss_mb, run_group
from local_tinker.command import config_from_argv
from local_tinker.main_thread import run_with_engine_on_main_thread

# Groups that time our engine run as a recipe does (`main_thread.run_with_engine_on_main_thread`); the peers' groups run on
# the main thread as a user's script would, and TRL, timed beside our engine, on the engine's thread.
HOSTED = ("trl", "rl_batch", "engine_train", "engine_sample")


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] in ("--help", "-h"):
        print(f"usage: {__doc__.splitlines()[0]}\n(started by `make bench`; run that, or python -m local_tinker.bench --help)",
              file=sys.stderr)
        raise SystemExit(0 if argv[:1] in (["--help"], ["-h"]) else 2)
    out, name, *config_argv = argv
    config = config_from_argv(chz.Blueprint(BenchConfig), config_argv)
    if name.partition("/")[0] in HOSTED:  # as recipes run: the engine serves from the main thread
        result = run_with_engine_on_main_thread(lambda: run_group(config, name))
    else:
        result = run_group(config, name)
    result.peak_rss_mb = peak_rss_mb()
    Path(out).write_text(json.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    main(sys.argv[1:])
