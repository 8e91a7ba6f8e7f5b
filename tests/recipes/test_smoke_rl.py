"""Two-step runs of the RL recipes on the tiny model, through their command lines."""

from pathlib import Path

import chz
import pytest

from recipes import rl_basic, rl_loop
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import read_metrics

TINY = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=2", "max_tokens=4"]
SMALL = ["env.batch_size=2", "env.group_size=2", "env.test_size=4"]


@pytest.mark.parametrize(
    "mode",
    [
        [],
        ["async_config.max_steps_off_policy=2", "async_config.groups_per_batch=2"],
        ["stream_minibatch_config.groups_per_batch=2", "stream_minibatch_config.num_minibatches=2"],
    ],
    ids=["sync", "async", "stream"],
)
def test_rl_basic_two_steps(tmp_path: Path, mode: list[str]) -> None:
    config = config_from_argv(rl_basic.build_config(), [*TINY, *SMALL, *mode, f"log_path={tmp_path}"])
    assert config.dataset_builder.model_name_for_tokenizer == "recipes/tiny-llama"  # type: ignore[attr-defined]
    rl_basic.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2]  # two iterations and the final evaluation
    assert "test/env/all/correct" in rows[0] and "env/all/correct" in rows[1] and rows[1]["progress/done_frac"] == 1
    assert load_checkpoints(tmp_path)[-1].name == "final"


def test_rl_loop_two_steps(tmp_path: Path) -> None:
    argv = [*TINY, f"log_path={tmp_path}", "batch_size=2", "group_size=2", "save_every=1"]
    rl_loop.main(config_from_argv(chz.Blueprint(rl_loop.Config), argv))
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1] and "env/all/reward/total" in rows[0]
    assert [r.name for r in load_checkpoints(tmp_path)] == ["000001", "final"]


def test_rl_basic_multi_turn_env(tmp_path: Path) -> None:
    argv = ["env=guess_number", *TINY, f"log_path={tmp_path}", "env.high=4", "env.batch_size=2", "env.group_size=2"]
    rl_basic.main(config_from_argv(rl_basic.build_config(), argv))
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2] and "test/env/all/reward/total" in rows[0]
    assert "env/all/parse_error" in rows[0]
