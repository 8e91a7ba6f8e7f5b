"""Reinforcement learning: teach SmolLM2-135M to add, offline, on a laptop CPU.

    python -m recipes.rl_basic                                    # ~8 min on 2 cores
    python -m recipes.rl_basic loss_fn=ppo num_substeps=2
    python -m recipes.rl_basic async_config.max_steps_off_policy=2 async_config.groups_per_batch=8
    python -m recipes.rl_basic stream_minibatch_config.groups_per_batch=8 stream_minibatch_config.num_minibatches=2
    python -m recipes.rl_basic env=guess_number                   # multi-turn; env=gsm8k needs the hub
    python -m recipes.rl_basic --help                             # every key, with its value

Each iteration samples 4 answers to each of 8 problems "What is A + B?" (A, B in 1..20), rewards
an answer whose last integer is the sum, and trains on each answer's reward minus its group's
mean. Greedy accuracy on 100 held-out problems (`test/env/all/correct`) starts near 20 %,
mostly because the model rambles past its 16-token budget, and reaches about 80 % in 60 iterations
as it learns to answer "A + B = C". Transcripts of a few groups per iteration are printed and
written to `<log_path>/rollouts/`. `env=` (read before the other keys) picks the task.
"""

import sys
from typing import Any

import chz
from chz.blueprint import Reference

from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from rl import train
from rl.envs.arithmetic import ArithmeticDatasetBuilder
from rl.envs.gsm8k import Gsm8kDatasetBuilder
from rl.envs.guess_number import GuessNumberDatasetBuilder

LOG_PATH = "/tmp/recipes-examples/rl_basic"
ENVS: dict[str, dict[str, Any]] = {
    # The settings measured in reference/learning-feasibility.md (run R1).
    "arithmetic": {"dataset_builder": ArithmeticDatasetBuilder, "dataset_builder.n_batches": 60,
                   "dataset_builder.test_size": 100, "max_tokens": 16,
                   "dataset_builder.format_coef": 0.0},  # lenient: only the sum counts
    "guess_number": {"dataset_builder": GuessNumberDatasetBuilder, "dataset_builder.n_batches": 60,
                     "max_tokens": 8},
    "gsm8k": {"dataset_builder": Gsm8kDatasetBuilder, "max_tokens": 256, "eval_every": 0},
}


def build_config(env: str = "arithmetic") -> chz.Blueprint[train.Config]:
    """The recipe's defaults for `env` (arithmetic, guess_number or gsm8k)."""
    return chz.Blueprint(train.Config).apply({
        "log_path": LOG_PATH,
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the dataset builder can follow it
        "dataset_builder.model_name_for_tokenizer": Reference("model_name"),
        "dataset_builder.renderer_name": Reference("renderer_name"),
        "dataset_builder.batch_size": 8,
        "dataset_builder.group_size": 4,
        "learning_rate": 1e-4,
        # On-policy RL wants the sampler's log-probs to equal the trainer's. In fp32 they agree
        # exactly (optim/kl_sample_train_v1 = 0); bf16 on CPU samples no faster here and its fused
        # attention rounds a one-token decode step differently from a full forward, which puts
        # +-0.01 of noise into the KL metrics.
        "backend.precision": "float32",
        "temperature": 1.0,
        "remove_constant_reward_groups": True,  # they have zero advantage: skip their compute
        "eval_every": 20,
        "save_every": 20,
        **ENVS[env],
    })


def main(config: train.Config) -> None:
    train.main(config)


def pop_env(argv: list[str]) -> tuple[str, list[str]]:
    """The value of an `env=...` argument (default "arithmetic") and the other arguments."""
    values = [arg.split("=", 1)[1] for arg in argv if arg.startswith("env=")]
    env = values[-1] if values else "arithmetic"
    if env not in ENVS:
        raise SystemExit(f"error: env={env} is not one of {sorted(ENVS)}")
    return env, [arg for arg in argv if not arg.startswith("env=")]


if __name__ == "__main__":
    env, argv = pop_env(sys.argv[1:])
    run_recipe(main, build_config(env), argv)
