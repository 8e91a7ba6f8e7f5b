"""RL on math word problems (GSM8K) or competition math (Hendrycks MATH), graded on the boxed answer.

    python -m recipes.math_rl env=gsm8k                      # openai/gsm8k; needs the hub the first time
    python -m recipes.math_rl env=math                       # EleutherAI/hendrycks_math, tested on MATH-500
    python -m recipes.math_rl env=math env.convo_prefix=None model_name=Qwen/Qwen3-8B
    python -m recipes.math_rl env=math env.train_file=train.jsonl env.test_file=test.jsonl
    python -m recipes.math_rl env=gsm8k --help               # every key, with its value

Each iteration samples `group_size` solutions to each of `batch_size` problems, rewards a solution
whose last `\\boxed{...}` equals the reference (GSM8K: the same number; MATH: equivalent as
`math-verify` judges it) and takes `format_coef` from one without a box, and trains on each
reward minus its group's mean. Logged: `env/all/correct`, `env/all/format`, greedy test accuracy
`test/env/all/correct` every `eval_every` iterations, and transcripts in `<log_path>/rollouts/`.
`env=` picks the dataset and `env.<key>=...` sets its settings. The default model, SmolLM2-135M, runs
offline but rarely solves these problems; pass a larger `model_name` for real training.
"""

import chz
from chz.blueprint import Reference

from recipes.math.gsm8k import Gsm8kDatasetBuilder
from recipes.math.math_env import MathDatasetBuilder
from recipes_lib.choices import Entry, NamedChoice, Preset
from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from rl import train
from rl.types import RLDatasetBuilder

LOG_PATH = "/tmp/recipes-examples/math_rl"
ENVS: dict[str, Entry] = {
    "gsm8k": Preset(Gsm8kDatasetBuilder, convo_prefix="standard", max_test_problems=50),
    "math": Preset(MathDatasetBuilder, convo_prefix="standard", max_test_problems=50),
}


def _log_path(config: "Config", value: str | None) -> str:
    return value if value is not None else f"{LOG_PATH}/{'math' if isinstance(config.env, MathDatasetBuilder) else 'gsm8k'}"


@chz.chz
class Config(train.Config):
    """`rl.train.Config` with the problems chosen by `env=` (gsm8k or math)."""

    env: RLDatasetBuilder = chz.field(meta_factory=NamedChoice("env", ENVS, default="gsm8k"),
                                      doc="gsm8k | math (Hendrycks MATH, tested on MATH-500)")
    # None: /tmp/recipes-examples/math_rl/<env>.
    log_path: str = chz.field(default=None, munger=_log_path, x_type=str | None)


def build_config() -> chz.Blueprint[Config]:
    """The recipe's defaults; the command line overrides any of them."""
    return chz.Blueprint(Config).apply({
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the dataset builder can follow it
        "dataset_builder": Reference("env"),
        "env.model_name_for_tokenizer": Reference("model_name"),
        "env.renderer_name": Reference("renderer_name"),
        "env.batch_size": 8,
        "env.group_size": 4,
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
