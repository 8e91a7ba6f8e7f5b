"""RL on any environment by name, from the command line.

    python -m rl.train_cli env=arithmetic model_name=HuggingFaceTB/SmolLM2-135M-Instruct
    python -m rl.train_cli env=gsm8k model_name=Qwen/Qwen3-8B groups_per_batch=64 group_size=16 max_tokens=512
    python -m rl.train_cli env=hhh log_path=/tmp/hhh-rl groups_per_batch=256 group_size=4 max_tokens=400 \\
        learning_rate=2e-5 model_name=<policy> env.preference_model_builder.model_name=<its base> \\
        env.preference_model_builder.rm_weights_path=<the preference model's sampler checkpoint>
    python -m rl.train_cli --help                                   # every key, with its value

`env=` picks the environment:

    arithmetic        sums of two integers (offline)
    gsm8k             grade-school word problems (`openai/gsm8k`; `env.train_file=...` for local copies)
    math              Hendrycks MATH, graded on \\boxed{} (`recipes.math.math_env`)
    guess_number      a multi-turn game: find the hidden number from "higher"/"lower" (offline)
    twenty_questions  a multi-turn game against an answering model (`recipes.twenty_questions.env`)
    hhh               the RLHF stage: replies to Anthropic HH prompts compared pairwise by a trained
                      preference model (`supervised.train_cli dataset=hhh` trains one)

`groups_per_batch` (prompts per iteration) and `group_size` (samples per prompt, whose rewards are
compared) set the environment's `batch_size` and `group_size`; `env.<key>=...` sets any other
setting of the chosen environment. Every other key is a field of `rl.train.Config`.

`env=hhh` lives in `preference`, a layer above this one: the table names it as a string, imported
only when chosen. This CLI is the one place `rl` reaches up, because the Tinker docs put it here.
"""

import chz
from chz.blueprint import Reference

from recipes_lib.choices import Entry, NamedChoice, Preset
from recipes_lib.cli import run_recipe
from rl import train
from rl.types import RLDatasetBuilder

ENVS: dict[str, Entry] = {
    "arithmetic": "recipes.arithmetic.env:ArithmeticDatasetBuilder",
    "gsm8k": "recipes.math.gsm8k:Gsm8kDatasetBuilder",
    "math": "recipes.math.math_env:MathDatasetBuilder",
    "guess_number": "recipes.guess_number.env:GuessNumberDatasetBuilder",
    "twenty_questions": "recipes.twenty_questions.env:TwentyQuestionsDatasetBuilder",
    "hhh": Preset("preference.envs:PairwisePreferenceRLDatasetBuilder",
                  comparison_builder=Preset("preference.datasets:HHHComparisonBuilder")),
}


@chz.chz
class Config(train.Config):
    """`rl.train.Config` with the environment chosen by name (see the module docstring)."""

    env: RLDatasetBuilder = chz.field(
        meta_factory=NamedChoice("env", ENVS, default="arithmetic"),
        doc="arithmetic | gsm8k | math | guess_number | twenty_questions | hhh",
    )
    # Prompts (groups) per iteration: the environment's batch_size.
    groups_per_batch: int = 8
    # Samples per prompt, whose rewards are compared within the group.
    group_size: int = 4


def build_config() -> chz.Blueprint[Config]:
    """The CLI's defaults; every one can be overridden with `key=value`."""
    return chz.Blueprint(Config).apply({
        "log_path": "/tmp/recipes/rl_train_cli",
        "renderer_name": None,  # set explicitly so the environment can follow it
        "learning_rate": 1e-4,
        "max_tokens": 64,
        "dataset_builder": Reference("env"),
        "env.model_name_for_tokenizer": Reference("model_name"),
        "env.renderer_name": Reference("renderer_name"),
        "env.batch_size": Reference("groups_per_batch"),
        "env.group_size": Reference("group_size"),
    })


def main(config: Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
