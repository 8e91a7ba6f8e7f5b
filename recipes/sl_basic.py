"""Supervised fine-tuning: teach SmolLM2-135M to write numbers in words, offline, on a laptop CPU.

    python -m recipes.sl_basic                                      # ~7 min on 2 cores
    python -m recipes.sl_basic learning_rate=3e-4 log_path=/tmp/sl-lr-3e-4
    python -m recipes.sl_basic dataset=example_data/conversations.jsonl
    python -m recipes.sl_basic dataset=HuggingFaceH4/no_robots      # needs the Hugging Face hub
    python -m recipes.sl_basic --help                               # every key, with its value

160 steps of 16 conversations ("Write 4072 in words." -> "four thousand seventy-two"); held-out
exact match (`test/exact_match` in metrics.jsonl) goes from 0 % to over 90 % by about step 100.
`dataset=` (read before the other keys) picks the data: `number_words` (default), a conversations
JSONL file, or a Hugging Face dataset id; every other key is a field of `supervised.train.Config`,
nested ones dotted (`dataset_builder.common_config.batch_size=8`, or `...batch_size=8`).
"""

import sys
from pathlib import Path
from typing import Any

import chz
from chz.blueprint import Reference

from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from supervised import train
from supervised.datasets import FromConversationFileBuilder, HuggingFaceChatBuilder
from supervised.number_words import SYSTEM_PROMPT, NumberWordsBuilder, NumberWordsExactMatchBuilder

LOG_PATH = "/tmp/recipes-examples/sl_basic"
COMMON = "dataset_builder.common_config"


def build_config(dataset: str = "number_words") -> chz.Blueprint[train.Config]:
    """The recipe's defaults; `dataset` is "number_words", a .jsonl file or a Hugging Face id."""
    return chz.Blueprint(train.Config).apply({
        "log_path": LOG_PATH,
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the builders below can follow it
        "lr_schedule": "linear",
        "eval_every": 20,
        "save_every": 100,
        f"{COMMON}.model_name_for_tokenizer": Reference("model_name"),
        f"{COMMON}.renderer_name": Reference("renderer_name"),
        **_dataset_defaults(dataset),
    })


def _dataset_defaults(dataset: str) -> dict[str, Any]:
    if dataset == "number_words":
        return {  # the measured recipe: reference/learning-feasibility.md
            "dataset_builder": NumberWordsBuilder,
            "dataset_builder.num_train": 2560,  # 160 steps of 16
            "dataset_builder.num_heldout": 48,
            "dataset_builder.seed": 0,
            "dataset_builder.system_prompt": SYSTEM_PROMPT,  # shorter than SmolLM2's default: faster steps
            f"{COMMON}.batch_size": 16,
            f"{COMMON}.max_length": 128,
            "learning_rate": 1e-3,
            "evaluator_builders.0": NumberWordsExactMatchBuilder,
            "evaluator_builders.0.model_name": Reference("model_name"),
            "evaluator_builders.0.renderer_name": Reference("renderer_name"),
            "evaluator_builders.0.num_heldout": Reference("dataset_builder.num_heldout"),
            "evaluator_builders.0.seed": Reference("dataset_builder.seed"),
            "evaluator_builders.0.system_prompt": Reference("dataset_builder.system_prompt"),
        }
    if dataset.endswith(".jsonl") or Path(dataset).is_file():
        return {"dataset_builder": FromConversationFileBuilder, "dataset_builder.file_path": dataset,
                "dataset_builder.test_size": 8, f"{COMMON}.batch_size": 8, "num_epochs": 3, "eval_every": 4}
    return {"dataset_builder": HuggingFaceChatBuilder, "dataset_builder.path": dataset, f"{COMMON}.batch_size": 32}


def main(config: train.Config) -> None:
    train.main(config)


def pop_dataset(argv: list[str]) -> tuple[str, list[str]]:
    """The value of a `dataset=...` argument (default "number_words") and the other arguments."""
    values = [arg.split("=", 1)[1] for arg in argv if arg.startswith("dataset=")]
    return (values[-1] if values else "number_words"), [arg for arg in argv if not arg.startswith("dataset=")]


if __name__ == "__main__":
    dataset, argv = pop_dataset(sys.argv[1:])
    run_recipe(main, build_config(dataset), argv)
