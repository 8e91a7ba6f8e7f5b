"""On-policy distillation: base SmolLM2-135M learns to write numbers in words from the model that
`make demo` trained, offline, on a laptop CPU.

    make demo                                                   # the teacher, into runs/demo (~7 min)
    python -m recipes.distillation.on_policy                    # the student, into /tmp/recipes-examples/...
    python -m recipes.distillation.on_policy teacher_log_path=runs/my-sl-run learning_rate=1e-4
    python -m recipes.distillation.on_policy teacher_model_path=local://run-.../sampler_weights/final
    python -m recipes.distillation.on_policy backend=tinker model_name=... teacher_model_path=tinker://...
    python -m recipes.distillation.on_policy --help             # every key, with its value

The student never sees an answer: it answers "Write 4072 in words." itself, the teacher scores each
of its tokens with `compute_logprobs`, and the per-token reverse KL (student minus teacher
log-prob) is the student's negative advantage under the `importance_sampling` loss. `teacher_kl`
falls as the student comes to write what the teacher would; held-out exact match
(`test/exact_match`, the same 48 numbers `make demo` holds out) rises from the base model's towards
the teacher's (`teacher/test/exact_match`, measured once at the start).
"""

from pathlib import Path

import chz
from chz.blueprint import Reference

from distillation import train
from distillation.datasets import NumberWordsPromptsBuilder
from recipes_lib.cli import run_recipe
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.paths import SMOLLM2_NAME
from supervised.number_words import SYSTEM_PROMPT, NumberWordsExactMatchBuilder

LOG_PATH = "/tmp/recipes-examples/distillation_on_policy"
DEMO_RUN = "runs/demo"


def build_config() -> chz.Blueprint[train.Config]:
    """The recipe's defaults: SmolLM2 distils the number-to-words teacher in runs/demo."""
    return chz.Blueprint(train.Config).apply({
        "log_path": LOG_PATH,
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the builders below can follow it
        "teacher_log_path": DEMO_RUN,
        "dataset_builder": NumberWordsPromptsBuilder,
        # 60 steps of 8 prompts, 4 answers each: 8 min on 2 cores, 0 % -> 50 % held-out exact match.
        "dataset_builder.batch_size": 8,
        "dataset_builder.num_prompts": 480,
        "dataset_builder.num_heldout": 48,
        "dataset_builder.seed": 0,
        "dataset_builder.system_prompt": SYSTEM_PROMPT,  # the prompt the teacher was trained with
        "group_size": 4,
        # The longest answer is 8 tokens with <|im_end|>; a rambling base-model answer is cut here.
        "max_tokens": 16,
        # As `make demo`: 1e-3 decaying linearly to 0. A constant 1e-3 reached 29 % held-out exact
        # match in 20 steps, then fell back to 12 % by step 30.
        "learning_rate": 1e-3,
        "lr_schedule": "linear",
        "eval_every": 10,
        "save_every": 50,
        "evaluator_builders.0": NumberWordsExactMatchBuilder,
        "evaluator_builders.0.model_name": Reference("model_name"),
        "evaluator_builders.0.renderer_name": Reference("renderer_name"),
        "evaluator_builders.0.num_heldout": Reference("dataset_builder.num_heldout"),
        "evaluator_builders.0.seed": Reference("dataset_builder.seed"),
        "evaluator_builders.0.system_prompt": Reference("dataset_builder.system_prompt"),
    })


def main(config: train.Config) -> None:
    if config.teacher_log_path == DEMO_RUN and not (Path(DEMO_RUN) / "checkpoints.jsonl").exists():
        raise ConfigurationError(
            f"The default teacher is the number-to-words model that `make demo` trains into {DEMO_RUN}, and "
            f"{DEMO_RUN}/checkpoints.jsonl does not exist here. Train it first with `make demo` (about 7 min on 2 "
            "cores; or `python -m recipes.sl_basic log_path=runs/demo`), or pass another teacher: "
            "teacher_log_path=<run folder>, teacher_model_path=<checkpoint> or teacher_model_name=<model>."
        )
    train.main(config)


if __name__ == "__main__":
    run_recipe(main, build_config())
