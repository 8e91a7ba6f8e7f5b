"""DPO, the recipe: SmolLM2-135M learns to prefer the correct sum over a nearly correct one, offline.

    python -m recipes.preference.train                                  # the arithmetic pairs, as dpo_basic
    python -m recipes.preference.train dataset=jsonl dataset.train_path=example_data/comparisons.jsonl log_path=/tmp/dpo-mine
    python -m recipes.preference.train log_path=/tmp/dpo-experiment model_name=meta-llama/Llama-3.2-1B \\
        dataset=hhh renderer_name=role_colon learning_rate=1e-5 dpo_beta=0.1   # needs the hub
    python -m recipes.preference.train --help                          # every key, with its value

`dataset=` is `arithmetic` (default), `hhh`, `helpsteer3`, `ultrafeedback` or `jsonl` (a comparisons
file, `dataset.train_path=...`; the names are in `recipes/comparisons.py`); every other key is a field
of `preference.train_dpo.Config`. With the default data this is `recipes.dpo_basic`'s run: held-out
`test/accuracy` and `test/margin` climb from zero as the policy learns the preference.
"""

import chz
from chz.blueprint import Castable

from preference import train_dpo, train_dpo_cli
from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME


def build_config() -> chz.Blueprint[train_dpo_cli.Config]:
    """The recipe's defaults (those of `recipes.dpo_basic`); the command line overrides any of them."""
    return train_dpo_cli.build_config().apply({
        "log_path": "/tmp/recipes/preference_train",
        "model_name": SMOLLM2_NAME,
        "dataset": Castable("arithmetic"),
        "dataset_builder.batch_size": 16,
        "dataset_builder.max_length": 128,
        # LoRA on a 135M model wants a far larger step than full fine-tuning of a big one.
        "learning_rate": 3e-4,
        "lr_schedule": "linear",
        "dpo_beta": 0.1,
        "lora_rank": 32,
        "eval_every": 8,
        "save_every": 8,
    })


def main(config: train_dpo_cli.Config) -> None:
    train_dpo.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
