"""`recipes_lib.figures`: the README's table, from a run folder's metrics.jsonl (a fixture)."""

import datetime
import json
import re
import shutil
from pathlib import Path

import pytest

from recipes_lib.exceptions import DataFormatError
from recipes_lib.figures import (
    MEASURED_BEGIN,
    MEASURED_END,
    Config,
    Figure,
    describe_machine,
    figure,
    main,
    markdown_table,
    replace_measured,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN = REPO_ROOT / "tests" / "fixtures" / "figures" / "sl_run"


def test_first_and_last_logged_values_and_steps() -> None:
    assert figure(RUN, "test/exact_match", 7.25) == Figure(
        run="sl_run", metric="test/exact_match", first=0.0, last=0.9375, steps=3, minutes=7.25)  # no config.json
    assert figure(RUN, "train_mean_nll", 1.0).first == 2.5


def test_the_table_quotes_values_minutes_and_the_date() -> None:
    table = markdown_table([figure(RUN, "test/exact_match", 7.25)], datetime.date(2026, 11, 30), "a CPU")
    assert table.splitlines() == [
        "# Learning figures", "", "```bash", "make reproduce", "```", "",
        "Produced by `scripts/reproduce.sh` on 2026-11-30, on a CPU.",
        "",
        "| run | metric | first | last | steps logged | minutes | precision |",
        "|---|---|---|---|---|---|---|",
        "| sl_run | `test/exact_match` | 0 | 0.938 | 3 | 7.2 | not recorded |",
    ]


def test_a_metric_never_logged_is_an_error_naming_the_run(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"sl_run/metrics.jsonl: no value of 'test/accuracy' in 3 rows"):
        figure(RUN, "test/accuracy", 1.0)
    with pytest.raises(DataFormatError, match="does not exist"):
        figure(tmp_path, "test/accuracy", 1.0)


def test_main_writes_the_table(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "sl_basic"
    shutil.copytree(RUN, run)
    (run / "config.json").write_text(json.dumps({"backend": {"kind": "local", "precision": "float32"}}))
    out = tmp_path / "docs" / "figures.md"
    main(Config(runs=f"{run},{run}", metrics="test/exact_match,test/nll", minutes="7.25,7.25", out=str(out)))
    rows = out.read_text().splitlines()[10:]
    assert rows == ["| sl_basic | `test/exact_match` | 0 | 0.938 | 3 | 7.2 | float32 |",
                    "| sl_basic | `test/nll` | 3.1 | 0.2 | 3 | 7.2 | float32 |"]
    with pytest.raises(DataFormatError, match="one entry per run"):
        main(Config(runs=str(run), metrics="a,b", minutes="1", out=str(out)))


def test_the_machine_is_named_with_the_isa_that_decides_the_precision() -> None:
    epyc = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f avx512_bf16\nprocessor\t: 1\n"
    assert describe_machine(epyc) == "AMD EPYC 9R14, 2 cores, AVX512-BF16; `auto` precision: bf16"
    assert describe_machine(epyc.replace(" avx512f avx512_bf16", "")) == "AMD EPYC 9R14, 2 cores, AVX2; `auto` precision: fp32"


REPORT = {"held_out_problems": 64, "accuracy": {"without_tools": 0.0, "with_tools": 0.015625, "after_warmup": 1.0,
                                                "after_rl": 1.0},
          "sampled_accuracy": {"after_warmup": 0.78125, "after_rl": 0.890625}}


def _readme(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(text)
    return folder / "README.md"


def test_main_writes_each_task_readmes_measured_block_and_keeps_the_rest(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "sl_basic"
    shutil.copytree(RUN, run)
    words = _readme(tmp_path / "number_words", f"# Words\n\nintro\n{MEASURED_BEGIN}\nold figures\n{MEASURED_END}\nafter\n")
    tools = _readme(tmp_path / "tools", f"# Tools\n{MEASURED_BEGIN}\n{MEASURED_END}\n")
    report = tmp_path / "tool_run" / "accuracies.json"
    (report.parent / "rl").mkdir(parents=True)
    (report.parent / "rl" / "config.json").write_text(json.dumps({"backend": {"precision": "float32"}}))
    report.write_text(json.dumps(REPORT))
    out = tmp_path / "figures.md"
    main(Config(runs=f"{run},{run}", metrics="test/exact_match,test/nll", minutes="7.25,1", out=str(out),
                tasks=f"{words.parent},{words.parent}", tool_report=str(report), tool_minutes=14.4,
                tool_task=str(tools.parent)))
    text = words.read_text()
    assert text.startswith(f"# Words\n\nintro\n{MEASURED_BEGIN}\nMeasured by `make reproduce` on ")
    assert text.endswith("| recipe | held-out metric | before | after | steps logged | minutes | precision |\n"
                         "|---|---|---|---|---|---|---|\n| sl_basic | `test/exact_match` | 0 | 0.938 | 3 | 7.2 | not recorded |\n"
                         f"| sl_basic | `test/nll` | 3.1 | 0.2 | 3 | 1.0 | not recorded |\n{MEASURED_END}\nafter\n")
    assert "old figures" not in text and "`auto` precision" in text
    tool_text = tools.read_text()
    assert "| base model, calculator offered | 1.6 % | |\n" in tool_text
    assert "| after RL | 100.0 % | 89.1 % |\n" in tool_text and "this recipe runs float32; 14.4 min for every stage" in tool_text
    assert out.read_text().splitlines()[-1].startswith("tool_calculator (64 held-out problems, 14.4 min), greedy: no tools 0,")
    main(Config(runs=str(run), metrics="test/exact_match", minutes="2", out=str(out), tasks=str(words.parent)))
    assert words.read_text().count(MEASURED_BEGIN) == 1 and "| 2.0 |" in words.read_text()  # rewritten, not added


def test_a_readme_without_the_markers_or_a_bad_report_is_an_error_naming_the_file(tmp_path: Path) -> None:
    readme = _readme(tmp_path / "task", "# A task\n")
    with pytest.raises(DataFormatError, match=r"task/README.md has no measured block: add the lines"):
        replace_measured(readme, "rows")
    assert readme.read_text() == "# A task\n"
    with pytest.raises(DataFormatError, match="tasks= needs one task folder per run"):
        main(Config(runs=f"{RUN},{RUN}", metrics="a,b", minutes="1,1", out=str(tmp_path / "f.md"), tasks="x"))
    (tmp_path / "bad.json").write_text('{"accuracy": {}}')
    with pytest.raises(DataFormatError, match=r"bad.json: not a tool_calculator accuracies.json \(KeyError"):
        main(Config(runs=str(RUN), metrics="test/exact_match", minutes="1", out=str(tmp_path / "f.md"),
                    tool_report=str(tmp_path / "bad.json")))


def test_every_readme_that_make_reproduce_writes_has_the_markers() -> None:
    """A missing marker would fail `make reproduce` at its very end, after an hour of runs."""
    script = (REPO_ROOT / "scripts" / "reproduce.sh").read_text()
    tasks = re.search(r"readmes=\(tasks=(\S+)\s+tool_task=(\S+)\)", script)
    assert tasks is not None, "scripts/reproduce.sh names the task folders as readmes=(tasks=... tool_task=...)"
    folders = {*tasks.group(1).split(","), tasks.group(2)}
    assert folders == {"recipes/number_words", "recipes/arithmetic", "recipes/prompt_distillation",
                       "recipes/tool_calculator"}
    for folder in sorted(folders):
        text = (REPO_ROOT / folder / "README.md").read_text()
        assert text.count(MEASURED_BEGIN) == 1 and text.index(MEASURED_BEGIN) < text.index(MEASURED_END), folder
