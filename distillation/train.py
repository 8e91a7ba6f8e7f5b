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
from eval.evaluators import EvaluatorBuilder
from recipes_lib.backends.protocols import ServiceClient
from recipes_lib.cli import LogdirBehavior
from recipes_lib.config import BackendConfig, backend_field, check_positive
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.schedules import LRSchedule
from rl import train as rl_train
from rl.hooks import TrainingHooks

LossFn = Literal["importance_sampling", "ppo", "cispo", "dro"]
# The teacher's own evaluation is logged as `teacher/<metric>` (e.g. teacher/test/exact_match).
TEACHER_NAME = "teacher"


@chz.chz
class Config:
    """Everything an on-policy distillation run needs."""

    # Run folder: config.json (the RL run's), metrics.jsonl, checkpoints.jsonl, rollouts/.
    log_path: str
    # The student's base model (a LoRA adapter is trained on it).
    model_name: str
    # The prompts the student answers (see distillation.datasets).
    dataset_builder: PromptDatasetBuilder
    # Adam's peak learning rate.
    learning_rate: float
    # The most tokens the student samples per answer.
    max_tokens: int
    # The teacher, exactly one of: a sampler checkpoint (local://... or tinker://...), a run folder
    # (its last sampler checkpoint), or a base model scored without LoRA. It must share the
    # student's tokenizer, since it scores the student's tokens.
    teacher_model_path: str | None = None
    teacher_log_path: str | None = None
    teacher_model_name: str | None = None
    # The renderer of the prompts (None: the student model's recommended one).
    renderer_name: str | None = None
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
    lora_rank: int = 32
    # Seed of the LoRA initialisation and of every sample (per step, prompt and sample), so reruns and
    # resumed runs sample the same tokens; None: random, not reproducible.
    seed: int | None = 0
    # Start the student from these weights (fresh optimizer) instead of a new adapter.
    load_checkpoint_path: str | None = None
    backend: BackendConfig = backend_field()

    # Evaluate every this many steps (before training on the step) and after the last; 0: never.
    eval_every: int = 10
    evaluator_builders: list[EvaluatorBuilder] = chz.field(default_factory=list)
    # Also run the evaluators on the teacher once at the start (`teacher/<metric>`).
    evaluate_teacher: bool = True
    # Checkpoint (resumable state + sampler weights) every this many steps; 0: only at the end.
    save_every: int = 20
    max_steps: int | None = None
    behavior_if_log_dir_exists: LogdirBehavior = "ask"
    wandb_project: str | None = None
    wandb_name: str | None = None

    @chz.validate
    def _check(self) -> None:
        check_positive(learning_rate=self.learning_rate, max_tokens=self.max_tokens, group_size=self.group_size,
                       lora_rank=self.lora_rank)
        teachers = {"teacher_model_path": self.teacher_model_path, "teacher_log_path": self.teacher_log_path,
                    "teacher_model_name": self.teacher_model_name}
        given = [key for key, value in teachers.items() if value]
        if len(given) != 1:
            raise ConfigurationError(f"Pass exactly one teacher: teacher_model_path=<sampler checkpoint>, "
                                     f"teacher_log_path=<run folder> or teacher_model_name=<base model>; got "
                                     f"{given or 'none'}.")
        for key, value in {"kl_penalty_coef": self.kl_penalty_coef, "eval_every": self.eval_every,
                           "forward_kl_topk": self.forward_kl_topk, "forward_kl_coef": self.forward_kl_coef,
                           "save_every": self.save_every, "temperature": self.temperature}.items():
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
        log_path=config.log_path, model_name=config.model_name, dataset_builder=dataset,
        learning_rate=config.learning_rate, max_tokens=config.max_tokens, renderer_name=config.renderer_name,
        lora_rank=config.lora_rank, seed=config.seed, load_checkpoint_path=config.load_checkpoint_path,
        backend=config.backend, temperature=config.temperature, loss_fn=config.loss_fn,
        loss_fn_config=config.loss_fn_config, lr_schedule=config.lr_schedule, eval_every=config.eval_every,
        evaluator_builders=config.evaluator_builders, save_every=config.save_every, max_steps=config.max_steps,
        behavior_if_log_dir_exists=config.behavior_if_log_dir_exists, wandb_project=config.wandb_project,
        wandb_name=config.wandb_name)


def training_hooks(config: Config, service: ServiceClient) -> TrainingHooks:
    """The teacher as the RL step's shaper, and as a reference evaluated once (`evaluate_teacher`)."""
    source = TeacherSource(config.teacher_model_path, config.teacher_log_path, config.teacher_model_name)
    teacher = open_teacher(source, config.model_name, config.backend, service)
    scorer = TeacherScorer(teacher, config.kl_penalty_coef, config.kl_discount_factor, config.center_kl,
                           config.forward_kl_topk, config.forward_kl_coef, config.forward_kl_until_divergence)
    references = {TEACHER_NAME: teacher} if config.evaluate_teacher else {}
    return TrainingHooks(shape_batch=scorer, reference_samplers=references)
