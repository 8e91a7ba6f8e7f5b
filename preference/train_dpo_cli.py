"""DPO on any comparison data, from the command line.

    python -m preference.train_dpo_cli log_path=/tmp/dpo-hhh model_name=meta-llama/Llama-3.2-1B dataset=hhh \\
        renderer_name=role_colon learning_rate=1e-5 dpo_beta=0.1
    python -m preference.train_dpo_cli dataset=jsonl dataset.train_path=pairs.jsonl model_name=HuggingFaceTB/SmolLM2-135M-Instruct
    python -m preference.train_dpo_cli --help                      # every key, with its value

`dataset=` picks the comparisons by name, from the table in `recipes/comparisons.py` (hhh, helpsteer3,
ultrafeedback, arithmetic, jsonl: `dataset=jsonl dataset.train_path=pairs.jsonl`), or any builder by
its full name; `dataset.<key>=...` sets that builder's own settings (`dataset.max_train=1000`,
`dataset.test_path=heldout.jsonl`). Every other key is a field of `preference.train_dpo.Config`;
`dataset_builder.comparison_builder` follows `dataset`. The names live in `recipes`, the top layer:
chz imports that table only when `dataset=` is read.
"""

import chz
from chz.blueprint import Castable, Reference

from preference import train_dpo
from preference.data import DPODatasetBuilder
from preference.datasets import ComparisonDatasetBuilder
from recipes_lib.cli import run_recipe

COMPARISON_TABLE = "recipes.comparisons"  # the module whose names `dataset=` looks up


@chz.chz
class Config(train_dpo.Config):
    """`preference.train_dpo.Config` with the comparisons chosen by name (see the module docstring)."""

    dataset: ComparisonDatasetBuilder = chz.field(
        meta_factory=chz.factories.function(default_module=COMPARISON_TABLE),
        doc="hhh | helpsteer3 | ultrafeedback | arithmetic | jsonl | <module>:<Builder>",
    )


def build_config() -> chz.Blueprint[Config]:
    """The CLI's defaults; every one can be overridden with `key=value`."""
    return chz.Blueprint(Config).apply({
        "log_path": "/tmp/recipes/train_dpo_cli",
        "dataset": Castable("hhh"),
        "dataset_builder": DPODatasetBuilder,
        "dataset_builder.comparison_builder": Reference("dataset"),
        "dataset_builder.model_name_for_tokenizer": Reference("model_name"),
    })


def main(config: Config) -> None:
    train_dpo.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
