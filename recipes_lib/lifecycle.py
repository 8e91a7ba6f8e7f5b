"""A run's lifecycle, the same in every pipeline: `start_run` (the log folder, the engine's home,
the checks of a resumed config), `open_run` (the training client, new or resumed, and the metrics
logger), and the schedule of evaluations and checkpoints (`eval_due`, `save_due`)."""

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from recipes_lib.backends import make_service_client
from recipes_lib.backends.protocols import ServiceClient, TrainingClient
from recipes_lib.checkpoints import CheckpointRecord, create_or_resume_training_client, load_checkpoints
from recipes_lib.config import BackendConfig
from recipes_lib.exceptions import ConfigurationError
from recipes_lib.log_folder import check_log_dir, check_writable
from recipes_lib.logging import CONFIG_FILE, MultiplexLogger, config_changes, dump_config, read_metrics
from recipes_lib.paths import recipes_home_path
from recipes_lib.run_config import LogdirBehavior, RunConfig
from recipes_lib.summary import setup_logging


class RunFolderSettings(Protocol):
    """What `start_run` reads: every `RunConfig`, and the small configs of the minimal loops."""

    @property
    def log_path(self) -> str: ...
    @property
    def behavior_if_log_dir_exists(self) -> LogdirBehavior: ...
    @property
    def backend(self) -> BackendConfig: ...


# Settings a checkpoint is tied to: resuming with another value would train something else
# than config.json says, so it is refused. Other changes are allowed and recorded.
RESUME_FIXED_KEYS = ("model_name", "lora_rank", "renderer_name", "model_name_for_tokenizer")


def start_run(config: RunFolderSettings) -> CheckpointRecord | None:
    """The checks every pipeline makes before any work: the log folder (and what to do with an
    earlier run in it), the writability of `$RECIPES_HOME` for the local engine, and, when
    resuming, that the checkpoint's model, rank and renderer are the ones asked for.

    Returns the checkpoint to resume from (the last one with a state), or None for a fresh run.
    """
    check_log_dir(config.log_path, config.behavior_if_log_dir_exists)
    if config.backend.kind == "local":
        check_writable(recipes_home_path(), "RECIPES_HOME")
    check_resume_config(config.log_path, config)
    read_metrics(config.log_path)  # a corrupt line stops the run here, before any work
    resumable = [record for record in load_checkpoints(config.log_path) if record.state_path]
    return resumable[-1] if resumable else None


@dataclass
class RunContext:
    """A started run: where it starts, how long it is, its clients and its metrics logger."""

    resume: CheckpointRecord | None
    start_step: int
    total_steps: int
    service_client: ServiceClient
    training_client: TrainingClient
    metrics_logger: MultiplexLogger


def open_run(config: RunConfig, resume: CheckpointRecord | None, total_steps: int, batches_per_epoch: int = 1,
             ) -> RunContext | None:
    """The rest of every trainer's start, once its data is built (after `start_run`'s checks).

    The run starts at the checkpoint's next step (`epoch * batches_per_epoch + batch`), or 0; when
    that is already `total_steps` it prints that there is nothing to do and returns None. Otherwise
    it creates the training client (the checkpoint's weights and optimizer, else
    `load_checkpoint_path`'s weights, else a new LoRA adapter from `config.seed`) and the metrics
    logger (config.json written, metrics.jsonl kept up to the start step).
    """
    start_step = resume_step(resume, batches_per_epoch)
    if start_step >= total_steps:
        print(f"{config.log_path} already holds a finished run ({total_steps} steps); nothing to do. Raise "
              "max_steps (or num_epochs) to train further, or pass a new log_path.")
        return None
    service = make_service_client(config.backend)
    client = create_or_resume_training_client(service, config.model_name, config.lora_rank, resume,
                                              config.load_checkpoint_path, seed=config.seed)
    if resume is not None:
        logging.getLogger(__name__).info("Resuming %s from checkpoint %r at step %d", config.log_path, resume.name,
                                         start_step)
    metrics_logger = setup_logging(config.log_path, config, total_steps, start_step, config.wandb_project,
                                   config.wandb_name)
    return RunContext(resume, start_step, total_steps, service, client, metrics_logger)


def resume_step(resume: CheckpointRecord | None, batches_per_epoch: int = 1) -> int:
    """The step a run continues at: the checkpoint's next batch (in its epoch), or 0."""
    return 0 if resume is None else resume.epoch * batches_per_epoch + resume.batch


def eval_due(every: int, step: int, total_steps: int) -> bool:
    """Whether the evaluations run before `step` (0-based): every `every` steps, step 0 included;
    not before the last step, which the evaluation after it covers (unless it is also the first).
    `every` = 0: never before a step (only after the last)."""
    return every > 0 and step % every == 0 and (step < total_steps - 1 or step == 0)


def save_due(every: int, steps_done: int, total_steps: int) -> bool:
    """Whether a periodic checkpoint follows the step that makes `steps_done` steps (every `every`);
    never after the last step, whose final checkpoint is saved separately. `every` = 0: never."""
    return every > 0 and steps_done % every == 0 and steps_done < total_steps


def check_resume_config(log_path: str | Path, config: object) -> None:
    """Refuse to resume a run whose model, LoRA rank or renderer would change."""
    previous_path = Path(log_path).expanduser() / CONFIG_FILE
    if not previous_path.exists():
        return
    try:
        previous = json.loads(previous_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{previous_path} is not valid JSON ({exc}); cannot check what the run was.") from None
    changed = config_changes(previous, dump_config(config))
    fixed = {key: change for key, change in changed.items() if key.rsplit(".", 1)[-1] in RESUME_FIXED_KEYS}
    if fixed:
        listed = "; ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in sorted(fixed.items()))
        raise ConfigurationError(
            f"Cannot resume {log_path} with other settings than its checkpoints were made with ({listed}). "
            "Drop these overrides to continue the run, or pass a new log_path to start another."
        )
