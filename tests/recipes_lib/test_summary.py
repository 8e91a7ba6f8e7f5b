"""The end-of-run summary and metrics.png, on run folders written by hand."""

import io
import json
import logging
import types
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from recipes_lib import plot, summary
from recipes_lib.summary import RunReport, metric_changes, next_commands, render, summarize

pytestmark = pytest.mark.draws  # its runs draw metrics.png and report.html (tests/conftest.py)

ROWS: list[dict[str, Any]] = [
    {"step": 0, "train_mean_nll": 2.5, "learning_rate": 1e-3, "num_tokens": 100, "test/nll": 2.4,
     "test/exact_match": 0.0, "time/eval": 1.0},
    {"step": 1, "train_mean_nll": 1.0, "learning_rate": 5e-4, "num_tokens": 120},
    {"step": 2, "train_mean_nll": 1.25, "learning_rate": 2e-4, "num_tokens": 80, "test/nll": 0.5,
     "test/exact_match": 0.75, "time/eval": 1.0},
    {"step": 3, "train_mean_nll": 0.5, "learning_rate": 1e-4, "num_tokens": 100, "test/nll": 0.75,
     "test/exact_match": 0.5, "time/eval": 1.0},
]
CHECKPOINTS: list[dict[str, Any]] = [
    {"name": "000002", "batch": 2, "state_path": "local://run-x/weights/000002",
     "sampler_path": "local://run-x/sampler_weights/000002"},
    {"name": "final", "batch": 4, "final": True, "state_path": "local://run-x/weights/final",
     "sampler_path": "local://run-x/sampler_weights/final"},
]


def _run_folder(path: Path, rows: list[dict[str, Any]] = ROWS, checkpoints: list[dict[str, Any]] = CHECKPOINTS
                ) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "checkpoints.jsonl").write_text("".join(json.dumps(c) + "\n" for c in checkpoints))
    return path


def test_first_last_and_best_by_hand() -> None:
    nll, exact = metric_changes(ROWS, ["test/nll", "test/exact_match"])
    assert (nll.first, nll.first_step, nll.last, nll.last_step, nll.best, nll.best_step) == (2.4, 0, 0.75, 3, 0.5, 2)
    assert (exact.first, exact.last, exact.best, exact.best_step) == (0.0, 0.5, 0.75, 2)  # higher is better
    assert metric_changes(ROWS, ["never_logged"]) == []


def test_summary_reads_the_run_folder(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path / "run")
    summary = summarize(folder, wall_seconds=10.0, start_step=1, total_steps=4)
    assert [c.key for c in summary.changes] == ["train_mean_nll", "test/nll", "test/exact_match"]  # no lr
    assert summary.steps == 3 and summary.tokens == 120 + 80 + 100 and summary.tokens_per_second == 30.0
    assert summary.model_path == "local://run-x/sampler_weights/final"
    text = render(summary)
    assert text.splitlines()[0] == f"Finished {folder}: 3 steps in 0:10, 30 tokens/s"
    assert "  train_mean_nll    2.5 -> 0.5\n" in text  # the last is the best: not repeated
    assert "  test/nll          2.4 -> 0.75  (best 0.5 at step 2)\n" in text
    assert "  test/exact_match  0 -> 0.5  (best 0.75 at step 2)\n" in text
    assert "(resumable state: local://run-x/weights/final)" in text
    assert text.endswith("Next:\n" + "\n".join(f"  {c}" for c in next_commands(summary)))
    assert next_commands(summary) == [
        f"python -m recipes.chat log_path={folder}",
        f"python -m recipes_lib.export model_path=local://run-x/sampler_weights/final out={folder}/export",
        f"python -m recipes_lib.plot log_paths={folder}",
    ]


def test_a_hosted_run_exports_its_training_state(tmp_path: Path) -> None:
    hosted = [{"name": "final", "batch": 4, "final": True, "state_path": "tinker://abc/weights/final",
               "sampler_path": "tinker://abc/sampler_weights/final"}]
    summary = summarize(_run_folder(tmp_path / "run", checkpoints=hosted), 1.0, 0, 4)
    assert summary.model_path == "tinker://abc/sampler_weights/final"
    assert f"python -m recipes_lib.export model_path=tinker://abc/weights/final out={tmp_path}/run/export" \
        in next_commands(summary)


def test_paths_with_spaces_are_quoted_and_no_checkpoint_means_no_chat(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path / "my run", checkpoints=[])
    summary = summarize(folder, 1.0, 0, 4)
    assert summary.checkpoint is None
    assert next_commands(summary) == [f"python -m recipes_lib.plot log_paths='{folder}'"]


def test_report_draws_at_evaluations_while_drawing_stays_a_small_share_and_at_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a fake clock where each drawing takes 0.5 s, an evaluation redraws once 0.5 / DRAW_SHARE = 10 s
    have passed since the last drawing (since the start before the first: FIRST_DRAWING_S is 0.5 s too);
    the end draws whatever was logged since."""
    clock = [0.0]
    monkeypatch.setattr(summary, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    draw = summary.write_plot

    def slow_draw(log_path: Path | str) -> list[str] | None:
        clock[0] += 0.5
        return draw(log_path)

    monkeypatch.setattr(summary, "write_plot", slow_draw)
    assert summary.DRAW_SHARE == 0.05 and summary.FIRST_DRAWING_S == 0.5
    folder = _run_folder(tmp_path / "run", rows=[])
    png = folder / "metrics.png"
    buffer = io.StringIO()
    report = RunReport(folder, total_steps=6, console=Console(file=buffer, width=80))
    evaluation = {"test/nll": 0.4, "test/exact_match": 0.75, "time/eval": 1.0}
    rows = [*ROWS, {"step": 4, "train_mean_nll": 0.5, "learning_rate": 1e-4, "num_tokens": 100, **evaluation},
            {"step": 5, "train_mean_nll": 0.5, "learning_rate": 1e-4, "num_tokens": 100}]
    # steps 0, 2, 3 and 4 are evaluations: 0 comes at the start; 2 comes 10 s in; 3 comes 0 s after a
    # 0.5 s drawing; 4 comes 10 s after it
    seconds_before = {0: 0.0, 1: 0.0, 2: 10.0, 3: 0.0, 4: 10.0, 5: 0.0}
    drawn = {0: False, 1: False, 2: True, 3: False, 4: True, 5: False}
    written = ""
    for row in rows:
        clock[0] += seconds_before[int(row["step"])]
        png.unlink(missing_ok=True)
        written += json.dumps(row) + "\n"
        (folder / "metrics.jsonl").write_text(written)  # what JsonlLogger does before the report sees the row
        report.log_metrics({k: v for k, v in row.items() if k != "step"}, int(row["step"]))
        assert png.exists() == drawn[int(row["step"])], row["step"]
    report.close()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # and at the end, holding the last step
    assert report.summary is not None and report.summary.steps == 6 and report.summary.tokens == 600
    assert buffer.getvalue() == render(report.summary) + "\n"
    assert f"curves            {png} (loss (NLL per token), held-out exact match, learning rate)" in buffer.getvalue()


def test_a_drawing_failure_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(plot, "plot_run", broken)
    report = RunReport(_run_folder(tmp_path / "run"), total_steps=4)
    with caplog.at_level(logging.WARNING):
        report.log_metrics({"test/nll": 1.0}, 3)
        report.close()
    assert report.summary is not None and report.summary.plot_panels is None
    assert "Could not draw" in caplog.text and "RuntimeError: no fonts" in caplog.text


def test_a_stopped_run_says_how_to_resume(tmp_path: Path) -> None:
    buffer = io.StringIO()
    report = RunReport(_run_folder(tmp_path / "run"), total_steps=10, console=Console(file=buffer, width=80))
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        finally:
            report.close()
    assert report.summary is None
    assert buffer.getvalue().startswith("Stopped (KeyboardInterrupt);")
    assert "behavior_if_log_dir_exists=resume" in buffer.getvalue()
