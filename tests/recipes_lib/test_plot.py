"""`python -m recipes_lib.plot`: panels chosen per pipeline from metrics.jsonl, PNG files written for one
run and a comparison, and a clear error for a folder without metrics."""

import json
import sys
from pathlib import Path

import pytest

from recipes_lib.plot import NoMetricsError, Run, load_run, main, panels_for, smoothed
from tests import forked

pytestmark = pytest.mark.draws  # its runs draw metrics.png and report.html (tests/conftest.py)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_run(folder: Path, rows: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _sl_rows(scale: float = 1.0) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for step in range(10):
        row: dict[str, object] = {"step": step, "progress": (step + 1) / 10, "learning_rate": 1e-3 * (1 - step / 10),
                                  "train_mean_nll": scale * (3.0 - 0.25 * step)}
        if step in (0, 5, 9):
            row.update({"test/nll": scale * (3.1 - 0.2 * step), "test/exact_match": step / 10})
        rows.append(row)
    return rows


RL_ROWS = [{"step": s, "env/all/reward/total": 0.1 * s, "env/all/correct": 0.1 * s,
            "optim/kl_sample_train_v1": 0.001 * s, "optim/kl_sample_train_v2": None,
            **({"test/env/all/correct": 0.05 * s} if s % 4 == 0 else {})} for s in range(9)]
DPO_ROWS = [{"step": s, "dpo_loss": 0.69 - 0.05 * s, "accuracy": 0.5 + 0.05 * s, "margin": 0.1 * s,
             "chosen_reward": 0.05 * s, "rejected_reward": -0.05 * s, "learning_rate": 1e-5} for s in range(6)]


def _titles(rows: list[dict[str, object]]) -> list[str]:
    return [p.title for p in panels_for(Run("r", rows).keys)]


def test_each_pipeline_gets_its_panels() -> None:
    assert _titles(_sl_rows()) == ["loss (NLL per token)", "held-out exact match", "learning rate"]
    assert _titles(RL_ROWS) == ["reward", "correct", "KL(sample || train)"]
    assert _titles(DPO_ROWS) == ["DPO loss", "DPO accuracy (chosen > rejected)", "DPO margin",
                                 "DPO implicit rewards", "learning rate"]
    correct = panels_for(Run("r", RL_ROWS).keys)[1]
    assert correct.keys == ("env/all/correct", "test/env/all/correct")
    # a key logged only as null (NaN) is not drawn
    assert panels_for(Run("r", RL_ROWS).keys)[2].keys == ("optim/kl_sample_train_v1",)


def test_other_evaluator_metrics_and_unknown_runs_still_plot() -> None:
    rows = [{"step": 0, "train_mean_nll": 2.0, "inspect/qa/accuracy": 0.4, "inspect/qa/stderr": 0.1}]
    assert [(p.title, p.keys) for p in panels_for(Run("r", rows).keys)][-1] == (
        "other evaluations", ("inspect/qa/accuracy",))
    # a supervised run's `test/accuracy` is an evaluator's, not DPO's (which needs dpo_loss)
    distill = [{"step": 0, "train_mean_nll": 2.0, "test/accuracy": 0.0, "test/teacher_agreement": 0.0,
                "test/valid_label": 0.0, "learning_rate": 1e-3}]
    assert [(p.title, p.keys) for p in panels_for(Run("r", distill).keys)] == [
        ("loss (NLL per token)", ("train_mean_nll",)), ("learning rate", ("learning_rate",)),
        ("other evaluations", ("test/accuracy", "test/teacher_agreement", "test/valid_label"))]
    unknown = [{"step": 0, "my/metric": 1.0, "other": 2.0}]
    assert _titles(unknown) == ["my/metric", "other"]


def test_series_skips_missing_and_null_values() -> None:
    rows: list[dict[str, object]] = [{"step": 0, "x": 1.0}, {"step": 1}, {"step": 2, "x": None}, {"step": 3, "x": 4}]
    assert Run("r", rows).series("x") == ([0.0, 3.0], [1.0, 4.0])


def test_smoothing_is_a_debiased_moving_average() -> None:
    # by hand: 0.5*0 + 0.5*1 = 0.5, /(1-0.5) = 1; 0.5*0.5 + 0.5*3 = 1.75, /(1-0.25) = 7/3
    assert smoothed([1.0, 3.0], 0.5) == pytest.approx([1.0, 7 / 3])
    assert smoothed([1.0, 3.0], 0.0) == [1.0, 3.0]


def test_one_png_per_run_and_a_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_write_run(tmp_path / "sweep" / "lr1", _sl_rows()), _write_run(tmp_path / "sweep" / "lr2", _sl_rows(0.5)),
            _write_run(tmp_path / "rl", RL_ROWS), _write_run(tmp_path / "dpo", DPO_ROWS)]
    written = main([f"log_paths={','.join(str(p) for p in runs)}", "smooth=0.6"])
    assert written == [p / "metrics.png" for p in runs] + [tmp_path / "comparison.png"]
    for png in written:
        assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "train_mean_nll 3 (step 0) -> 0.75 (step 9)" in out
    assert "comparison of lr1, lr2, rl, dpo" in out


def test_comparison_path_can_be_chosen(tmp_path: Path) -> None:
    runs = [_write_run(tmp_path / "a", _sl_rows()), _write_run(tmp_path / "b", _sl_rows(0.5))]
    assert main([f"log_paths={runs[0]},{runs[1]}", f"out={tmp_path / 'cmp' / 'lr.png'}"])[-1] == tmp_path / "cmp" / "lr.png"
    assert (tmp_path / "cmp" / "lr.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(("argv", "message"), [(["log_paths=a", "smooth=1"], "smooth must be in [0, 1), got 1"),
                                               (["smooth=0.5"], "log_paths")])
def test_bad_arguments_exit_with_the_reason(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_a_folder_without_metrics_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(NoMetricsError, match=r"has no metrics.jsonl with any rows \(it holds \['config.json'\]\)"):
        load_run(tmp_path / "empty")
    with pytest.raises(NoMetricsError, match="is not a folder"):
        load_run(tmp_path / "nowhere")
    result = forked.run([sys.executable, "-m", "recipes_lib.plot", f"log_paths={tmp_path / 'empty'}"], capture_output=True,
                        text=True, cwd=Path(__file__).parents[2], timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "metrics.jsonl" in result.stderr
