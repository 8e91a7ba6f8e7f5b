"""Two-step runs of the supervised recipes on the tiny model: they build, train, log and checkpoint."""

from pathlib import Path

import chz
import pytest

from recipes import sl_basic, sl_loop
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import read_metrics
from supervised import train_cli as sl_cli

TINY = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=2"]



def test_sl_basic_two_steps(tmp_path: Path) -> None:
    config = config_from_argv(sl_basic.build_config(), [
        *TINY, f"log_path={tmp_path}", "dataset.num_train=32", "dataset.num_heldout=6", "evaluator_builders.0.max_tokens=4"])
    sl_basic.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1]
    assert "test/exact_match" in rows[0] and "test/nll" in rows[1] and rows[1]["progress"] == 1.0
    assert load_checkpoints(tmp_path)[-1].name == "final"


def test_the_supervised_cli_on_the_example_conversations(tmp_path: Path) -> None:
    config = config_from_argv(sl_cli.build_config(), [
        "model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=2", "dataset=jsonl",
        f"dataset.file_path={sl_loop.EXAMPLE_FILE}", "dataset.test_size=8", "dataset.common_config.batch_size=8",
        f"log_path={tmp_path}"])
    sl_cli.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1] and "test/nll" in rows[-1]


def test_sl_loop_two_steps(tmp_path: Path) -> None:
    sl_loop.main(config_from_argv(chz.Blueprint(sl_loop.Config), [*TINY, f"log_path={tmp_path}", "save_every=1"]))
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1] and rows[-1]["progress"] == 1.0
    assert [r.name for r in load_checkpoints(tmp_path)] == ["000001", "final"]



@pytest.mark.slow
def test_sl_basic_on_smollm2_lowers_the_held_out_loss(tmp_path: Path) -> None:
    """Four steps of the real recipe on the real model, at half its batch size."""
    config = config_from_argv(sl_basic.build_config(), [
        f"log_path={tmp_path}", "max_steps=4", "eval_every=4", "dataset.num_train=32",
        "dataset.common_config.batch_size=8", "dataset.num_heldout=6"])
    sl_basic.main(config)
    rows = read_metrics(tmp_path)
    assert rows[0]["test/exact_match"] == 0.0  # the base model answers "157 in words is 157."
    assert rows[-1]["test/nll"] < rows[0]["test/nll"] / 2  # measured 2.29 -> 0.61 (fp32); 0.47 at batch 16
    assert rows[-1]["train_mean_nll"] < rows[0]["train_mean_nll"]
