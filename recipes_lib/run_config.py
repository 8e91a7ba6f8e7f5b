"""`RunConfig`: the settings every training run has, declared once. The supervised, RL, DPO and
distillation configs extend it (a pipeline may change a default, and says why where it does)."""

from pathlib import Path
from typing import Any, Literal

import chz

from recipes_lib.config import BackendConfig, backend_field, check_positive
from recipes_lib.evaluators import EvaluatorBuilder
from recipes_lib.exceptions import ConfigurationError

LogdirBehavior = Literal["ask", "resume", "delete", "raise"]


def expand_user(_: object, path: str) -> str:
    """`~/runs/x` -> `/home/me/runs/x`; "" stays "" for the log-folder check to refuse."""
    return str(Path(path).expanduser()) if path.strip() else path


@chz.chz
class RunConfig:
    """Where a run writes, what it trains, how it resumes, and when it evaluates and saves."""

    log_path: str = chz.field(munger=expand_user, doc="The run's folder: config.json, metrics.jsonl, "
                              "checkpoints.jsonl and the pipeline's own files.")
    model_name: str = chz.field(doc="Base model to train a LoRA adapter on.")
    learning_rate: float = chz.field(doc="Adam's learning rate (its peak, where the pipeline has a schedule).")
    renderer_name: str | None = chz.field(default=None, doc="Chat format; None: the model's recommended renderer.")
    backend: BackendConfig = backend_field()
    load_checkpoint_path: str | None = chz.field(
        default=None, doc="Start from these weights (a state or sampler path) with a fresh optimizer; None: a new adapter.")
    behavior_if_log_dir_exists: LogdirBehavior = chz.field(
        default="ask", doc="What to do when log_path already holds a run: ask, resume, delete or raise.")
    lora_rank: int = chz.field(default=32, doc="Rank of the LoRA adapter.")
    seed: int | None = chz.field(default=0, doc="Seed of the LoRA initialisation (and of RL's samples), so reruns "
                                 "and resumed runs are comparable; None: random.")
    num_epochs: int = chz.field(default=1, doc="Passes over the training data.")
    max_steps: int | None = chz.field(
        default=None, doc="Stop after this many steps (a schedule then spans max_steps); None: all epochs.")
    eval_every: int = chz.field(default=10, doc="Run the evaluators every this many steps (step 0 gives the "
                                "starting point) and after the last; 0: only after the last.")
    evaluator_builders: list[EvaluatorBuilder] = chz.field(
        default_factory=list, doc="Evaluators of the weights, built once at the start.")
    save_every: int = chz.field(default=20, doc="Save a resumable checkpoint every this many steps; 0: only the "
                                "final one.")
    wandb_project: str | None = chz.field(default=None, doc="Also log to this Weights & Biases project.")
    wandb_name: str | None = chz.field(default=None, doc="The Weights & Biases run name.")

    @chz.validate
    def _check_run(self) -> None:
        check_positive(learning_rate=self.learning_rate, lora_rank=self.lora_rank)
        for key in ("eval_every", "save_every"):
            if getattr(self, key) < 0:
                raise ConfigurationError(f"{key} must be >= 0, got {getattr(self, key)}.")
        if self.num_epochs < 1 or (self.max_steps is not None and self.max_steps < 1):
            raise ConfigurationError("num_epochs and max_steps must be >= 1.")


def run_settings(config: RunConfig) -> dict[str, Any]:
    """The shared run fields of `config` by name, to build another pipeline's run from (a pipeline
    that runs on another's loop, as distillation runs on RL's)."""
    return {name: getattr(config, name) for name in chz.chz_fields(RunConfig)}
