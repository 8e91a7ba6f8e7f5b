"""On-policy distillation: base SmolLM2-135M learns to write numbers in words from the model that
`make demo` trained, offline, on a laptop CPU.

    make demo                                                   # the teacher, into runs/demo
    python -m recipes.distillation.on_policy                    # the student, into /tmp/recipes-examples/...
    python -m recipes.distillation.on_policy teacher_log_path=runs/my-sl-run learning_rate=1e-4
    python -m recipes.distillation.on_policy teacher_model_path=local://run-.../sampler_weights/final
    python -m recipes.distillation.on_policy backend=tinker model_name=... teacher_model_path=tinker://...
    python -m recipes.distillation.on_policy --help             # every key, with its value

The student never sees an answer: it answers "Write 4072 in words." itself and the teacher scores
each of its tokens. By default the student trains towards the teacher's two likeliest tokens at
each position of its answer, weighted by the teacher's probability, up to the first token the
teacher would not have written (a top-k forward KL on the student's own answers); `teacher_kl`, the
per-token reverse KL (student minus teacher log-prob), is logged and falls as the student learns.
`kl_penalty_coef=1 forward_kl_topk=0` trains on the reverse KL alone, as the student's negative
advantage under `importance_sampling` (the cookbook's method; it stalls well below the teacher
here: docs/findings.md). Held-out exact match (`test/exact_match`, the same 48 numbers `make demo` holds out) rises
from the base model's towards the teacher's (`teacher/test/exact_match`, measured once at the start).
"""

import sys
from collections.abc import Sequence
from pathlib import Path

import chz
from chz.blueprint import Reference

from distillation import train
from recipes.number_words.evaluator import NumberWordsExactMatchBuilder
from recipes.number_words.prompts import NumberWordsPromptsBuilder
from recipes.number_words.task import SYSTEM_PROMPT
from recipes_lib.cli import run_recipe
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.paths import SMOLLM2_NAME

LOG_PATH = "/tmp/recipes-examples/distillation_on_policy"
DEMO_RUN = "runs/demo"


TEACHER_KEYS = ("teacher_log_path", "teacher_model_path", "teacher_model_name")


def build_config(argv: Sequence[str] = ()) -> chz.Blueprint[train.Config]:
    """The recipe's defaults: SmolLM2 distils the number-to-words teacher in runs/demo, unless `argv`
    names another teacher."""
    other_teacher = any(arg.split("=", 1)[0] in TEACHER_KEYS for arg in argv)
    return chz.Blueprint(train.Config).apply({
        "log_path": LOG_PATH,
        "model_name": SMOLLM2_NAME,
        "renderer_name": None,  # set explicitly so the builders below can follow it
        "teacher_log_path": None if other_teacher else DEMO_RUN,
        "dataset_builder": NumberWordsPromptsBuilder,
        # 55 steps of 32 prompts, one answer each: distinct prompts teach more than repeated answers.
        "dataset_builder.batch_size": 32,
        "dataset_builder.num_prompts": 1760,
        "dataset_builder.num_heldout": 48,
        "dataset_builder.seed": 0,
        "dataset_builder.system_prompt": SYSTEM_PROMPT,  # the prompt the teacher was trained with
        "group_size": 1,
        # The longest answer is 8 tokens with <|im_end|>; a rambling base-model answer is cut here.
        "max_tokens": 16,
        # The sampled-token reverse KL stalls below the teacher, alone or beside the forward KL
        # (docs/findings.md); the teacher's top 2 at each position of the student's answers, up to the first token
        # the teacher would not have written, carry the run to the teacher's level. The reverse KL is
        # still measured (`teacher_kl`); kl_penalty_coef=1 forward_kl_topk=0 trains on it alone.
        "kl_penalty_coef": 0.0,
        "forward_kl_topk": 2,
        "forward_kl_until_divergence": True,
        # As `make demo`: 1e-3 decaying linearly to 0.
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
    run_recipe(main, build_config(sys.argv[1:]))
