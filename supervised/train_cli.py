"""Supervised training of any model on any chat data, from the command line.

    python -m supervised.train_cli dataset=hhh model_name=Qwen/Qwen3-8B learning_rate=4e-4 log_path=/tmp/hhh-pm
    python -m supervised.train_cli dataset=jsonl dataset.file_path=example_data/conversations.jsonl model_name=HuggingFaceTB/SmolLM2-135M-Instruct
    python -m supervised.train_cli dataset=example_data/conversations.jsonl model_name=...  # the same, with the file preset
    python -m supervised.train_cli dataset=hub dataset.path=HuggingFaceH4/no_robots model_name=...   # needs the hub
    python -m supervised.train_cli --help                                           # every key, with its value

`dataset=` picks the data by name, from the table in `recipes/datasets.py`:

    hhh, helpsteer3, ultrafeedback   the pairwise preference model of the RLHF pipeline: each comparison
                                     is a question "which reply is better, A or B?" answered "A" or "B"
    jsonl                            conversations from a file, one {"messages": [...]} per line
    hub                              a Hugging Face chat dataset with a `messages` column
    number_words                     the offline demo's data (recipes/number_words/)

or any builder by its full name (`dataset=my_package.data:MyBuilder`), and `dataset.<key>=...` sets
that builder's own settings (`dataset.file_path=my.jsonl`, `dataset.common_config.batch_size=8`,
`dataset.comparison_builder.max_train=1000`). Every other key is a field of `supervised.train.Config`;
`dataset_builder` follows `dataset`. The names live in `recipes`, the top layer, where the tasks are:
chz imports that table only when `dataset=` is read.

`dataset=<file>.jsonl` and `dataset=<owner>/<name>` are shorthands with a preset each
(`own_data_arguments`): a file is small, so 3 epochs, 8 conversations held out, an evaluation every 4
steps and batches of 8; a hub dataset gets 1 epoch and batches of 32.
"""

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import chz
from chz.blueprint import Castable, Reference

from recipes_lib.cli import run_recipe
from supervised import train
from supervised.types import SupervisedDatasetBuilder

DATASET_TABLE = "recipes.datasets"  # the module whose names `dataset=` looks up


@chz.chz
class Config(train.Config):
    """`supervised.train.Config` with the data chosen by name (see the module docstring)."""

    dataset: SupervisedDatasetBuilder = chz.field(
        meta_factory=chz.factories.function(default_module=DATASET_TABLE),
        doc="hhh | helpsteer3 | ultrafeedback | jsonl | hub | number_words | <module>:<Builder>")


def build_config() -> chz.Blueprint[Config]:
    """The CLI's defaults; every one can be overridden with `key=value`."""
    common = "dataset.common_config"
    return chz.Blueprint(Config).apply({
        "log_path": "/tmp/recipes/supervised_train_cli",
        "renderer_name": None,  # set explicitly so the dataset can follow it
        "dataset": Castable("hhh"),
        "dataset_builder": Reference("dataset"),
        f"{common}.model_name_for_tokenizer": Reference("model_name"),
        f"{common}.renderer_name": Reference("renderer_name"),
    })


# The presets of `dataset=<file>.jsonl` (a file is small: more epochs, frequent evaluations) and of
# `dataset=<owner>/<name>`; keys given on the command line override them.
FILE_PRESET = {"dataset.test_size": 8, "dataset.common_config.batch_size": 8, "num_epochs": 3, "eval_every": 4}
HUB_PRESET = {"dataset.common_config.batch_size": 32, "num_epochs": 1, "eval_every": 20}


def own_data_arguments(argv: Sequence[str]) -> tuple[dict[str, Any] | None, list[str]]:
    """The keys a `dataset=<file>.jsonl` or `dataset=<owner>/<name>` argument stands for (None when
    `dataset=` is absent or a name of the table), and the other arguments."""
    own = [arg for arg in argv if arg.startswith("dataset=") and _is_own_data(arg.removeprefix("dataset="))]
    rest = [arg for arg in argv if arg not in own]
    if not own:
        return None, rest
    value = own[-1].removeprefix("dataset=")
    if _is_file(value):
        return {"dataset": Castable("jsonl"), "dataset.file_path": value, **FILE_PRESET}, rest
    return {"dataset": Castable("hub"), "dataset.path": value, **HUB_PRESET}, rest


def _is_file(value: str) -> bool:
    return value.endswith(".jsonl") or Path(value).is_file()


def _is_own_data(value: str) -> bool:
    return _is_file(value) or ("/" in value and ":" not in value)


def main(config: Config) -> None:
    train.main(config)


if __name__ == "__main__":
    own_data, args = own_data_arguments(sys.argv[1:])
    run_recipe(main, build_config() if own_data is None else build_config().apply(own_data), args)
