"""The progress view: which metrics it picks, its log lines, and its live bar on a terminal."""

import io
import re
import types

import pytest
from rich.console import Console

from recipes_lib import progress
from recipes_lib.progress import ProgressDisplay, format_duration, format_value, headline_keys


def _log_console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=80), buffer  # a file is not a terminal: the line view


def test_each_pipeline_gets_its_few_metrics() -> None:
    supervised = {"epoch", "learning_rate", "num_tokens", "train_mean_nll", "test/nll", "test/exact_match",
                  "time/step", "optim/grad_norm"}
    assert headline_keys(supervised) == ["train_mean_nll", "learning_rate", "test/nll", "test/exact_match"]
    rl = {"env/all/reward/total", "env/all/correct", "env/all/ac_tokens_per_turn", "optim/lr", "optim/entropy",
          "test/env/all/reward/total", "test/env/all/correct", "test/env/all/ac_tokens_per_turn"}
    assert headline_keys(rl) == ["env/all/reward/total", "env/all/correct", "optim/lr", "test/env/all/reward/total",
                                 "test/env/all/correct"]
    # On-policy distillation runs on the RL loop: its envs' reward (always 0) is not shown, the teacher's KL is.
    distillation = {"teacher_kl", "env/all/reward/total", "optim/lr", "test/exact_match", "teacher/test/exact_match"}
    assert headline_keys(distillation) == ["teacher_kl", "optim/lr", "test/exact_match", "teacher/test/exact_match"]
    dpo = {"dpo_loss", "accuracy", "margin", "learning_rate", "test/dpo_loss", "test/accuracy"}
    assert headline_keys(dpo) == ["dpo_loss", "accuracy", "learning_rate", "test/dpo_loss", "test/accuracy"]
    # "accuracy" without DPO is some evaluator's score, listed with the other evaluations
    custom = {"train_mean_nll", "learning_rate", "accuracy", "inspect/gsm8k/accuracy", "test/pm_accuracy"}
    assert headline_keys(custom) == ["train_mean_nll", "learning_rate", "inspect/gsm8k/accuracy", "test/pm_accuracy"]


def test_values_and_durations_read_short() -> None:
    assert [format_value(v) for v in (0.0, 3, 1.0, 0.958333, 0.0005, 12345.678, "x")] == [
        "0", "3", "1", "0.9583", "0.0005", "1.235e+04", "x"]
    assert [format_duration(s) for s in (0.4, 61, 3725)] == ["0:00", "1:01", "1:02:05"]


def test_a_log_gets_one_line_per_n_steps_and_at_each_evaluation() -> None:
    console, buffer = _log_console()
    display = ProgressDisplay(total_steps=160, console=console)
    assert display.log_every == 4  # about 50 lines for 160 steps
    for step in range(160):
        row = {"train_mean_nll": 1.0 / (step + 1), "learning_rate": 1e-3, "num_tokens": 500}
        if step % 25 == 0:
            row |= {"test/nll": 2.0, "test/exact_match": step / 160, "time/eval": 0.5}
        display.log_metrics(row, step)
    display.close()
    lines = buffer.getvalue().splitlines()
    logged = [int(re.match(r"\[\s*(\d+)/160\]", line).group(1)) - 1 for line in lines]  # type: ignore[union-attr]
    expected = sorted(set(range(0, 160, 4)) | set(range(0, 160, 25)) | {159})  # every 4th, each eval, the last
    assert logged == expected and len(lines) == 40 + 5 + 1  # 25, 50, 75, 125, 150 are not multiples of 4
    # no pace on the first line: its step also loaded the model and ran the first evaluation
    assert lines[0] == "[  1/160]  train_mean_nll 1  learning_rate 0.001  test/nll 2  test/exact_match 0"
    assert "test/nll" not in lines[1] and "eta " in lines[1]  # evaluations only on the lines that have them
    assert re.fullmatch(r"\[  5/160\]  train_mean_nll 0\.2  learning_rate 0\.001  \S+ s/step  eta \d+:\d\d", lines[1])
    assert "test/exact_match 0.9375" in lines[[i for i, s in enumerate(logged) if s == 150][0]]


def test_lines_are_never_wrapped_and_show_an_explicit_headline() -> None:
    console, buffer = _log_console()
    display = ProgressDisplay(total_steps=3, console=console, headline=["custom/score"])
    display.log_metrics({"custom/score": 0.5, "train_mean_nll": 2.0, "a_very_long_key" * 10: 1.0}, 0)
    display.close()
    assert buffer.getvalue().splitlines()[0] == "[1/3]  custom/score 0.5"
    assert "train_mean_nll" not in buffer.getvalue()


def test_an_rl_final_evaluation_row_is_labelled() -> None:
    console, buffer = _log_console()
    display = ProgressDisplay(total_steps=2, console=console)
    for step in range(2):
        display.log_metrics({"env/all/reward/total": 0.5, "optim/lr": 1e-4}, step)
    display.log_metrics({"test/env/all/reward/total": 0.75, "time/eval": 1.0}, 2)
    display.close()
    assert buffer.getvalue().splitlines()[-1] == "[final evaluation]  test/env/all/reward/total 0.75"


def test_a_terminal_gets_the_progress_bar_and_the_metrics_table() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    display = ProgressDisplay(total_steps=4, console=console)
    for step in range(4):
        row = {"train_mean_nll": 1.5 - step / 10, "learning_rate": 1e-3}
        if step == 2:
            row |= {"test/exact_match": 0.625, "time/eval": 0.1}
        display.log_metrics(row, step)
    display.close()
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buffer.getvalue())  # drop colours and cursor moves
    final = screen[screen.rindex("training"):]  # the last frame drawn
    assert "━" in final and "4/4" in final and "eta" in final
    table = {line.split()[0]: line.split()[1:] for line in final.splitlines()[1:] if line.strip()}
    assert table["metric"] == ["latest", "at", "step"]
    assert table["train_mean_nll"] == ["1.2", "3"] and table["test/exact_match"] == ["0.625", "2"]
    assert "[1/4]" not in screen  # no log lines on a terminal


def test_pace_and_eta_are_timed_from_the_first_row(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 130.0, 132.0])  # rows of steps 0, 1, 2 arrive at these times
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))  # this module's clock only
    console, buffer = _log_console()
    display = ProgressDisplay(total_steps=10, console=console, headline=["loss"])
    for step in range(3):
        display.log_metrics({"loss": 1.0}, step)
    assert buffer.getvalue().splitlines() == [
        "[ 1/10]  loss 1",
        "[ 2/10]  loss 1  30 s/step  eta 4:00",  # (130 - 100) / 1 step; 8 steps left
        "[ 3/10]  loss 1  16 s/step  eta 1:52",  # (132 - 100) / 2 steps; 7 left
    ]
