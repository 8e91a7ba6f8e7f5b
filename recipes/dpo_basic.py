"""DPO on SmolLM2, offline: learn to prefer the correct sum over a nearly correct one.

Run: `python -m recipes.dpo_basic` (any `key=value` of `preference.train_dpo.Config` overrides a
default, e.g. `learning_rate=3e-4 dataset_builder.batch_size=8`, or `backend=tinker model_name=...`).

The data is generated in code (`recipes.arithmetic.comparisons`): "What is 17 + 25?" answered "17 + 25 = 42"
(chosen) or "17 + 25 = 43" (rejected, off by 1, 2 or 3). Every `eval_every` steps the loop scores
the held-out pairs, whose problems never appear in training: `test/accuracy` is the fraction where
the policy raised the correct answer's likelihood (relative to the frozen starting model) more than
the wrong one's, and `test/margin` is how much more. Both start at zero and climb as the model
learns the preference; docs/figures.md has the measured numbers.

Swap in your own comparisons with
`dataset_builder.comparison_builder=preference.datasets:ComparisonBuilderFromJsonl
 dataset_builder.comparison_builder.train_path=pairs.jsonl`.
"""

import chz

from preference import train_dpo
from preference.data import DPODatasetBuilder
from recipes.comparisons import MeasuredArithmeticComparisons
from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME


def build_config() -> chz.Blueprint[train_dpo.Config]:
    """The recipe's defaults; the command line overrides any of them."""
    return chz.Blueprint(train_dpo.Config).apply(
        {
            "log_path": "/tmp/recipes/dpo_basic",
            "model_name": SMOLLM2_NAME,
            # Nested keys, not an object, so `dataset_builder.batch_size=8` still overrides one field.
            "dataset_builder": DPODatasetBuilder,
            "dataset_builder.comparison_builder": MeasuredArithmeticComparisons,
            "dataset_builder.batch_size": 16,
            "dataset_builder.max_length": 128,
            # LoRA on a 135M model wants a far larger step than full fine-tuning of a big one.
            "learning_rate": 3e-4,
            "lr_schedule": "linear",
            "dpo_beta": 0.1,
            "num_epochs": 1,
            "lora_rank": 32,
            "eval_every": 8,
            "save_every": 8,
        }
    )


def main(config: train_dpo.Config) -> None:
    train_dpo.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
