"""The generic CLIs (`supervised.train_cli`, `rl.train_cli`, `preference.train_dpo_cli`) and
`recipes.preference.train`: two steps each on the tiny model, `--help` lists every key, and a wrong
`dataset=` / `env=` names the valid ones."""

from pathlib import Path
from typing import Any

import chz
import pytest

from preference import train_dpo_cli
from preference.reward_model import PreferenceChatDatasetBuilder
from recipes import envs as rl_envs
from recipes.preference import train as preference_train
from recipes_lib.argv import config_from_argv
from recipes_lib.logging import read_metrics
from rl import train_cli as rl_cli
from supervised import train_cli as sl_cli
from tests.preference.hf_fixtures import write_helpsteer3, write_hh_rlhf, write_ultrafeedback

TINY = ["model_name=recipes/tiny-llama", "backend.precision=float32", "max_steps=2"]
REPO_ROOT = Path(__file__).resolve().parents[2]
CONVERSATIONS = REPO_ROOT / "example_data" / "conversations.jsonl"
COMPARISONS = REPO_ROOT / "example_data" / "comparisons.jsonl"
CLIS: dict[str, Any] = {"supervised.train_cli": sl_cli, "rl.train_cli": rl_cli,
                        "preference.train_dpo_cli": train_dpo_cli, "recipes.preference.train": preference_train}


def _steps(log_path: Path) -> list[int]:
    return [row["step"] for row in read_metrics(log_path)]


def test_supervised_cli_on_a_conversations_file(tmp_path: Path) -> None:
    config = config_from_argv(sl_cli.build_config(), [
        *TINY, "dataset=jsonl", f"dataset.file_path={CONVERSATIONS}", "dataset.common_config.batch_size=4", f"log_path={tmp_path}"])
    assert config.dataset_builder.file_path == str(CONVERSATIONS)  # type: ignore[attr-defined]
    sl_cli.main(config)
    assert _steps(tmp_path) == [0, 1] and "train_mean_nll" in read_metrics(tmp_path)[1]


def test_supervised_cli_hhh_trains_the_pairwise_preference_model(tmp_path: Path) -> None:
    hh = write_hh_rlhf(tmp_path / "hh")
    config = config_from_argv(sl_cli.build_config(), [
        *TINY, "dataset=hhh", f"dataset.comparison_builder.dataset_path={hh}", "dataset.common_config.batch_size=2",
        "eval_every=0", f"log_path={tmp_path / 'run'}"])
    data = config.dataset_builder
    assert isinstance(data, PreferenceChatDatasetBuilder) and data.swap
    train, _ = data()
    # Two usable HH comparisons, each in both orders: four "A or B?" questions, two steps of two.
    assert len(train) == 2
    sl_cli.main(config)
    assert _steps(tmp_path / "run") == [0, 1]


@pytest.mark.parametrize(("name", "write"), [("hhh", write_hh_rlhf), ("helpsteer3", write_helpsteer3),
                                             ("ultrafeedback", write_ultrafeedback)])
@pytest.mark.parametrize("cli", ["supervised.train_cli", "preference.train_dpo_cli"])
def test_each_named_preference_set_loads(cli: str, name: str, write: Any, tmp_path: Path) -> None:
    folder = write(tmp_path / name)
    key = "dataset.comparison_builder.dataset_path" if cli == "supervised.train_cli" else "dataset.dataset_path"
    config = config_from_argv(CLIS[cli].build_config(), [*TINY, f"dataset={name}", f"{key}={folder}"])
    comparisons = config.dataset.comparison_builder if cli == "supervised.train_cli" else config.dataset
    assert type(comparisons).__name__.lower().startswith(name[:5]) and comparisons.dataset_path == str(folder)
    train, _ = comparisons()
    assert train and all(c.label in ("A", "B", "Tie") for c in train)


def test_rl_cli_arithmetic(tmp_path: Path) -> None:
    config = config_from_argv(rl_cli.build_config(), [
        *TINY, "env=arithmetic", "groups_per_batch=2", "group_size=2", "max_tokens=4", "env.test_size=4",
        f"log_path={tmp_path}"])
    assert (config.dataset_builder.batch_size, config.dataset_builder.group_size) == (2, 2)  # type: ignore[attr-defined]
    rl_cli.main(config)
    rows = read_metrics(tmp_path)
    assert _steps(tmp_path) == [0, 1, 2] and "env/all/reward/total" in rows[1]


def test_rl_cli_hhh_rewards_with_a_preference_model(tmp_path: Path) -> None:
    hh = write_hh_rlhf(tmp_path / "hh")
    config = config_from_argv(rl_cli.build_config(), [
        *TINY, "env=hhh", f"env.comparison_builder.dataset_path={hh}", "groups_per_batch=1", "group_size=2",
        "max_tokens=4", "env.preference_model_builder.model_name=recipes/tiny-llama",
        "env.preference_model_builder.backend.precision=float32", f"log_path={tmp_path / 'run'}"])
    rl_cli.main(config)
    assert _steps(tmp_path / "run")[:2] == [0, 1]
    assert "env/all/reward/total" in read_metrics(tmp_path / "run")[0]


@pytest.mark.parametrize("cli", ["preference.train_dpo_cli", "recipes.preference.train"])
def test_dpo_on_the_shipped_comparisons(cli: str, tmp_path: Path) -> None:
    module = CLIS[cli]
    config = config_from_argv(module.build_config(), [
        *TINY, "dataset=jsonl", f"dataset.train_path={COMPARISONS}", "dataset_builder.batch_size=4", f"log_path={tmp_path}"])
    assert config.resolved_dataset_builder.comparison_builder.train_path == str(COMPARISONS)
    module.main(config)
    rows = read_metrics(tmp_path)
    assert _steps(tmp_path) == [0, 1] and rows[0]["num_pairs"] == 4 and "dpo_loss" in rows[1]


def _help(module: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        config_from_argv(module.build_config(), [*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("cli", CLIS)
def test_help_lists_every_key(cli: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = CLIS[cli]
    keys = {line.split()[0] for line in _help(module, [], capsys).splitlines() if line.startswith("  ")}
    config_class = train_dpo_cli.Config if cli == "recipes.preference.train" else module.Config  # the recipe builds on the CLI
    assert set(chz.chz_fields(config_class)) <= keys
    choice = "env" if cli == "rl.train_cli" else "dataset"
    assert {choice, "model_name", "renderer_name", "learning_rate", "log_path"} <= keys


@pytest.mark.parametrize("env", rl_envs.NAMES)
def test_every_env_builds_and_lists_its_keys(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    keys = {line.split()[0] for line in _help(rl_cli, [f"env={env}"], capsys).splitlines() if line.startswith("  ")}
    assert {"env.batch_size", "env.group_size", "env.model_name_for_tokenizer", "groups_per_batch"} <= keys


@pytest.mark.parametrize(("cli", "arg", "valid"), [
    ("supervised.train_cli", "dataset=hh", "number_words, hhh, helpsteer3, ultrafeedback, jsonl, hub"),
    ("preference.train_dpo_cli", "dataset=hh", "hhh, helpsteer3, ultrafeedback, arithmetic, jsonl"),
    ("recipes.preference.train", "dataset=nope", "hhh, helpsteer3, ultrafeedback, arithmetic, jsonl"),
    ("rl.train_cli", "env=maths", "arithmetic, gsm8k, math, guess_number, twenty_questions, hhh"),
])
def test_a_wrong_choice_names_the_valid_ones(cli: str, arg: str, valid: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        config_from_argv(CLIS[cli].build_config(), ["model_name=recipes/tiny-llama", arg])
    assert info.value.code == 2 and f"{arg} is not one of {valid}" in capsys.readouterr().err
