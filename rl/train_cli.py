"""RL on any environment by name, from the command line.

    python -m rl.train_cli env=arithmetic model_name=HuggingFaceTB/SmolLM2-135M-Instruct
    python -m rl.train_cli env=gsm8k model_name=Qwen/Qwen3-8B groups_per_batch=64 group_size=16 max_tokens=512
    python -m rl.train_cli env=hhh log_path=/tmp/hhh-rl groups_per_batch=256 group_size=4 max_tokens=400 \\
        learning_rate=2e-5 model_name=<policy> env.preference_model_builder.model_name=<its base> \\
        env.preference_model_builder.rm_weights_path=<the preference model's sampler checkpoint>
    python -m rl.train_cli --help                                   # every key, with its value

`env=` picks the environment by name, from the table in `recipes/envs.py` (arithmetic, gsm8k, math,
guess_number, twenty_questions, hhh: the RLHF stage, whose preference model `supervised.train_cli
dataset=hhh` trains), or any builder by its full name (`env=my_package.my_env:MyDatasetBuilder`).

`groups_per_batch` (prompts per iteration) and `group_size` (samples per prompt, whose rewards are
compared) set the environment's `batch_size` and `group_size`; `env.<key>=...` sets any other
setting of the chosen environment. Every other key is a field of `rl.train.Config`.

The names live in `recipes`, the top layer, where the tasks are: chz imports that table only when
`env=` is read. This CLI is the one place `rl` names it, because the Tinker docs put the CLI here.
"""

import chz
from chz.blueprint import Castable, Reference

from recipes_lib.cli import run_recipe
from rl import train
from rl.types import RLDatasetBuilder

ENV_TABLE = "recipes.envs"  # the module whose names `env=` looks up


@chz.chz
class Config(train.Config):
    """`rl.train.Config` with the environment chosen by name (see the module docstring)."""

    # Prompts (groups) per iteration: the environment's batch_size.
    groups_per_batch: int = 8
    # Samples per prompt, whose rewards are compared within the group.
    group_size: int = 4
    env: RLDatasetBuilder = chz.field(
        meta_factory=chz.factories.function(default_module=ENV_TABLE),
        doc="arithmetic | gsm8k | math | guess_number | twenty_questions | hhh | <module>:<Builder>",
    )


def build_config() -> chz.Blueprint[Config]:
    """The CLI's defaults; every one can be overridden with `key=value`."""
    return chz.Blueprint(Config).apply({
        "log_path": "/tmp/recipes/rl_train_cli",
        "renderer_name": None,  # set explicitly so the environment can follow it
        "learning_rate": 1e-4,
        "max_tokens": 64,
        # Given here, not only as the fields' defaults, so that the references below find them.
        "groups_per_batch": 8,
        "group_size": 4,
        "env": Castable("arithmetic"),
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
