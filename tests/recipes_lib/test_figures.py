"""`recipes_lib.figures`: the README's table, from a run folder's metrics.jsonl (a fixture)."""

import datetime
import shutil
from pathlib import Path

import pytest

from recipes_lib.exceptions import DataFormatError
from recipes_lib.figures import Config, Figure, describe_machine, figure, main, markdown_table

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "figures" / "sl_run"


def test_first_and_last_logged_values_and_steps() -> None:
    assert figure(RUN, "test/exact_match", 7.25) == Figure(
        run="sl_run", metric="test/exact_match", first=0.0, last=0.9375, steps=3, minutes=7.25)
    assert figure(RUN, "train_mean_nll", 1.0).first == 2.5


def test_the_table_quotes_values_minutes_and_the_date() -> None:
    table = markdown_table([figure(RUN, "test/exact_match", 7.25)], datetime.date(2026, 11, 30), "a CPU")
    assert table.splitlines() == [
        "# Learning figures", "", "```bash", "make reproduce", "```", "",
        "Produced by `scripts/reproduce.sh` on 2026-11-30, on a CPU.",
        "",
        "| run | metric | first | last | steps logged | minutes |",
        "|---|---|---|---|---|---|",
        "| sl_run | `test/exact_match` | 0 | 0.938 | 3 | 7.2 |",
    ]


def test_a_metric_never_logged_is_an_error_naming_the_run(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"sl_run/metrics.jsonl: no value of 'test/accuracy' in 3 rows"):
        figure(RUN, "test/accuracy", 1.0)
    with pytest.raises(DataFormatError, match="does not exist"):
        figure(tmp_path, "test/accuracy", 1.0)


def test_main_writes_the_table(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "sl_basic"
    shutil.copytree(RUN, run)
    out = tmp_path / "docs" / "figures.md"
    main(Config(runs=f"{run},{run}", metrics="test/exact_match,test/nll", minutes="7.25,7.25", out=str(out)))
    rows = out.read_text().splitlines()[10:]
    assert rows == ["| sl_basic | `test/exact_match` | 0 | 0.938 | 3 | 7.2 |",
                    "| sl_basic | `test/nll` | 3.1 | 0.2 | 3 | 7.2 |"]
    with pytest.raises(DataFormatError, match="one entry per run"):
        main(Config(runs=str(run), metrics="a,b", minutes="1", out=str(out)))


def test_the_machine_is_named_with_the_isa_that_decides_the_precision() -> None:
    epyc = "processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f avx512_bf16\nprocessor\t: 1\n"
    assert describe_machine(epyc) == "AMD EPYC 9R14, 2 cores, AVX512-BF16; `auto` precision: bf16"
    assert describe_machine(epyc.replace(" avx512f avx512_bf16", "")) == "AMD EPYC 9R14, 2 cores, AVX2; `auto` precision: fp32"
