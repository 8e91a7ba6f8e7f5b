"""Supervised fine-tuning: teach SmolLM2-135M to write numbers in words, offline, on a laptop CPU.

    python -m recipes.sl_basic                                      # minutes on a laptop CPU (docs/figures.md)
    python -m recipes.sl_basic learning_rate=3e-4 log_path=/tmp/sl-lr-3e-4
    python -m recipes.sl_basic dataset.num_heldout=96               # the exact-match evaluator follows the data
    python -m recipes.sl_basic dataset=example_data/conversations.jsonl   # your own conversations
    python -m recipes.sl_basic dataset=HuggingFaceH4/no_robots      # needs the Hugging Face hub
    python -m recipes.sl_basic --help                               # every key, with its value

128 steps of 8 conversations ("Write 4072 in words." -> "four thousand seventy-two", from
recipes/number_words/); held-out greedy exact match is `test/exact_match` in metrics.jsonl.
`dataset.<key>=...` sets the data's settings (`dataset.common_config.batch_size=16`, or
`...batch_size=16`); every other key is a field of `supervised.train.Config`.

Other data (`dataset=<file>.jsonl`, `dataset=<owner>/<name>` or another name of `recipes/datasets.py`)
starts from the supervised CLI's defaults instead (`supervised.train_cli`, with its preset for a file or
a hub id): no numbers to grade, so no exact-match evaluator, and the model's default learning rate.
"""

import sys
from collections.abc import Sequence

import chz
from chz.blueprint import Castable, Reference

from recipes.number_words.evaluator import NumberWordsExactMatchBuilder
from recipes.number_words.task import SYSTEM_PROMPT
from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from supervised import train, train_cli

RUN = {"log_path": "/tmp/recipes-examples/sl_basic", "model_name": SMOLLM2_NAME, "lr_schedule": "linear",
       "save_every": 100}


def build_config() -> chz.Blueprint[train_cli.Config]:
    """The recipe's defaults; the command line overrides any of them."""
    evaluator = "evaluator_builders.0"
    return train_cli.build_config().apply({
        **RUN,
        "dataset": Castable("number_words"),
        "dataset.num_train": 1024,  # 128 steps of 8
        # Given here, not only as the builder's defaults, so that the evaluator's references find them.
        "dataset.num_heldout": 48,
        "dataset.seed": 0,
        "dataset.system_prompt": SYSTEM_PROMPT,  # shorter than SmolLM2's default: faster steps
        "dataset.common_config.batch_size": 8,  # twice the steps of 16 learn more (docs/findings.md)
        "dataset.common_config.max_length": 128,
        "learning_rate": 1e-3,  # the best of a sweep on this data (docs/findings.md)
        "eval_every": 64,
        # Greedy exact match on the numbers the dataset held out (the same split, so it follows the data).
        evaluator: NumberWordsExactMatchBuilder,
        f"{evaluator}.model_name": Reference("model_name"),
        f"{evaluator}.renderer_name": Reference("renderer_name"),
        f"{evaluator}.num_heldout": Reference("dataset.num_heldout"),
        f"{evaluator}.seed": Reference("dataset.seed"),
        f"{evaluator}.system_prompt": Reference("dataset.system_prompt"),
    })


def main(config: train.Config) -> None:
    train.main(config)


def blueprint_for(argv: Sequence[str]) -> tuple[chz.Blueprint[train_cli.Config], list[str]]:
    """This recipe, or for other data the supervised CLI's defaults with RUN; and the arguments left."""
    own_data, args = train_cli.own_data_arguments(argv)  # dataset=<file>.jsonl or <owner>/<name>
    other_data = own_data is not None or any(a.startswith("dataset=") and a != "dataset=number_words" for a in args)
    return train_cli.build_config().apply(RUN | (own_data or {})) if other_data else build_config(), args


if __name__ == "__main__":
    run_recipe(main, *blueprint_for(sys.argv[1:]))
