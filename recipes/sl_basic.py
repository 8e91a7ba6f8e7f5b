"""Supervised fine-tuning: teach SmolLM2-135M to write numbers in words, offline, on a laptop CPU.

    python -m recipes.sl_basic                                      # minutes on a laptop CPU (docs/figures.md)
    python -m recipes.sl_basic learning_rate=3e-4 log_path=/tmp/sl-lr-3e-4
    python -m recipes.sl_basic dataset=example_data/conversations.jsonl
    python -m recipes.sl_basic dataset=HuggingFaceH4/no_robots      # needs the Hugging Face hub
    python -m recipes.sl_basic --help                               # every key, with its value

160 steps of 16 conversations ("Write 4072 in words." -> "four thousand seventy-two"); held-out
exact match (`test/exact_match` in metrics.jsonl) goes from 0 % to over 90 % by about step 100.
`dataset=` picks the data: `number_words` (default), a conversations JSONL file, or a Hugging Face
dataset id; `dataset.<key>=...` sets the chosen builder's settings (`dataset.common_config.batch_size=8`,
or `...batch_size=8`), and every other key is a field of `supervised.train.Config`.
"""

from pathlib import Path

import chz
from chz.blueprint import Reference

from recipes_lib.choices import Factory, NamedChoice, Preset, resolve
from recipes_lib.cli import run_recipe
from recipes_lib.evaluators import EvaluatorBuilder
from recipes_lib.hyperparams import get_lr
from recipes_lib.paths import SMOLLM2_NAME
from supervised import train
from supervised.datasets import FromConversationFileBuilder
from supervised.number_words import SYSTEM_PROMPT, NumberWordsBuilder, NumberWordsExactMatchBuilder
from supervised.types import ChatDatasetBuilderCommonConfig, SupervisedDatasetBuilder

LOG_PATH = "/tmp/recipes-examples/sl_basic"
DATASETS = {  # the measured recipe: scripts/reproduce.sh runs it for the README's table
    "number_words": Preset(NumberWordsBuilder, num_train=2560,  # 160 steps of 16
                           num_heldout=48, seed=0,
                           system_prompt=SYSTEM_PROMPT,  # shorter than SmolLM2's default: faster steps
                           common_config=Preset(ChatDatasetBuilderCommonConfig, batch_size=16, max_length=128)),
}


def _file_or_hub(value: str) -> Factory | None:
    if value.endswith(".jsonl") or Path(value).is_file():
        return resolve(Preset(FromConversationFileBuilder, file_path=value, test_size=8,
                              common_config=Preset(ChatDatasetBuilderCommonConfig, batch_size=8)))
    if value.count("/") == 1:
        return resolve(Preset("supervised.datasets:HuggingFaceChatBuilder", path=value,
                              common_config=Preset(ChatDatasetBuilderCommonConfig, batch_size=32)))
    return None


def _by_dataset(config: "Config", number_words: float, file: float, hub: float) -> float:
    dataset = config.dataset
    if isinstance(dataset, NumberWordsBuilder):
        return number_words
    return file if isinstance(dataset, FromConversationFileBuilder) else hub


def _learning_rate(config: "Config", value: float | None) -> float:
    return value if value is not None else _by_dataset(config, 1e-3, get_lr(config.model_name), get_lr(config.model_name))


def _num_epochs(config: "Config", value: int | None) -> int:
    return value if value is not None else int(_by_dataset(config, 1, 3, 1))


def _eval_every(config: "Config", value: int | None) -> int:
    return value if value is not None else int(_by_dataset(config, 20, 4, 20))


def _evaluators(config: "Config", value: list[EvaluatorBuilder]) -> list[EvaluatorBuilder]:
    """The number-words exact match reads the numbers the dataset held out; other data has none."""
    dataset = config.dataset
    if not isinstance(dataset, NumberWordsBuilder):
        return [e for e in value if not isinstance(e, NumberWordsExactMatchBuilder)]
    return [chz.replace(e, num_heldout=dataset.num_heldout, seed=dataset.seed, system_prompt=dataset.system_prompt)
            if isinstance(e, NumberWordsExactMatchBuilder) else e for e in value]


@chz.chz
class Config(train.Config):
    """`supervised.train.Config` with the data chosen by `dataset=`; settings left unset follow the data."""

    dataset: SupervisedDatasetBuilder = chz.field(
        meta_factory=NamedChoice("dataset", DATASETS, default="number_words", other=_file_or_hub,
                                 other_help="a conversations .jsonl file or a Hugging Face dataset id (owner/name)"),
        doc="number_words | <file>.jsonl | <owner>/<name> (a Hugging Face chat dataset)")
    # None: 1e-3 on number_words (the best of a sweep, docs/findings.md), else recipes_lib.hyperparams.get_lr(model_name).
    learning_rate: float = chz.field(default=None, munger=_learning_rate, x_type=float | None)
    # None: 1 epoch; 3 over a (small) JSONL file.
    num_epochs: int = chz.field(default=None, munger=_num_epochs, x_type=int | None)
    # None: every 20 steps; every 4 over a JSONL file.
    eval_every: int = chz.field(default=None, munger=_eval_every, x_type=int | None)
    # The number-words exact match, only when training on number words (it follows dataset's split).
    evaluator_builders: list[EvaluatorBuilder] = chz.field(default_factory=list, munger=_evaluators)


def build_config() -> chz.Blueprint[Config]:
    """The recipe's defaults; the command line overrides any of them."""
    common = "dataset.common_config"
    return chz.Blueprint(Config).apply({
        "log_path": LOG_PATH,
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the dataset can follow it
        "lr_schedule": "linear",
        "save_every": 100,
        "dataset_builder": Reference("dataset"),
        f"{common}.model_name_for_tokenizer": Reference("model_name"),
        f"{common}.renderer_name": Reference("renderer_name"),
        "evaluator_builders.0": NumberWordsExactMatchBuilder,
        "evaluator_builders.0.model_name": Reference("model_name"),
        "evaluator_builders.0.renderer_name": Reference("renderer_name"),
    })


def main(config: Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
