"""DPO on any comparison data, from the command line.

    python -m preference.train_dpo_cli log_path=/tmp/dpo-hhh model_name=meta-llama/Llama-3.2-1B dataset=hhh \\
        renderer_name=role_colon learning_rate=1e-5 dpo_beta=0.1
    python -m preference.train_dpo_cli dataset=pairs.jsonl model_name=HuggingFaceTB/SmolLM2-135M-Instruct
    python -m preference.train_dpo_cli --help                      # every key, with its value

`dataset=` picks the comparisons:

    hhh            Anthropic's helpful-harmless set (Anthropic/hh-rlhf)
    helpsteer3     NVIDIA's HelpSteer3 preference set
    ultrafeedback  UltraFeedback, binarized (HuggingFaceH4/ultrafeedback_binarized)
    arithmetic     generated sums, the correct answer over a nearly correct one (offline)
    <file>.jsonl   one comparison per line (`preference.datasets` describes the format)

and `dataset.<key>=...` sets that builder's own settings (`dataset.max_train=1000`,
`dataset.test_path=heldout.jsonl`). Every other key is a field of `preference.train_dpo.Config`;
`dataset_builder.comparison_builder` follows `dataset`.
"""

from collections.abc import Mapping
from pathlib import Path

import chz
from chz.blueprint import Reference

from preference import train_dpo
from preference.data import DPODatasetBuilder
from preference.datasets import ComparisonDatasetBuilder
from recipes_lib.choices import Entry, Factory, NamedChoice, Preset, resolve
from recipes_lib.cli import run_recipe

DATASETS = {
    "hhh": "preference.datasets:HHHComparisonBuilder",
    "helpsteer3": "preference.datasets:HelpSteer3ComparisonBuilder",
    "ultrafeedback": "preference.datasets:UltraFeedbackComparisonBuilder",
    "arithmetic": "recipes.arithmetic.comparisons:ArithmeticComparisonBuilder",
}


def _comparisons_file(value: str) -> Factory | None:
    """`dataset=<file>.jsonl`: comparisons read from the file."""
    if value.endswith(".jsonl") or Path(value).is_file():
        return resolve(Preset("preference.datasets:ComparisonBuilderFromJsonl", train_path=value))
    return None


def dataset_field(default: str, names: Mapping[str, Entry] = DATASETS) -> ComparisonDatasetBuilder:
    """A `dataset=` field choosing the comparisons by name (see the module docstring)."""
    field: ComparisonDatasetBuilder = chz.field(
        meta_factory=NamedChoice("dataset", names, default=default, other=_comparisons_file,
                                 other_help="a comparisons .jsonl file"),
        doc="hhh | helpsteer3 | ultrafeedback | arithmetic | <file>.jsonl",
    )
    return field


@chz.chz
class Config(train_dpo.Config):
    """`preference.train_dpo.Config` with the comparisons chosen by name (see the module docstring)."""

    dataset: ComparisonDatasetBuilder = dataset_field(default="hhh")


def defaults() -> dict[str, object]:
    """The keys that tie `dataset_builder` to `dataset` and the run's model; shared with recipes."""
    return {
        "dataset_builder": DPODatasetBuilder,
        "dataset_builder.comparison_builder": Reference("dataset"),
        "dataset_builder.model_name_for_tokenizer": Reference("model_name"),
    }


def build_config() -> chz.Blueprint[Config]:
    """The CLI's defaults; every one can be overridden with `key=value`."""
    return chz.Blueprint(Config).apply({"log_path": "/tmp/recipes/train_dpo_cli", **defaults()})


def main(config: Config) -> None:
    train_dpo.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
