"""Reinforcement learning: teach SmolLM2-135M to add, offline, on a laptop CPU.

    python -m recipes.rl_basic                                    # minutes on a laptop CPU (docs/figures.md)
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
written to `<log_path>/rollouts/`. `env=` picks the task and `env.<key>=...` sets its settings
(`env.batch_size=4`); every other key is a field of `rl.train.Config`.
"""

import chz
from chz.blueprint import Reference

from recipes.arithmetic.env import ArithmeticDatasetBuilder
from recipes.guess_number.env import GuessNumberDatasetBuilder
from recipes_lib.choices import Entry, NamedChoice, Preset
from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from rl import train
from rl.types import RLDatasetBuilder

LOG_PATH = "/tmp/recipes-examples/rl_basic"
ENVS: dict[str, Entry] = {
    # The settings whose held-out accuracy scripts/reproduce.sh measures (the README's table).
    "arithmetic": Preset(ArithmeticDatasetBuilder, n_batches=60, test_size=100,
                         format_coef=0.0),  # lenient: only the sum counts
    "guess_number": Preset(GuessNumberDatasetBuilder, n_batches=60),
    "gsm8k": "recipes.math.gsm8k:Gsm8kDatasetBuilder",
}
# Per environment: the most tokens per turn, and how often to evaluate (gsm8k: its test set is slow).
MAX_TOKENS = {ArithmeticDatasetBuilder: 16, GuessNumberDatasetBuilder: 8}
EVAL_EVERY = {ArithmeticDatasetBuilder: 20, GuessNumberDatasetBuilder: 20}


def _by_env(env: RLDatasetBuilder, table: dict[type, int], otherwise: int) -> int:
    return next((value for kind, value in table.items() if isinstance(env, kind)), otherwise)


def _max_tokens(config: "Config", value: int | None) -> int:
    return value if value is not None else _by_env(config.env, MAX_TOKENS, 256)


def _eval_every(config: "Config", value: int | None) -> int:
    return value if value is not None else _by_env(config.env, EVAL_EVERY, 0)


@chz.chz
class Config(train.Config):
    """`rl.train.Config` with the task chosen by `env=`; settings left unset follow the task."""

    env: RLDatasetBuilder = chz.field(meta_factory=NamedChoice("env", ENVS, default="arithmetic"),
                                      doc="arithmetic | guess_number | gsm8k (needs the hub)")
    # None: 16 for arithmetic, 8 for guess_number, 256 for gsm8k.
    max_tokens: int = chz.field(default=None, munger=_max_tokens, x_type=int | None)
    # None: every 20 iterations; never for gsm8k.
    eval_every: int = chz.field(default=None, munger=_eval_every, x_type=int | None)


def build_config() -> chz.Blueprint[Config]:
    """The recipe's defaults; the command line overrides any of them."""
    return chz.Blueprint(Config).apply({
        "log_path": LOG_PATH,
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the environment can follow it
        "dataset_builder": Reference("env"),
        "env.model_name_for_tokenizer": Reference("model_name"),
        "env.renderer_name": Reference("renderer_name"),
        "env.batch_size": 8,
        "env.group_size": 4,
        "learning_rate": 1e-4,
        # On-policy RL wants the sampler's log-probs to equal the trainer's. In fp32 they agree
        # exactly (optim/kl_sample_train_v1 = 0); bf16 on CPU samples no faster here and its fused
        # attention rounds a one-token decode step differently from a full forward, which puts
        # +-0.01 of noise into the KL metrics.
        "backend.precision": "float32",
        "temperature": 1.0,
        "remove_constant_reward_groups": True,  # they have zero advantage: skip their compute
        "save_every": 20,
    })


def main(config: train.Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
