"""The sweep summary: final numbers per run, the best marked, the PNG; and the launcher script."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from recipes_lib import sweep
from recipes_lib.exceptions import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def _run(folder: Path, lr: float, train: list[float], test: list[float | None], acc: float | None = None,
         progress: float = 1.0) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"learning_rate": lr, "model_name": "m"}))
    rows = []
    for step, (train_nll, test_nll) in enumerate(zip(train, test)):
        row = {"step": step, "progress": progress * (step + 1) / len(train), "train_mean_nll": train_nll}
        if test_nll is not None:
            row["test/nll"] = test_nll
        rows.append(row)
    if acc is not None:
        rows[-1]["test/exact_match"] = acc
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 9, "trunc')


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    _run(tmp_path / "lr-0.003", 3e-3, [2.0, 1.9], [2.1, 2.05], acc=0.5)
    _run(tmp_path / "lr-0.001", 1e-3, [2.0, 1.2], [2.1, None], acc=0.9)  # last test/nll from step 0
    _run(tmp_path / "lr-0.0001", 1e-4, [2.0, 1.8], [2.1, 2.0], acc=0.1)
    _run(tmp_path / "lr-0.01", 1e-2, [2.0, 0.5], [2.1, 0.4], progress=0.5)  # unfinished: never best
    (tmp_path / "notes").mkdir()
    return tmp_path


def test_summaries_take_the_last_logged_values(sweep_dir: Path) -> None:
    runs = sweep.summarize_sweep(sweep_dir)
    assert [r.learning_rate for r in runs] == [1e-4, 1e-3, 3e-3, 1e-2]
    lr_1e3 = runs[1]
    assert (lr_1e3.final_train_loss, lr_1e3.final_test_loss, lr_1e3.accuracy) == (1.2, 2.1, 0.9)
    assert not runs[3].finished


def test_best_is_the_lowest_final_test_loss_among_finished_runs(sweep_dir: Path) -> None:
    runs = sweep.summarize_sweep(sweep_dir)
    assert sweep.selection_metric(runs) == "final_test_loss"
    assert sweep.best_run(runs).learning_rate == 1e-4  # type: ignore[union-attr]  # 2.0 < 2.05 < 2.1


def test_without_test_loss_the_train_loss_decides(tmp_path: Path) -> None:
    _run(tmp_path / "a", 1e-3, [2.0, 1.0], [None, None])
    _run(tmp_path / "b", 3e-3, [2.0, 1.5], [None, None])
    runs = sweep.summarize_sweep(tmp_path)
    assert sweep.selection_metric(runs) == "final_train_loss" and sweep.best_run(runs).name == "a"  # type: ignore[union-attr]


def test_command_prints_the_table_and_writes_the_png(sweep_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep.main([f"sweep_dir={sweep_dir}"]) == 0
    out = capsys.readouterr().out
    assert "best learning rate: 0.0001 (lr-0.0001)" in out and "90.0%" in out
    star_line = next(line for line in out.splitlines() if "*" in line and "lr-" in line)
    assert "lr-0.0001" in star_line
    assert (sweep_dir / "lr_sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no runs"):
        sweep.main([f"sweep_dir={tmp_path}"])


def test_a_missing_folder_exits_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        sweep.main([f"sweep_dir={tmp_path / 'nowhere'}"])
    assert info.value.code == 2 and "nowhere is not a folder" in capsys.readouterr().err


def test_launcher_runs_sl_basic_once_per_learning_rate(tmp_path: Path) -> None:
    """scripts/sweep_lr.sh with a stand-in PYTHON that records its arguments."""
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "LRS": "1e-4 3e-3"}
    subprocess.run([str(ROOT / "scripts" / "sweep_lr.sh"), str(tmp_path / "sw"), "max_steps=5"], env=env, check=True,
                   capture_output=True)
    assert calls.read_text().splitlines() == [
        f"-m recipes.sl_basic learning_rate=1e-4 log_path={tmp_path}/sw/lr-1e-4 behavior_if_log_dir_exists=resume max_steps=5",
        f"-m recipes.sl_basic learning_rate=3e-3 log_path={tmp_path}/sw/lr-3e-3 behavior_if_log_dir_exists=resume max_steps=5",
        f"-m recipes_lib.sweep sweep_dir={tmp_path}/sw",
    ]
