"""RL on math word problems (GSM8K) or competition math (Hendrycks MATH), graded on the boxed answer.

    python -m recipes.math.train env=gsm8k                      # openai/gsm8k; needs the hub the first time
    python -m recipes.math.train env=math                       # EleutherAI/hendrycks_math, tested on MATH-500
    python -m recipes.math.train env=math env.convo_prefix=None model_name=Qwen/Qwen3-8B
    python -m recipes.math.train env=math env.train_file=train.jsonl env.test_file=test.jsonl
    python -m recipes.math.train env=gsm8k --help               # every key, with its value

Each iteration samples `group_size` solutions to each of `batch_size` problems, rewards a solution
whose last `\\boxed{...}` equals the reference (GSM8K: the same number; MATH: equivalent as
`math-verify` judges it) and takes `format_coef` from one without a box, and trains on each
reward minus its group's mean. Logged: `env/all/correct`, `env/all/format`, greedy test accuracy
`test/env/all/correct` every `eval_every` iterations, and transcripts in `<log_path>/rollouts/`.
`env=` picks the dataset (`recipes/envs.py`; both live in `recipes/math/`) and `env.<key>=...` sets
its settings. The default model, SmolLM2-135M, runs offline but rarely solves these problems; pass a
larger `model_name` for real training.
"""

import chz
from chz.blueprint import Castable

from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from rl import train, train_cli


def build_config() -> chz.Blueprint[train_cli.Config]:
    """The recipe's defaults; the command line overrides any of them."""
    return train_cli.build_config().apply({
        "log_path": "/tmp/recipes-examples/math_rl",
        "model_name": SMOLLM2_NAME,
        "env": Castable("gsm8k"),
        "env.convo_prefix": "standard",  # a worked example first, showing the \boxed{} format
        "env.max_test_problems": 50,
        "learning_rate": 1e-4,
        "max_tokens": 256,
        "backend.precision": "float32",  # the sampler's and trainer's log-probs agree exactly
        "remove_constant_reward_groups": True,  # they have zero advantage: skip their compute
        "eval_every": 20,
        "save_every": 20,
    })


def main(config: train.Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
