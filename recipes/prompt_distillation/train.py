"""Prompt distillation, step 2: fine-tune the student on the teacher's labels, without the prompt.

Run (after `python -m recipes.prompt_distillation.create_data`):
`python -m recipes.prompt_distillation.train` (any `supervised.train.Config` key overrides a default).

This is plain supervised fine-tuning through `supervised.train` on the conversations JSONL that
`create_data` wrote: the user message is the text, the assistant message the teacher's label, and
the long teacher prompt appears nowhere. The `LanguageIdEvaluator` runs before the first step (the
untrained model without the prompt) and after the last (the student): `test/teacher_agreement` is
how often its bare answer equals the prompted teacher's on held-out sentences, `test/accuracy` how
often it equals the true label.

Without the prompt the untrained model chats instead of answering with a label; the student learns
to answer as the prompted teacher does. `make reproduce` measures both (docs/figures.md).
"""

import chz
from chz.blueprint import Reference

from recipes.prompt_distillation.create_data import DEFAULT_OUTPUT
from recipes.prompt_distillation.evaluation import LanguageIdEvaluatorBuilder
from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from supervised import train
from supervised.datasets import FromConversationFileBuilder

COMMON = "dataset_builder.common_config"


def build_config() -> chz.Blueprint[train.Config]:
    """The recipe's defaults; the command line overrides any of them."""
    return chz.Blueprint(train.Config).apply({
        "log_path": "/tmp/recipes/prompt_distillation/student",
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,
        "dataset_builder": FromConversationFileBuilder,
        "dataset_builder.file_path": DEFAULT_OUTPUT,
        f"{COMMON}.model_name_for_tokenizer": Reference("model_name"),
        f"{COMMON}.renderer_name": Reference("renderer_name"),
        f"{COMMON}.batch_size": 16,
        f"{COMMON}.max_length": 256,
        "learning_rate": 1e-3,
        "lr_schedule": "linear",
        "num_epochs": 4,
        "eval_every": 20,
        "save_every": 40,
        "evaluator_builders.0": LanguageIdEvaluatorBuilder,
        "evaluator_builders.0.data_file": Reference("dataset_builder.file_path"),
        "evaluator_builders.0.model_name": Reference("model_name"),
        "evaluator_builders.0.renderer_name": Reference("renderer_name"),
    })


def main(config: train.Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
