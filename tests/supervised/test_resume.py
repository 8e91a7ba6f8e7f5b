"""A run killed with SIGKILL and started again ends exactly where an uninterrupted run ends."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from recipes_lib.checkpoints import load_checkpoints
from supervised import train
from tests.supervised.test_train import TINY, tiny_config

ARGS = ["dataset.num_train=32", "save_every=2", "eval_every=3", "behavior_if_log_dir_exists=resume"]


def _metrics(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def _start(log_path: Path) -> subprocess.Popen:
    """`python -m recipes.sl_basic` with the same keys as `tiny_config(log_path, *ARGS)`."""
    argv = [*TINY, "backend.precision=float32", f"log_path={log_path}", *ARGS]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as the in-process run (tests/supervised/conftest.py)
    return subprocess.Popen([sys.executable, "-m", "recipes.sl_basic", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])


def _kill_after_first_checkpoint(process: subprocess.Popen, log_path: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not load_checkpoints(log_path):
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    process.kill()  # SIGKILL: no cleanup, no flush beyond what was already written
    assert process.wait() == -9, "the run had already finished; it was not killed mid-training"


def test_sigkill_then_rerun_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    uninterrupted = tmp_path / "uninterrupted"
    train.main(tiny_config(uninterrupted, *ARGS))

    killed = tmp_path / "killed"
    _kill_after_first_checkpoint(_start(killed), killed)
    steps_before = [row["step"] for row in _metrics(killed)]
    rerun = _start(killed)
    _, stderr = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, stderr.decode()

    rows, expected = _metrics(killed), _metrics(uninterrupted)
    assert [row["step"] for row in rows] == list(range(8))  # none duplicated, none missing, none broken
    assert len(steps_before) < 8
    for key in ("train_mean_nll", "test/nll", "test/exact_match", "learning_rate"):
        assert rows[-1][key] == expected[-1][key], key
    assert [row["train_mean_nll"] for row in rows] == [row["train_mean_nll"] for row in expected]
    names = [record.name for record in load_checkpoints(killed)]
    assert names[-1] == "final" and names.count("final") == 1
