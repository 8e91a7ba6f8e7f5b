"""On-policy distillation on the RL loop: the student samples, the teacher scores, the student trains.

    python -m recipes.distillation.on_policy            # a recipe builds a Config and calls main()

`main` turns this Config into an `rl.train.Config` run with one hook (`rl.hooks`), so sampling,
training, evaluation, checkpoints and resume are the RL loop's. Each step:

1. each prompt of the batch is a single-turn env (`distillation.datasets.PromptEnv`, reward 0),
   sampled `group_size` times from the current student weights;
2. the teacher (a base model, a sampler checkpoint, or the last checkpoint of a run folder) scores
   every `prompt + completion` with `compute_logprobs` (`distillation.teacher.TeacherScorer`);
3. each sampled token's advantage is `-kl_penalty_coef * (student_logprob - teacher_logprob)`, the
   negative per-token reverse KL (optionally plus the minibatch's mean KL as a baseline, `center_kl`;
   see `distillation.advantages`), and the student trains on it with the `importance_sampling` loss
   (one `forward_backward` + `optim_step`);
4. with `forward_kl_topk=k > 0` the teacher also returns its k likeliest tokens at each position of
   the student's answer, and an extra `forward_backward` (`cross_entropy`, before the same
   `optim_step`) trains the student towards them, weighted by the teacher's probability: a top-k
   forward KL on the student's own prefixes. The sampled-token reverse KL alone cannot move a
   student that is already sure of a wrong token (its gradient vanishes as the token's probability
   nears 1); the teacher's distribution names the right one.

Logged per step: `teacher_kl` (the mean per-token reverse KL of the batch, which falls as the
student learns), `forward_kl_topk` (with `forward_kl_topk > 0`), `optim/entropy`,
`optim/kl_sample_train_v1|v2`, `completion_tokens`, `optim/lr` (with `lr_schedule`),
`progress/done_frac`, `time/...` and the RL loop's `env/all/...`. The evaluators (e.g. held-out exact
match, `test/exact_match`) run every `eval_every` steps and after the last; on a fresh run they also
score the teacher once (`teacher/test/exact_match`), the level the student is distilled towards.
Checkpoints every `save_every` steps and at the end; re-running with
`behavior_if_log_dir_exists=resume` continues.
"""

import asyncio
from typing import Literal

import chz

from distillation.datasets import PromptDatasetBuilder, PromptEnvDatasetBuilder
from distillation.teacher import TeacherScorer, TeacherSource, open_teacher
from recipes_lib.backends.protocols import ServiceClient
from recipes_lib.config import check_positive
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.run_config import RunConfig, run_settings
from recipes_lib.schedules import LRSchedule
from rl import train as rl_train
from rl.hooks import TrainingHooks

LossFn = Literal["importance_sampling", "ppo", "cispo", "dro"]
# The teacher's own evaluation is logged as `teacher/<metric>` (e.g. teacher/test/exact_match).
TEACHER_NAME = "teacher"


@chz.chz
class Config(RunConfig):
    """An on-policy distillation run: the shared run settings (`RunConfig`, of the student; it runs as
    an RL run, so eval_every=0 means never) and these."""

    # The prompts the student answers (see distillation.datasets).
    dataset_builder: PromptDatasetBuilder
    # The most tokens the student samples per answer.
    max_tokens: int
    # The teacher, exactly one of: a sampler checkpoint (local://... or tinker://...), a run folder
    # (its last sampler checkpoint), or a base model scored without LoRA. It must share the
    # student's tokenizer, since it scores the student's tokens.
    teacher_model_path: str | None = None
    teacher_log_path: str | None = None
    teacher_model_name: str | None = None
    # Completions sampled per prompt.
    group_size: int = 4
    # Sampling temperature of the student's completions; 1.0 samples the student itself.
    temperature: float = 1.0
    # Weight of the reverse KL in the advantages (advantage = -coef * (student - teacher) logprob).
    kl_penalty_coef: float = 1.0
    # 0: per-token advantages; in (0, 1]: each token also gets the discounted KL of the tokens after it.
    kl_discount_factor: float = 0.0
    # Subtract the batch's mean KL from each token's (a baseline; see distillation.advantages).
    center_kl: bool = False
    # k > 0: also train on the teacher's k likeliest tokens at each position of the student's answers
    # (cross-entropy weighted by the teacher's probability, i.e. a top-k forward KL on the student's
    # own prefixes; costs k more datums per answer). 0: the sampled-token reverse KL only.
    forward_kl_topk: int = 0
    # Weight of that forward-KL term against the reverse-KL advantages.
    forward_kl_coef: float = 1.0
    # Train the forward-KL term only up to the first sampled token that is not the teacher's likeliest
    # (that token included): after it, the teacher's tokens continue an answer that is already wrong.
    forward_kl_until_divergence: bool = False
    # How the learning rate moves over the run: constant, or a linear/cosine decay to 0.
    lr_schedule: LRSchedule = "constant"
    loss_fn: LossFn = "importance_sampling"
    loss_fn_config: dict[str, float] | None = None

    eval_every: int = chz.field(default=10, doc="Evaluate every this many steps (before training on the step) "
                                "and after the last; 0: never.")
    # Also run the evaluators on the teacher once at the start (`teacher/<metric>`).
    evaluate_teacher: bool = True

    @chz.validate
    def _check(self) -> None:
        check_positive(max_tokens=self.max_tokens, group_size=self.group_size)
        teachers = {"teacher_model_path": self.teacher_model_path, "teacher_log_path": self.teacher_log_path,
                    "teacher_model_name": self.teacher_model_name}
        given = [key for key, value in teachers.items() if value]
        if len(given) != 1:
            raise ConfigurationError(f"Pass exactly one teacher: teacher_model_path=<sampler checkpoint>, "
                                     f"teacher_log_path=<run folder> or teacher_model_name=<base model>; got "
                                     f"{given or 'none'}.")
        for key, value in {"kl_penalty_coef": self.kl_penalty_coef, "forward_kl_topk": self.forward_kl_topk,
                           "forward_kl_coef": self.forward_kl_coef, "temperature": self.temperature}.items():
            if value < 0:
                raise ConfigurationError(f"{key} must be >= 0, got {value}.")
        if not 0 <= self.kl_discount_factor <= 1:
            raise ConfigurationError(f"kl_discount_factor must be in [0, 1], got {self.kl_discount_factor}.")


def main(config: Config) -> None:
    """Run distillation to the end (blocking)."""
    asyncio.run(main_async(config))


async def main_async(config: Config) -> None:
    """Run distillation to the end, inside an existing event loop: the RL loop with the teacher's hook."""
    await rl_train.main_async(rl_config(config), lambda service: training_hooks(config, service))


def rl_config(config: Config) -> rl_train.Config:
    """The RL run that distils: the prompts as single-turn envs, the student's settings as they are."""
    dataset = PromptEnvDatasetBuilder(prompts=config.dataset_builder, model_name_for_tokenizer=config.model_name,
                                      renderer_name=config.renderer_name, group_size=config.group_size)
    return rl_train.Config(
        **run_settings(config), dataset_builder=dataset, max_tokens=config.max_tokens,
        temperature=config.temperature, loss_fn=config.loss_fn, loss_fn_config=config.loss_fn_config,
        lr_schedule=config.lr_schedule)


def training_hooks(config: Config, service: ServiceClient) -> TrainingHooks:
    """The teacher as the RL step's shaper, and as a reference evaluated once (`evaluate_teacher`)."""
    source = TeacherSource(config.teacher_model_path, config.teacher_log_path, config.teacher_model_name)
    teacher = open_teacher(source, config.model_name, config.backend, service)
    scorer = TeacherScorer(teacher, config.kl_penalty_coef, config.kl_discount_factor, config.center_kl,
                           config.forward_kl_topk, config.forward_kl_coef, config.forward_kl_until_divergence)
    references = {TEACHER_NAME: teacher} if config.evaluate_teacher else {}
    return TrainingHooks(shape_batch=scorer, reference_samplers=references)
