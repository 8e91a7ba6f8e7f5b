"""Multi-turn RL: SmolLM2-135M plays twenty questions against its own untrained copy, offline.

    python -m recipes.twenty_questions.train                       # small settings (see the timing below)
    python -m recipes.twenty_questions.train dataset_builder.num_candidates=4   # the easier game
    python -m recipes.twenty_questions.train dataset_builder.max_turns=20 max_steps=100
    python -m recipes.twenty_questions.train --help                # every key, with its value

Each iteration plays 4 games (4 secret words from 210 training words) 4 times each. In a game the
player asks yes/no questions, which the answerer (the same base model, untrained, told the secret
word) answers, and guesses with "Guess: <word>"; a win at turn t earns 1 - 0.02 * (t - 1). Logged
per iteration: `env/all/win` (win rate), `env/all/turns` (turns per game), `env/all/guesses`,
`env/all/unclear_answers`; greedy games on 8 held-out words before and after training
(`test/env/all/win`); and whole games, turn by turn, in `<log_path>/rollouts/iteration_<n>.txt`.

The defaults keep the run short, not strong. SmolLM2-135M does not learn this game: it wins no
games before training, so every group has reward 0 and nothing is trained (`optim/num_datums` 0;
the runs are in docs/findings.md). It rarely writes "Guess: <word>" with a word in it, and as the
answerer it mostly replies neither yes nor no (`env/all/unclear_answers`). A player
that wins some games before training is needed: a larger instruction model (`model_name=...`,
`dataset_builder.answerer_model_name=...`), or a supervised warm start on games in this format.
"""

import chz
from chz.blueprint import Reference

from recipes.twenty_questions.env import TwentyQuestionsDatasetBuilder
from recipes_lib.cli import run_recipe
from recipes_lib.paths import SMOLLM2_NAME
from rl import train

LOG_PATH = "/tmp/recipes-examples/twenty_questions"


def build_config() -> chz.Blueprint[train.Config]:
    """The recipe's defaults: small enough for a 2-core CPU."""
    return chz.Blueprint(train.Config).apply({
        "log_path": LOG_PATH,
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the dataset builder can follow it
        "dataset_builder": TwentyQuestionsDatasetBuilder,
        "dataset_builder.model_name_for_tokenizer": Reference("model_name"),
        "dataset_builder.renderer_name": Reference("renderer_name"),
        "dataset_builder.backend": Reference("backend"),  # the answerer samples where the player trains
        "dataset_builder.batch_size": 4,
        "dataset_builder.group_size": 4,
        "dataset_builder.n_batches": 6,
        "dataset_builder.max_turns": 4,
        "dataset_builder.max_test_words": 8,
        "max_tokens": 24,  # a question or a guess is short; longer replies are cut (parse_error)
        "learning_rate": 1e-4,
        "backend.precision": "float32",  # the sampler's and trainer's log-probs agree exactly
        "temperature": 1.0,
        "remove_constant_reward_groups": True,  # all-lost groups have zero advantage: skip their compute
        "eval_every": 6,  # = n_batches: the test games are played before the first and after the last step
        "save_every": 0,
        "num_groups_to_log": 2,
    })


def main(config: train.Config) -> None:
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
