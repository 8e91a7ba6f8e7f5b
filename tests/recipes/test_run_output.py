"""What a user sees of a run in a log (not a terminal): short progress lines, then the summary, whose
numbers are metrics.jsonl's; and metrics.png in the run folder. Tiny-model runs of SL, RL and DPO."""

import html
import re
from pathlib import Path

import pytest

from recipes import dpo_basic, rl_basic, sl_basic
from recipes_lib.argv import config_from_argv
from recipes_lib.logging import read_metrics, read_samples
from recipes_lib.progress import format_value

pytestmark = pytest.mark.draws  # its runs draw metrics.png and report.html (tests/conftest.py)

TINY = ["model_name=recipes/tiny-llama", "backend.precision=float32"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY_LINE = re.compile(r"^  (\S+) +(\S+) -> (\S+)(?:  \(best (\S+) at step (\d+)\))?$")


def _summary_block(output: str) -> list[str]:
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Finished ")]
    assert len(starts) == 1, output
    return lines[starts[0]:]


def _check_against_metrics(summary: list[str], log_path: Path, better: dict[str, str]) -> None:
    """Each `key first -> last (best ...)` line equals metrics.jsonl, and every key of `better`
    ("min" or "max": which value is the best) has one."""
    rows = read_metrics(log_path)
    seen = set()
    for line in summary:
        match = SUMMARY_LINE.match(line)
        if match is None:
            continue
        key, first, last, best, best_step = match.groups()
        values = [(row["step"], row[key]) for row in rows if row.get(key) is not None]
        by_value = sorted(values, key=lambda point: point[1])  # stable: the earliest of equal values first
        expected_best = by_value[0] if better[key] == "min" else max(values, key=lambda point: point[1])
        assert (first, last) == (format_value(values[0][1]), format_value(values[-1][1])), line
        if best is None:
            assert expected_best[1] == values[-1][1], line
        else:
            assert (best, int(best_step)) == (format_value(expected_best[1]), expected_best[0]), line
        seen.add(key)
    assert seen == set(better)


def _check_next_commands(summary: list[str], log_path: Path) -> None:
    assert summary[-4:] == ["Next:", f"  python -m recipes.chat log_path={log_path}",
                            summary[-2], f"  python -m recipes_lib.plot log_paths={log_path}"]
    assert re.fullmatch(rf"  python -m recipes_lib\.export model_path=local://\S+/sampler_weights/final "
                        rf"out={log_path}/export", summary[-2])


def test_supervised_log_is_a_line_per_step_then_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    config = config_from_argv(sl_basic.build_config(), [
        *TINY, f"log_path={tmp_path}", "max_steps=3", "eval_every=2", "dataset.num_train=48",
        "dataset.num_heldout=4", "evaluator_builders.0.max_tokens=4"])
    sl_basic.main(config)
    output = capsys.readouterr().out
    assert "\x1b[" not in output  # no colours or cursor moves in a log
    lines = output.splitlines()
    progress = [i for i, line in enumerate(lines) if re.match(r"\[\d/3\]  train_mean_nll ", line)]
    assert [lines[i][:5] for i in progress] == ["[1/3]", "[2/3]", "[3/3]"]
    assert progress == list(range(progress[0], progress[0] + 3))  # nothing between them
    # evaluations before step 0 and after the last (step 2) only
    assert "test/exact_match" in lines[progress[2]] and "test/exact_match" not in lines[progress[1]]
    summary = _summary_block(output)
    assert lines.index(summary[0]) == progress[-1] + 1  # the summary follows the last step
    assert lines[: progress[0]][0].startswith("prompt (weight 0)")  # before the steps only the first example
    assert len(lines[: progress[0]]) <= 10
    assert re.match(rf"Finished {tmp_path}: 3 steps in \d+:\d\d, [\d,]+ tokens/s$", summary[0])
    _check_against_metrics(summary, tmp_path, {"train_mean_nll": "min", "test/nll": "min", "test/exact_match": "max"})
    _check_next_commands(summary, tmp_path)
    assert (tmp_path / "metrics.png").read_bytes()[:8] == PNG_MAGIC
    assert f"  curves            {tmp_path}/metrics.png (loss (NLL per token), held-out exact match, learning rate)" \
        in summary
    assert f"  report            {tmp_path}/report.html (charts, the model's answers, config)" in summary
    # The page: the curves, and the held-out answers of both evaluations (samples.jsonl) as a person reads them
    page = (tmp_path / "report.html").read_text()
    samples = read_samples(tmp_path)
    assert sorted({s["step"] for s in samples}) == [0, 2] and len(samples) == 2 * 4  # all 4 held out, twice
    assert all(s["evaluator"] == "test" and s["prompt"].startswith("Write ") for s in samples)
    for caption in ("loss (NLL per token)", "held-out exact match", "learning rate"):
        assert f"<figcaption>{caption}</figcaption>" in page
    assert "<h3>step 2</h3>" in page and "<h3>step 0</h3>" in page
    assert html.escape(samples[-1]["prompt"]) in page and html.escape(samples[-1]["reference"]) in page
    assert "<dt>final checkpoint</dt>" in page  # written after the last metrics row, and on the page


def test_rl_run_ends_with_its_summary_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = config_from_argv(rl_basic.build_config(), [
        *TINY, "max_steps=2", "max_tokens=4", "env.batch_size=2", "env.group_size=2",
        "env.test_size=4", f"log_path={tmp_path}"])
    rl_basic.main(config)
    summary = _summary_block(capsys.readouterr().out)
    assert summary[0].startswith(f"Finished {tmp_path}: 2 steps in ")
    _check_against_metrics(summary, tmp_path, {"env/all/reward/total": "max", "env/all/correct": "max",
                                               "test/env/all/reward/total": "max", "test/env/all/correct": "max"})
    _check_next_commands(summary, tmp_path)
    assert (tmp_path / "metrics.png").read_bytes()[:8] == PNG_MAGIC
    page = (tmp_path / "report.html").read_text()
    assert "<figcaption>reward</figcaption>" in page and "<h3>iteration 000001</h3>" in page
    assert "advantage" in page  # a step's rollouts with their rewards and advantages


def test_dpo_run_ends_with_its_summary_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = config_from_argv(dpo_basic.build_config(), [
        *TINY, "max_steps=2", f"log_path={tmp_path}", "dataset_builder.batch_size=3",
        "dataset_builder.comparison_builder.num_train=12", "dataset_builder.comparison_builder.num_test=4"])
    dpo_basic.main(config)
    summary = _summary_block(capsys.readouterr().out)
    _check_against_metrics(summary, tmp_path, {"dpo_loss": "min", "accuracy": "max", "test/dpo_loss": "min",
                                               "test/accuracy": "max"})
    _check_next_commands(summary, tmp_path)
    assert any(line.startswith("  curves ") and "DPO accuracy (chosen > rejected)" in line for line in summary)
    assert (tmp_path / "metrics.png").read_bytes()[:8] == PNG_MAGIC
    assert "<figcaption>DPO accuracy (chosen &gt; rejected)</figcaption>" in (tmp_path / "report.html").read_text()
