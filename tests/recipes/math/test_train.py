"""`python -m recipes.math.train env=gsm8k|math`: two steps on the tiny model, offline, on fixtures."""

from pathlib import Path

import pytest

from recipes.math import train as math_rl
from recipes.math.gsm8k import Gsm8kDatasetBuilder
from recipes_lib.argv import config_from_argv
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import read_metrics

FIXTURES = Path(__file__).parent / "fixtures"
TINY = ["model_name=recipes/tiny-llama", "max_steps=2", "max_tokens=4", "eval_every=2",
        "remove_constant_reward_groups=false", "env.batch_size=2", "env.group_size=2",
        "env.max_test_problems=2"]


@pytest.mark.parametrize("env", ["gsm8k", "math"])
def test_math_rl_two_steps(tmp_path: Path, env: str) -> None:
    files = [f"env.train_file={FIXTURES / f'{env}_train.jsonl'}", f"env.test_file={FIXTURES / f'{env}_test.jsonl'}"]
    config = config_from_argv(math_rl.build_config(), [f"env={env}", *TINY, *files, f"log_path={tmp_path}"])
    assert type(config.dataset_builder).__name__ == {"gsm8k": "Gsm8kDatasetBuilder", "math": "MathDatasetBuilder"}[env]
    math_rl.main(config)
    rows = read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [0, 1, 2]  # two iterations and the final evaluation
    assert "test/env/all/correct" in rows[0] and "test/env/all/correct" in rows[2]
    assert "env/all/correct" in rows[1] and "env/all/format" in rows[1]
    assert load_checkpoints(tmp_path)[-1].name == "final"


def test_an_unknown_env_names_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        config_from_argv(math_rl.build_config(), ["env=aime"])
    assert info.value.code == 2 and "env=aime is not one of arithmetic, gsm8k, math" in capsys.readouterr().err
    default = config_from_argv(math_rl.build_config(), ["max_steps=2"])
    assert isinstance(default.dataset_builder, Gsm8kDatasetBuilder) and default.log_path.endswith("math_rl")


def test_the_old_command_is_an_alias() -> None:
    from recipes import math_rl as alias

    assert alias.build_config is math_rl.build_config and alias.main is math_rl.main
