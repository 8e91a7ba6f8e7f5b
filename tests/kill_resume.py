"""Helpers for SIGKILL-and-resume tests: start a recipe as a process, kill it with SIGKILL once it has
saved a checkpoint, and compare the resumed run's metrics.jsonl with an uninterrupted run's."""

import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipes_lib.checkpoints import load_checkpoints
from tests import forked

REPO = Path(__file__).resolve().parents[1]


def start(module: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
    """`python -m <module> <argv>` from the repository root, on one thread like the in-process tests."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return forked.popen([sys.executable, "-m", module, *argv], env=env, cwd=REPO,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def metrics(log_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def _logged_past(log_path: Path, step: int) -> bool:
    path = log_path / "metrics.jsonl"
    if not path.exists():
        return False
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines() if line.endswith("}")]
    return any(s >= step for s in steps)


def kill_after_checkpoint(process: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 240) -> int:
    """SIGKILL `process` once `log_path` holds a periodic checkpoint and a metrics line of a step after
    it (which the resumed run must drop and redo); returns the checkpoint's next step."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, "the run ended before it could be killed: " + (
            process.stderr.read().decode() if process.stderr else "")
        assert time.monotonic() < deadline, "no checkpoint appeared"
        records = [r for r in load_checkpoints(log_path) if r.state_path and not r.final] \
            if (log_path / "checkpoints.jsonl").exists() else []
        if records and _logged_past(log_path, records[0].batch):
            break
        time.sleep(0.01)
    process.kill()  # SIGKILL: no cleanup, no flush beyond what was already written
    assert process.wait() == -9, "the run had already finished; it was not killed mid-training"
    return records[0].batch


class KillInBackground:
    """`kill_after_checkpoint` on a thread, so the test can run the uninterrupted run meanwhile
    (the process spends its first seconds importing)."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path):
        self._result: list[int] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(process, log_path), daemon=True)
        self._thread.start()

    def _run(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        try:
            self._result.append(kill_after_checkpoint(process, log_path))
        except BaseException as exc:  # re-raised in the test's thread by join()
            self._error.append(exc)
            process.kill()

    def join(self) -> int:
        """The killed run's checkpoint step (raises what the kill raised)."""
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._result[0]


def finish(process: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    _, stderr = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, stderr.decode()


# Metrics computed from the sampler's log-probs. The local engine batches concurrent sampling
# requests, and which requests share a batch depends on timing; the left padding a batch needs moves
# a request's tokens in its tensors, which can change its log-probs in the last bits (measured:
# up to 1e-6 nats on one token of six). Those differences reach these metrics, and through the
# importance weights the next updates, at that size, and they add up over steps (seen under a loaded
# machine: 2.6e-5 relative in `optim/loss_sum` at step 5, hence 1e-4; and since group-centred
# advantages make `optim/loss_sum` cancel to ~1e-7 at times, its terms' absolute differences stay:
# seen 4.8e-7 against -7.2e-7, hence 1e-5 absolute); sampled tokens, rewards and
# counts are not affected (a token would flip only if its uniform draw fell within 1e-6 of a CDF
# boundary).
LOGPROB_METRICS = frozenset({"optim/kl_sample_train_v1", "optim/kl_sample_train_v2", "optim/entropy",
                             "optim/loss_sum", "kl_policy_base"})


def _same(key: str, got: Any, wanted: Any) -> bool:
    if key in LOGPROB_METRICS and isinstance(got, float) and isinstance(wanted, float):
        return math.isclose(got, wanted, rel_tol=1e-4, abs_tol=1e-5)
    return bool(got == wanted)


def without_timings(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row without its wall-clock keys (`time/...`)."""
    return {key: value for key, value in row.items() if not key.startswith("time/")}


def assert_same_metrics(resumed: Path, uninterrupted: Path) -> list[dict[str, Any]]:
    """Every line of the resumed run equals the uninterrupted run's (timings aside; `LOGPROB_METRICS`
    to 1e-4 relative), each step once."""
    rows, expected = metrics(resumed), metrics(uninterrupted)
    steps = [row["step"] for row in rows]
    assert steps == sorted(set(steps)), f"a step is missing or repeated: {steps}"
    assert steps == [row["step"] for row in expected]
    for row, want in zip(rows, expected, strict=True):
        got, wanted = without_timings(row), without_timings(want)
        differ = {key: (got.get(key), wanted.get(key)) for key in got.keys() | wanted.keys()
                  if key not in got or key not in wanted or not _same(key, got[key], wanted[key])}
        assert not differ, f"step {row['step']}: (resumed, uninterrupted) {differ}"
    return rows
