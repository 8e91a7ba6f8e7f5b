"""Supervised training of any model on any chat data, from the command line.

    python -m supervised.train_cli dataset=hhh model_name=Qwen/Qwen3-8B learning_rate=4e-4 log_path=/tmp/hhh-pm
    python -m supervised.train_cli dataset=example_data/conversations.jsonl model_name=HuggingFaceTB/SmolLM2-135M-Instruct
    python -m supervised.train_cli dataset=HuggingFaceH4/no_robots model_name=...   # needs the Hugging Face hub
    python -m supervised.train_cli --help                                           # every key, with its value

`dataset=` picks the data:

    hhh, helpsteer3, ultrafeedback   the pairwise preference model of the RLHF pipeline: each comparison
                                     is a question "which reply is better, A or B?" answered "A" or "B"
                                     (`preference.reward_model.PreferenceChatDatasetBuilder`)
    <file>.jsonl                     conversations, one {"messages": [...]} per line
    <owner>/<name>                   a Hugging Face chat dataset with a `messages` column

and `dataset.<key>=...` sets that builder's own settings (`dataset.common_config.batch_size=8`,
`dataset.comparison_builder.max_train=1000`). Every other key is a field of
`supervised.train.Config`; `dataset_builder` follows `dataset`.

The preference-model data lives in `preference`, a layer above this one: the table names it as a
string, imported only when `dataset=hhh|helpsteer3|ultrafeedback` is chosen. This CLI is the one
place `supervised` reaches up, because the Tinker docs put it here; the rest of the package does not.
"""

from pathlib import Path

import chz
from chz.blueprint import Reference

from recipes_lib.choices import Factory, NamedChoice, Preset, resolve
from recipes_lib.cli import run_recipe
from supervised import train
from supervised.types import SupervisedDatasetBuilder

_PREFERENCE_DATA = "preference.reward_model:PreferenceChatDatasetBuilder"
DATASETS = {
    "hhh": Preset(_PREFERENCE_DATA, comparison_builder=Preset("preference.datasets:HHHComparisonBuilder")),
    "helpsteer3": Preset(_PREFERENCE_DATA, comparison_builder=Preset("preference.datasets:HelpSteer3ComparisonBuilder")),
    "ultrafeedback": Preset(_PREFERENCE_DATA,
                            comparison_builder=Preset("preference.datasets:UltraFeedbackComparisonBuilder")),
}


def _file_or_hub(value: str) -> Factory | None:
    """`dataset=<file>.jsonl` reads conversations from the file; `<owner>/<name>` loads a hub dataset."""
    if value.endswith(".jsonl") or Path(value).is_file():
        return resolve(Preset("supervised.datasets:FromConversationFileBuilder", file_path=value))
    if value.count("/") == 1 and not Path(value).exists():
        return resolve(Preset("supervised.datasets:HuggingFaceChatBuilder", path=value))
    return None


@chz.chz
class Config(train.Config):
    """`supervised.train.Config` with the data chosen by name (see the module docstring)."""

    dataset: SupervisedDatasetBuilder = chz.field(
        meta_factory=NamedChoice("dataset", DATASETS, default="hhh", other=_file_or_hub,
                                 other_help="a conversations .jsonl file or a Hugging Face dataset id (owner/name)"),
        doc="hhh | helpsteer3 | ultrafeedback (preference-model data) | <file>.jsonl | <owner>/<name> (hub)")


def build_config() -> chz.Blueprint[Config]:
    """The CLI's defaults; every one can be overridden with `key=value`."""
    common = "dataset.common_config"
    return chz.Blueprint(Config).apply({
        "log_path": "/tmp/recipes/supervised_train_cli",
        "renderer_name": None,  # set explicitly so the dataset can follow it
        "dataset_builder": Reference("dataset"),
        f"{common}.model_name_for_tokenizer": Reference("model_name"),
        f"{common}.renderer_name": Reference("renderer_name"),
    })


def main(config: Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
