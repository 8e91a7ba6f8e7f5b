"""Reinforcement learning: teach SmolLM2-135M to add, offline, on a laptop CPU.

    python -m recipes.rl_basic                                    # minutes on a laptop CPU (docs/figures.md)
    python -m recipes.rl_basic loss_fn=ppo num_substeps=2
    python -m recipes.rl_basic async_config.max_steps_off_policy=2 async_config.groups_per_batch=8
    python -m recipes.rl_basic stream_minibatch_config.groups_per_batch=8 stream_minibatch_config.num_minibatches=2
    python -m recipes.rl_basic env=guess_number max_tokens=8      # multi-turn (recipes/guess_number/)
    python -m recipes.rl_basic --help                             # every key, with its value

Each iteration samples 4 answers to each of 8 problems "What is A + B?" (A, B in 1..20), rewards
an answer whose last integer is the sum, and trains on each answer's reward minus its group's
mean; greedy accuracy on 100 held-out problems is `test/env/all/correct` (recipes/arithmetic/).
Transcripts of a few groups per iteration are printed and written to `<log_path>/rollouts/`.
`env=` picks the task by name (`recipes/envs.py`), `env.<key>=...` sets its settings; every other
key is a field of `rl.train_cli.Config`. GSM8K and MATH have their own recipe, `recipes.math.train`.
"""

import chz

from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from rl import train, train_cli


def build_config() -> chz.Blueprint[train_cli.Config]:
    """The recipe's defaults; the command line overrides any of them."""
    return train_cli.build_config().apply({
        "log_path": "/tmp/recipes-examples/rl_basic",
        "model_name": SMOLLM2_NAME,
        "learning_rate": 1e-4,
        "max_tokens": 16,  # "A + B = C" and the end of turn fit; a rambling answer is cut off
        "eval_every": 20,
        # `backend.precision` stays `auto`: bf16 where it is native (the sampler's log-probs equal the
        # trainer's there too, so optim/kl_sample_train_v1 stays near 0), fp32 elsewhere.
        "temperature": 1.0,
        "remove_constant_reward_groups": True,  # they have zero advantage: skip their compute
        "save_every": 20,
    })


def main(config: train.Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
