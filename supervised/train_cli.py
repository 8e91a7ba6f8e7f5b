"""Supervised training of any model on any chat data, from the command line.

    python -m supervised.train_cli dataset=hhh model_name=Qwen/Qwen3-8B learning_rate=4e-4 log_path=/tmp/hhh-pm
    python -m supervised.train_cli dataset=jsonl dataset.file_path=example_data/conversations.jsonl model_name=HuggingFaceTB/SmolLM2-135M-Instruct
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
"""

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


def main(config: Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
